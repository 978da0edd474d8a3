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
// each Batch of calls is answered by one BatchResult in order. A batch is
// columnar, each field of the requests one packed list, so that reading
// one costs a few allocations whatever its size.
const (
	// maxBatch bounds the calls in one batch, maxCallReqs the requests in
	// one call.
	maxBatch    = 1024
	maxCallReqs = 64
	maxZone     = 255
)

// appendCall appends a call of reqs (or with reset, the Reset of the
// first's key and limit) to b, with call flags on each of its requests.
func appendCall(b *shardv1.Batch, reqs []sluice.Request, reset bool, call uint32) {
	if reset || len(b.CallResets) > 0 {
		for len(b.CallResets) < len(b.CallSizes) {
			b.CallResets = append(b.CallResets, false)
		}
		b.CallResets = append(b.CallResets, reset)
	}
	b.CallSizes = append(b.CallSizes, uint32(len(reqs)))
	for i := range reqs {
		r := &reqs[i]
		b.Keys = append(b.Keys, r.Key...)
		b.KeyLengths = append(b.KeyLengths, uint32(len(r.Key)))
		b.Algorithms = append(b.Algorithms, uint32(r.Limit.Algorithm))
		b.Rates = append(b.Rates, r.Limit.Rate)
		b.PeriodsUs = append(b.PeriodsUs, r.Limit.Period.Microseconds())
		b.Bursts = append(b.Bursts, r.Limit.Burst)
		// A refund travels as its cost negated, with the time of the take
		// it refunds for its now: a peer without refunds refuses it
		// (NEGATIVE_COST) rather than taking it.
		cost, at := r.Cost, r.Now
		if !r.Refund.IsZero() {
			cost, at = -cost, r.Refund
		}
		b.Costs = append(b.Costs, cost)
		flags := call
		if r.Force {
			flags |= uint32(shardv1.Flag_FLAG_FORCE)
		}
		if r.Limit.CountAll {
			flags |= uint32(shardv1.Flag_FLAG_COUNT_ALL)
		}
		b.Flags = append(b.Flags, flags)
		var now int64
		if !at.IsZero() {
			now = at.UnixMicro()
		}
		b.NowUnixUs = append(b.NowUnixUs, now)
		if r.Limit.Zone != nil || len(b.ZoneIndex) > 0 {
			for len(b.ZoneIndex) < len(b.KeyLengths)-1 {
				b.ZoneIndex = append(b.ZoneIndex, 0)
			}
			var zi uint32
			if r.Limit.Zone != nil {
				zi = zoneIndex(b, r.Limit.Zone.String())
			}
			b.ZoneIndex = append(b.ZoneIndex, zi)
		}
	}
}

// zoneIndex returns name's index in b.Zones plus one, adding it.
func zoneIndex(b *shardv1.Batch, name string) uint32 {
	for i, z := range b.Zones {
		if z == name {
			return uint32(i + 1)
		}
	}
	b.Zones = append(b.Zones, name)
	return uint32(len(b.Zones))
}

// resetBatch empties b, keeping its lists' memory.
func resetBatch(b *shardv1.Batch) {
	b.Version = shardv1.Version_VERSION_1
	b.CallSizes, b.CallResets, b.Keys, b.KeyLengths = b.CallSizes[:0], b.CallResets[:0], b.Keys[:0], b.KeyLengths[:0]
	b.Algorithms, b.Rates, b.PeriodsUs, b.Bursts = b.Algorithms[:0], b.Rates[:0], b.PeriodsUs[:0], b.Bursts[:0]
	b.Costs, b.Flags, b.NowUnixUs, b.ZoneIndex, b.Zones = b.Costs[:0], b.Flags[:0], b.NowUnixUs[:0], b.ZoneIndex[:0], b.Zones[:0]
	b.BudgetsUs = b.BudgetsUs[:0]
}

// budget is a call's Batch.budgets_us for the time its caller has left:
// at least 1 µs while it has any, -1 once it has none (0 says none was
// given).
func budget(left time.Duration) int64 {
	if left <= 0 {
		return -1
	}
	return max(left.Microseconds(), 1)
}

// checkBatch reports why b is not a well-formed batch, or nil.
func checkBatch(b *shardv1.Batch) error {
	if b.Version != shardv1.Version_VERSION_1 {
		return status.Errorf(codes.FailedPrecondition, "shard: batch of protocol %v; this peer speaks %v", b.Version, shardv1.Version_VERSION_1)
	}
	if b.HandedOff != "" && len(b.CallSizes) == 0 && len(b.KeyLengths) == 0 {
		return nil // a hand-off's end: no calls
	}
	if len(b.CallSizes) == 0 || len(b.CallSizes) > maxBatch {
		return status.Errorf(codes.InvalidArgument, "shard: a batch holds 1 to %d calls, not %d", maxBatch, len(b.CallSizes))
	}
	if len(b.BudgetsUs) > len(b.CallSizes) {
		return status.Errorf(codes.InvalidArgument, "shard: %d budgets for %d calls", len(b.BudgetsUs), len(b.CallSizes))
	}
	n := 0
	for _, size := range b.CallSizes {
		if size == 0 || size > maxCallReqs {
			return status.Errorf(codes.InvalidArgument, "shard: a call holds 1 to %d requests, not %d", maxCallReqs, size)
		}
		n += int(size)
	}
	keys := 0
	for _, l := range b.KeyLengths {
		keys += int(l)
	}
	for _, col := range []int{len(b.KeyLengths), len(b.Algorithms), len(b.Rates), len(b.PeriodsUs), len(b.Bursts), len(b.Costs), len(b.Flags), len(b.NowUnixUs)} {
		if col != n {
			return status.Errorf(codes.InvalidArgument, "shard: a column of %d for %d requests", col, n)
		}
	}
	switch {
	case keys != len(b.Keys):
		return status.Errorf(codes.InvalidArgument, "shard: key lengths add up to %d, keys hold %d bytes", keys, len(b.Keys))
	case len(b.CallResets) != 0 && len(b.CallResets) != len(b.CallSizes):
		return status.Errorf(codes.InvalidArgument, "shard: %d resets for %d calls", len(b.CallResets), len(b.CallSizes))
	case len(b.ZoneIndex) != 0 && len(b.ZoneIndex) != n:
		return status.Errorf(codes.InvalidArgument, "shard: %d zone indexes for %d requests", len(b.ZoneIndex), n)
	}
	for _, zi := range b.ZoneIndex {
		if int(zi) > len(b.Zones) {
			return status.Errorf(codes.InvalidArgument, "shard: zone %d of %d", zi, len(b.Zones))
		}
	}
	return nil
}

// request returns request j of b, at key offset off. Its key shares b's
// memory: valid while b is, which is the whole of one batch (stores copy
// what they keep).
func request(b *shardv1.Batch, j, off int) (sluice.Request, error) {
	var key string
	if n := int(b.KeyLengths[j]); n > 0 {
		key = unsafe.String(&b.Keys[off], n)
	}
	r := sluice.Request{
		Key: key,
		Limit: sluice.Limit{Algorithm: sluice.Algorithm(b.Algorithms[j]), Rate: b.Rates[j], Period: time.Duration(b.PeriodsUs[j]) * time.Microsecond,
			Burst: b.Bursts[j], CountAll: b.Flags[j]&uint32(shardv1.Flag_FLAG_COUNT_ALL) != 0},
		Cost: b.Costs[j], Force: b.Flags[j]&uint32(shardv1.Flag_FLAG_FORCE) != 0,
	}
	switch now := b.NowUnixUs[j]; {
	case r.Cost < 0 && now != 0:
		r.Cost, r.Refund = -r.Cost, time.UnixMicro(now) // decided on the owner's clock
	case now != 0:
		r.Now = time.UnixMicro(now)
	}
	if len(b.ZoneIndex) > 0 && b.ZoneIndex[j] > 0 {
		name := b.Zones[b.ZoneIndex[j]-1]
		if len(name) > maxZone {
			return r, fmt.Errorf("%w: zone of %d bytes", sluice.ErrInvalidLimit, len(name))
		}
		z, err := sluice.LoadZone(name)
		if err != nil {
			return r, err
		}
		r.Limit.Zone = z
	}
	return r, nil
}

// appendDecision appends d to the decision columns of out.
func appendDecision(out *shardv1.BatchResult, d *sluice.Decision) {
	out.Allowed = append(out.Allowed, d.Allowed)
	out.Remaining = append(out.Remaining, d.Remaining)
	out.RetryAfterUs = append(out.RetryAfterUs, d.RetryAfter.Microseconds())
	out.ResetAfterUs = append(out.ResetAfterUs, d.ResetAfter.Microseconds())
	out.DelayUs = append(out.DelayUs, d.Delay.Microseconds())
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
	"REFUND_IN_BATCH":    sluice.ErrRefundInBatch,
	"INVALID_LIMIT":      sluice.ErrInvalidLimit,
}

// errorOf returns the message of call's error: InvalidArgument and its
// name for sluice's input errors, Unavailable for the rest.
func errorOf(call int, err error) *shardv1.Error {
	for name, e := range errorNames {
		if errors.Is(err, e) {
			return &shardv1.Error{Call: uint32(call), Code: int32(codes.InvalidArgument), Reason: name, Message: err.Error()}
		}
	}
	return &shardv1.Error{Call: uint32(call), Code: int32(codes.Unavailable), Message: err.Error()}
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

// Register adds the peer service, deciding every call with local, to a
// gRPC server, for the members auth admits. Store.Register passes on the
// calls for keys the store's instance no longer owns instead.
func Register(s *grpc.Server, local sluice.Store, auth Auth) {
	shardv1.RegisterPeerServer(s, &service{local: local, auth: &auth})
}

type service struct {
	shardv1.UnimplementedPeerServer
	local sluice.Store
	route *Store // nil: every call is decided here
	auth  *Auth
}

// Take serves a stream of batches from a member; a stream from a caller
// that Auth does not admit is refused before it is read, so none of its
// batches, hand-offs, failovers or leaves is seen.
func (sv *service) Take(stream grpc.BidiStreamingServer[shardv1.Batch, shardv1.BatchResult]) error {
	if err := sv.auth.admit(stream.Context()); err != nil {
		return err
	}
	in, out := new(shardv1.Batch), new(shardv1.BatchResult)
	var reqs []sluice.Request
	var ds []sluice.Decision
	for {
		if err := stream.RecvMsg(in); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if err := checkBatch(in); err != nil {
			return err
		}
		if in.HandedOff != "" && len(in.CallSizes) == 0 {
			switch {
			case sv.route == nil:
			case in.Leaving:
				sv.route.drop(in.HandedOff)
			default:
				sv.route.noteHanded(in.HandedOff)
			}
			if err := stream.Send(new(shardv1.BatchResult)); err != nil {
				return err
			}
			continue
		}
		// The answer's lists are reused from batch to batch: Send has
		// written them out by the time it returns.
		out.Errors = out.Errors[:0]
		out.Allowed, out.Remaining, out.RetryAfterUs, out.ResetAfterUs, out.DelayUs = out.Allowed[:0], out.Remaining[:0], out.RetryAfterUs[:0], out.ResetAfterUs[:0], out.DelayUs[:0]
		var arrived time.Time // when a routed call's time to be decided starts (serve)
		if sv.route != nil {
			arrived = time.Now()
		}
		j, off := 0, 0
		for i, size := range in.CallSizes {
			reqs, ds = reqs[:0], ds[:0]
			var err error
			for range size {
				var r sluice.Request
				if r, err = request(in, j, off); err != nil {
					break
				}
				reqs = append(reqs, r)
				off += int(in.KeyLengths[j])
				j++
			}
			if err == nil {
				reset := len(in.CallResets) > 0 && in.CallResets[i]
				var budget int64 // none said
				if i < len(in.BudgetsUs) {
					budget = in.BudgetsUs[i]
				}
				ds, err = sv.serve(stream.Context(), arrived, budget, reqs, reset, in.Flags[j-1], ds)
			}
			if err != nil {
				// Skip what is left of the call.
				for j < len(in.KeyLengths) && len(reqs) < int(size) {
					off += int(in.KeyLengths[j])
					j++
					reqs = append(reqs, sluice.Request{})
				}
				out.Errors = append(out.Errors, errorOf(i, err))
				continue
			}
			for k := range ds {
				appendDecision(out, &ds[k])
			}
		}
		if err := stream.Send(out); err != nil {
			return err
		}
		if sv.route != nil && sv.route.hasLeft() {
			return nil // a member that left ends its streams, so that its server can stop
		}
	}
}

// serveCall decides a call of reqs into ds (or with reset, resets the
// first request's key and limit).
func serveCall(ctx context.Context, local sluice.Store, reqs []sluice.Request, reset bool, ds []sluice.Decision) ([]sluice.Decision, error) {
	switch {
	case reset:
		return ds, local.Reset(ctx, reqs[0].Key, reqs[0].Limit)
	case len(reqs) == 1: // the usual forward
		d, err := local.Take(ctx, reqs[0])
		return append(ds, d), err
	}
	ds = append(ds, make([]sluice.Decision, len(reqs))...)
	return ds, local.TakeAll(ctx, reqs, ds)
}
