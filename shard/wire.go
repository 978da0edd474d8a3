package shard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	shardv1 "github.com/sluicehq/sluice/api/shardv1"
)

// The peer protocol is the generated service sluice.shard.v1.Peer
// (api/shardv1/shard.proto): one bidirectional stream per peer, on which
// each Batch of calls is answered by one BatchResult in order. Batching
// concurrent forwards to one peer is what makes forwarding cheap, and a
// stream spares each batch a call's setup (headers, a new HTTP/2 stream),
// which cost more than the batch itself when batches are small.
const (
	// maxBatch bounds the calls in one batch, maxCallReqs the requests in
	// one call.
	maxBatch    = 1024
	maxCallReqs = 64
	maxZone     = 255
)

// toWire returns the message of r.
func toWire(r sluice.Request) *shardv1.Request {
	w := &shardv1.Request{
		Key:       unsafe.Slice(unsafe.StringData(r.Key), len(r.Key)), // read only: marshalled, never written
		Algorithm: uint32(r.Limit.Algorithm), Rate: r.Limit.Rate, PeriodUs: r.Limit.Period.Microseconds(),
		Burst: r.Limit.Burst, Cost: r.Cost, Force: r.Force, CountAll: r.Limit.CountAll,
	}
	if r.Limit.Zone != nil {
		w.Zone = r.Limit.Zone.String()
	}
	if !r.Now.IsZero() {
		w.NowUnixUs = r.Now.UnixMicro()
	}
	return w
}

// request returns the Request of w, whose key shares w's memory: valid
// while w is, which is the whole of one batch (stores copy what they
// keep).
func request(w *shardv1.Request) (sluice.Request, error) {
	if len(w.Zone) > maxZone {
		return sluice.Request{}, fmt.Errorf("%w: zone of %d bytes", sluice.ErrInvalidLimit, len(w.Zone))
	}
	r := sluice.Request{
		Key:   unsafe.String(unsafe.SliceData(w.Key), len(w.Key)),
		Limit: sluice.Limit{Algorithm: sluice.Algorithm(w.Algorithm), Rate: w.Rate, Period: time.Duration(w.PeriodUs) * time.Microsecond, Burst: w.Burst, CountAll: w.CountAll},
		Cost:  w.Cost, Force: w.Force,
	}
	if w.NowUnixUs != 0 {
		r.Now = time.UnixMicro(w.NowUnixUs)
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

func decisionOf(d sluice.Decision) *shardv1.Decision {
	return &shardv1.Decision{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfterUs: d.RetryAfter.Microseconds(),
		ResetAfterUs: d.ResetAfter.Microseconds(), DelayUs: d.Delay.Microseconds()}
}

// The errors of sluice's own that travel by name, and back to the same
// value.
var errorNames = map[string]error{
	"EMPTY_KEY":          sluice.ErrEmptyKey,
	"KEY_TOO_LONG":       sluice.ErrKeyTooLong,
	"COST_EXCEEDS_BURST": sluice.ErrCostExceedsBurst,
	"NEGATIVE_COST":      sluice.ErrNegativeCost,
	"INVALID_TIME":       sluice.ErrInvalidTime,
	"DUPLICATE_REQUEST":  sluice.ErrDuplicateRequest,
	"INVALID_LIMIT":      sluice.ErrInvalidLimit,
}

// errorOf returns the message of a call's error: InvalidArgument and its
// name for sluice's input errors, Unavailable for the rest.
func errorOf(err error) *shardv1.Error {
	for name, e := range errorNames {
		if errors.Is(err, e) {
			return &shardv1.Error{Code: int32(codes.InvalidArgument), Reason: name, Message: err.Error()}
		}
	}
	return &shardv1.Error{Code: int32(codes.Unavailable), Message: err.Error()}
}

// callError returns the error a call's message carries, wrapping the
// sluice error it names, so that errors.Is holds across peers.
func callError(e *shardv1.Error) error {
	if known, ok := errorNames[e.Reason]; ok {
		if e.Message == known.Error() {
			return known
		}
		return fmt.Errorf("%w (at the owner: %s)", known, e.Message)
	}
	return status.Error(codes.Code(e.Code), "shard: owner: "+e.Message)
}

// Register adds the peer service, deciding with local, to a gRPC server.
func Register(s *grpc.Server, local sluice.Store) {
	shardv1.RegisterPeerServer(s, &service{local: local})
}

type service struct {
	shardv1.UnimplementedPeerServer
	local sluice.Store
}

func (sv *service) Take(stream grpc.BidiStreamingServer[shardv1.Batch, shardv1.BatchResult]) error {
	for {
		in, err := stream.Recv()
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if in.Version != shardv1.Version_VERSION_1 {
			return status.Errorf(codes.FailedPrecondition, "shard: batch of protocol %v; this peer speaks %v", in.Version, shardv1.Version_VERSION_1)
		}
		if len(in.Calls) == 0 || len(in.Calls) > maxBatch {
			return status.Errorf(codes.InvalidArgument, "shard: a batch holds 1 to %d calls, not %d", maxBatch, len(in.Calls))
		}
		out := &shardv1.BatchResult{Results: make([]*shardv1.Result, len(in.Calls))}
		for i, c := range in.Calls {
			out.Results[i] = serveCall(stream.Context(), sv.local, c)
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

// serveCall decides c.
func serveCall(ctx context.Context, local sluice.Store, c *shardv1.Call) *shardv1.Result {
	if len(c.Requests) == 0 || len(c.Requests) > maxCallReqs {
		return &shardv1.Result{Error: &shardv1.Error{Code: int32(codes.InvalidArgument), Message: fmt.Sprintf("shard: a call holds 1 to %d requests", maxCallReqs)}}
	}
	reqs := make([]sluice.Request, len(c.Requests))
	for i, w := range c.Requests {
		var err error
		if reqs[i], err = request(w); err != nil {
			return &shardv1.Result{Error: errorOf(err)}
		}
	}
	if c.ResetKey {
		if err := local.Reset(ctx, reqs[0].Key, reqs[0].Limit); err != nil {
			return &shardv1.Result{Error: errorOf(err)}
		}
		return &shardv1.Result{}
	}
	if len(reqs) == 1 { // the usual forward
		d, err := local.Take(ctx, reqs[0])
		if err != nil {
			return &shardv1.Result{Error: errorOf(err)}
		}
		return &shardv1.Result{Decisions: []*shardv1.Decision{decisionOf(d)}}
	}
	ds := make([]sluice.Decision, len(reqs))
	if err := local.TakeAll(ctx, reqs, ds); err != nil {
		return &shardv1.Result{Error: errorOf(err)}
	}
	out := &shardv1.Result{Decisions: make([]*shardv1.Decision, len(ds))}
	for i, d := range ds {
		out.Decisions[i] = decisionOf(d)
	}
	return out
}

// decisions converts a call's result for reqs.
func decisions(res *shardv1.Result, reqs []sluice.Request, dst []sluice.Decision) error {
	if res.Error != nil {
		return callError(res.Error)
	}
	if len(res.Decisions) != len(reqs) {
		return fmt.Errorf("shard: %d decisions for %d requests", len(res.Decisions), len(reqs))
	}
	for i, d := range res.Decisions {
		dst[i] = sluice.Decision{Allowed: d.Allowed, Limit: reqs[i].Limit, Remaining: d.Remaining,
			RetryAfter: time.Duration(d.RetryAfterUs) * time.Microsecond, ResetAfter: time.Duration(d.ResetAfterUs) * time.Microsecond,
			Delay: time.Duration(d.DelayUs) * time.Microsecond}
	}
	return nil
}
