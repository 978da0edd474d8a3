package shard

import (
	"context"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
)

// The peer protocol: /sluice.shard.v1.Peer/TakeStream, a bidirectional
// stream on which each message is a google.protobuf.BytesValue holding a
// batch of calls, each a TakeAll, answered by one message of their results
// in order (codec.go); and /sluice.shard.v1.Peer/Take, the same for one
// batch as a unary call, for peers that predate the stream. Batching
// concurrent forwards to one peer is what makes forwarding cheap, and a
// stream spares each batch a call's setup (headers, a new HTTP/2 stream),
// which cost more than the batch itself when batches are small.
const (
	takeMethod       = "/sluice.shard.v1.Peer/Take"
	takeStreamMethod = "/sluice.shard.v1.Peer/TakeStream"
)

var takeStreamDesc = grpc.StreamDesc{StreamName: "TakeStream", ServerStreams: true, ClientStreams: true}

type wireRequest struct {
	Key       string
	Algorithm sluice.Algorithm
	Rate      int64
	Period    time.Duration
	Burst     int64
	Cost      int64
	Force     bool
	NowUnixUS int64  // 0: the owner's clock
	Zone      string // a calendar limit's time zone; "" for UTC
}

type wireCall struct {
	Reqs  []wireRequest
	Reset bool // Reset the first request's key instead
}

type wireDecision struct {
	Allowed                       bool
	Remaining                     int64
	RetryAfter, ResetAfter, Delay time.Duration
}

type wireResult struct {
	Decisions []wireDecision
	Err       string
}

func toWire(r sluice.Request) wireRequest {
	w := wireRequest{Key: r.Key, Algorithm: r.Limit.Algorithm, Rate: r.Limit.Rate, Period: r.Limit.Period, Burst: r.Limit.Burst, Cost: r.Cost, Force: r.Forced()}
	if r.Limit.Zone != nil {
		w.Zone = r.Limit.Zone.String()
	}
	if !r.Now.IsZero() {
		w.NowUnixUS = r.Now.UnixMicro()
	}
	return w
}

func (w wireRequest) request() (sluice.Request, error) {
	r := sluice.Request{Key: w.Key, Limit: sluice.Limit{Algorithm: w.Algorithm, Rate: w.Rate, Period: w.Period, Burst: w.Burst}, Cost: w.Cost, Force: w.Force}
	if w.NowUnixUS != 0 {
		r.Now = time.UnixMicro(w.NowUnixUS)
	}
	if w.Zone != "" {
		z, err := sluice.LoadZone(w.Zone)
		if err != nil {
			return r, err
		}
		r.Limit.Zone = z
	}
	return r, nil
}

// Register adds the peer service, deciding with local, to a gRPC server.
func Register(s *grpc.Server, local sluice.Store) {
	desc := unaryService(local)
	stream := takeStreamDesc
	stream.Handler = func(_ any, ss grpc.ServerStream) error {
		for {
			in := new(wrapperspb.BytesValue)
			if err := ss.RecvMsg(in); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
			out, err := serve(ss.Context(), local, in.Value)
			if err != nil {
				return err
			}
			if err := ss.SendMsg(wrapperspb.Bytes(out)); err != nil {
				return err
			}
		}
	}
	desc.Streams = []grpc.StreamDesc{stream}
	s.RegisterService(desc, nil)
}

// unaryService is the peer service with the unary method alone, as peers
// that predate the stream serve it.
func unaryService(local sluice.Store) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "sluice.shard.v1.Peer",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Take",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.BytesValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				out, err := serve(ctx, local, in.Value)
				if err != nil {
					return nil, err
				}
				return wrapperspb.Bytes(out), nil
			},
		}},
	}
}

// maxBatch bounds the calls in one peer request.
const maxBatch = 1024

func serve(ctx context.Context, local sluice.Store, body []byte) ([]byte, error) {
	calls, err := decodeCalls(body)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	results := make([]wireResult, len(calls))
	one := make([]wireDecision, len(calls)) // the decisions of one-request calls
	for i, c := range calls {
		results[i] = serveCall(ctx, local, c, one[i:i+1:i+1])
	}
	return appendResults(nil, results), nil
}

// serveCall decides c; a one-request call's decision goes in one.
func serveCall(ctx context.Context, local sluice.Store, c wireCall, one []wireDecision) wireResult {
	if len(c.Reqs) == 0 || len(c.Reqs) > 64 {
		return wireResult{Err: "shard: a call holds 1 to 64 requests"}
	}
	if len(c.Reqs) == 1 && !c.Reset { // the usual forward: no slices
		req, err := c.Reqs[0].request()
		if err != nil {
			return wireResult{Err: err.Error()}
		}
		d, err := local.Take(ctx, req)
		if err != nil {
			return wireResult{Err: err.Error()}
		}
		one[0] = wireDecision{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, Delay: d.Delay}
		return wireResult{Decisions: one}
	}
	reqs := make([]sluice.Request, len(c.Reqs))
	for i, w := range c.Reqs {
		var err error
		if reqs[i], err = w.request(); err != nil {
			return wireResult{Err: err.Error()}
		}
	}
	if c.Reset {
		if err := local.Reset(ctx, reqs[0].Key, reqs[0].Limit); err != nil {
			return wireResult{Err: err.Error()}
		}
		return wireResult{}
	}
	ds := make([]sluice.Decision, len(reqs))
	if err := local.TakeAll(ctx, reqs, ds); err != nil {
		return wireResult{Err: err.Error()}
	}
	out := wireResult{Decisions: make([]wireDecision, len(ds))}
	for i, d := range ds {
		out.Decisions[i] = wireDecision{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, Delay: d.Delay}
	}
	return out
}
