package shard

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
)

// The peer protocol: one gRPC method, /sluice.shard.v1.Peer/Take, whose
// request and response are google.protobuf.BytesValue holding JSON: a batch
// of calls, each a TakeAll, answered in order. Batching concurrent forwards
// to one peer into one call is what makes forwarding cheap.
const takeMethod = "/sluice.shard.v1.Peer/Take"

type wireRequest struct {
	Key       string           `json:"k"`
	Algorithm sluice.Algorithm `json:"a"`
	Rate      int64            `json:"r"`
	Period    time.Duration    `json:"p"`
	Burst     int64            `json:"b,omitempty"`
	Cost      int64            `json:"c"`
	Force     bool             `json:"f,omitempty"`
	NowUnixUS int64            `json:"n,omitempty"`
}

type wireCall struct {
	Reqs  []wireRequest `json:"q"`
	Reset bool          `json:"x,omitempty"` // Reset the first request's key instead
}

type wireDecision struct {
	Allowed    bool          `json:"a,omitempty"`
	Remaining  int64         `json:"r"`
	RetryAfter time.Duration `json:"t,omitempty"`
	ResetAfter time.Duration `json:"s,omitempty"`
	Delay      time.Duration `json:"d,omitempty"`
}

type wireResult struct {
	Decisions []wireDecision `json:"d"`
	Err       string         `json:"e,omitempty"`
}

func toWire(r sluice.Request) wireRequest {
	w := wireRequest{Key: r.Key, Algorithm: r.Limit.Algorithm, Rate: r.Limit.Rate, Period: r.Limit.Period, Burst: r.Limit.Burst, Cost: r.Cost, Force: r.Force}
	if !r.Now.IsZero() {
		w.NowUnixUS = r.Now.UnixMicro()
	}
	return w
}

func (w wireRequest) request() sluice.Request {
	r := sluice.Request{Key: w.Key, Limit: sluice.Limit{Algorithm: w.Algorithm, Rate: w.Rate, Period: w.Period, Burst: w.Burst}, Cost: w.Cost, Force: w.Force}
	if w.NowUnixUS != 0 {
		r.Now = time.UnixMicro(w.NowUnixUS)
	}
	return r
}

// Register adds the peer service, deciding with local, to a gRPC server.
func Register(s *grpc.Server, local sluice.Store) {
	s.RegisterService(&grpc.ServiceDesc{
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
	}, nil)
}

// maxBatch bounds the calls in one peer request.
const maxBatch = 1024

func serve(ctx context.Context, local sluice.Store, body []byte) ([]byte, error) {
	var calls []wireCall
	if err := json.Unmarshal(body, &calls); err != nil {
		return nil, err
	}
	if len(calls) > maxBatch {
		calls = calls[:0]
	}
	results := make([]wireResult, len(calls))
	for i, c := range calls {
		results[i] = serveCall(ctx, local, c)
	}
	return json.Marshal(results)
}

func serveCall(ctx context.Context, local sluice.Store, c wireCall) wireResult {
	if len(c.Reqs) == 0 || len(c.Reqs) > 64 {
		return wireResult{Err: "shard: a call holds 1 to 64 requests"}
	}
	reqs := make([]sluice.Request, len(c.Reqs))
	for i, w := range c.Reqs {
		reqs[i] = w.request()
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
