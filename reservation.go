package sluice

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// ErrSettled is returned by a Reservation's Settle or Cancel after the
// first of them: a reservation is settled once.
var ErrSettled = errors.New("sluice: reservation settled already")

// Reservation is an estimate taken now and settled later to what the
// request really cost: tokens an answer reported, bytes it sent, or
// nothing at all for an answer that should not count. Make one with
// Limiter.Reserve; call Settle or Cancel once.
type Reservation struct {
	// Decision is how the estimate was decided. A denied reservation took
	// nothing, nor one allowed because the store failed (FailOpen):
	// settling it does nothing.
	Decision
	l        *Limiter
	key      string
	estimate int64
	taken    time.Time
	held     bool        // allowed: the reservation is to settle
	done     atomic.Bool // settled
}

// clockSkew is how much earlier than the call a reservation records its
// take: a store's clock may run behind the caller's (Redis's, or the
// memory store's in whole microseconds), and a refund gives back only
// what was taken at or after that time.
const clockSkew = time.Millisecond

// asOfNow is how far past the caller's clock GiveBack names a bucket's
// take: past any store's clock (Redis's runs apart from the caller's by
// its measured offset, a millisecond or so), so that no refill since is
// counted against what it gives back.
const asOfNow = time.Second

// refundTime is the time a refund of a take at taken names
// (Request.Refund), taken being read before the take reached the store:
// clockSkew earlier for the windows and the sliding log, which find the
// take by it; later for the buckets, which give back less what has
// refilled since it, by refundGrace.
func refundTime(l Limit, taken time.Time) time.Time {
	if refills(l) {
		return taken.Add(refundGrace(l))
	}
	return taken.Add(-clockSkew)
}

// refundGrace is how much later than its recorded time a bucket's refund
// names its take: 100ms, at most a tenth of an emission interval. A take
// reaches the store some time after the time recorded before it (a
// round trip; tens of milliseconds for a connection's first), and a
// refund counting that refill against itself would leave a key refunded
// back to back short of its capacity; what refills in the grace is the
// most a refund may give back beyond what the state holds of its take:
// a tenth of an event.
func refundGrace(l Limit) time.Duration {
	return min(100*time.Millisecond, l.Period/time.Duration(10*l.Rate))
}

// refills reports whether l's algorithm is a bucket (token bucket, GCRA,
// leaky bucket), which refills continuously: a refund gives back less
// what has refilled since its take.
func refills(l Limit) bool {
	switch l.Algorithm.Resolved() {
	case TokenBucket, GCRA, LeakyBucket:
		return true
	}
	return false
}

// Reserve takes estimate events for key now, as Allow would, and returns
// the Reservation that settles them once the request's actual cost is
// known. Use it where the cost is known only after the work is done: an
// LLM call limited in tokens, a download in bytes, a login attempt that
// counts only when it fails.
func (l *Limiter) Reserve(ctx context.Context, key string, estimate int64) (*Reservation, error) {
	r := &Reservation{l: l, key: key, estimate: estimate, taken: time.Now()}
	if err := checkKeyAndCost(key, estimate, &l.limit); err != nil {
		r.Decision = Decision{Limit: l.limit}
		return r, err
	}
	v := l.take(ctx, key, estimate, &r.Decision)
	err := v.limiterErr()
	// Held when it took the estimate (one of 0 settles its whole cost
	// later); one that failed open took nothing, and owes nothing.
	r.held = err == nil && v.Took(l.opts.FailMode)
	return r, err
}

// Settle settles the reservation to actual, the request's real cost: the
// difference is taken when actual is more than the estimate (never
// refused: the work is done; past the capacity, the capacity is taken)
// and given back when it is less, as far as the state still holds it (a
// window that has moved on since holds none of it, nor a bucket what it
// has refilled since: see Request.Refund).
// A second call returns ErrSettled and changes nothing.
func (r *Reservation) Settle(ctx context.Context, actual int64) error {
	if !r.held {
		return nil // denied, refused or failed open: it took nothing, and owes nothing
	}
	if !r.done.CompareAndSwap(false, true) {
		return ErrSettled
	}
	if r.l.denied != nil {
		r.l.denied.forget(r.key)
	}
	v := r.l.guard.Settle(ctx, r.l.label, Request{Key: r.key, Limit: r.l.limit}, r.taken, r.estimate, actual, r.l.opts.FailMode)
	switch v.Outcome {
	case Invalid, FailedClosed:
		return v.Err
	}
	return nil
}

// Cancel gives the whole estimate back: Settle(ctx, 0).
func (r *Reservation) Cancel(ctx context.Context) error { return r.Settle(ctx, 0) }

// Settle moves what req's key and limit are charged from charged to
// actual, for a request that took its cost at taken: more is taken by
// force (never refused: the work is done; past the capacity, the
// capacity), less given back as a refund of that take (Request.Refund).
// The front doors settle a request as soon as its answer says what it
// cost, and again if a later part of it says otherwise; req.Cost is not
// read. A failed store decides it by mode, as Take does.
func (g *Guard) Settle(ctx context.Context, label string, req Request, taken time.Time, charged, actual int64, mode FailMode) Verdict {
	switch d := max(actual, 0) - charged; {
	case d > 0:
		req.Cost, req.Force = min(d, req.Limit.Capacity()), true
	case d < 0:
		req.Cost, req.Refund = min(-d, req.Limit.Capacity()), refundTime(req.Limit, taken)
	default:
		return Verdict{}
	}
	var dec Decision
	return g.Take(ctx, label, req, mode, &dec)
}

// GiveBack returns req.Cost to req's key and limit, from what its state
// holds now, as a refund (Request.Refund) of a take made now: a window's
// count less the cost, a bucket's tokens or a GCRA's and a leaky
// bucket's room back up to full, a sliding log's entries of the last
// period (less a second), the oldest first. For cost taken earlier whose
// time the caller did not keep, such as an Envoy descriptor's
// is_negative_hits; near a window's start, a window that has just ended
// holds none of it. A caller that undoes a take it has just made (a
// request refused whole) sets req.Refund to the time it read before the
// take: a window or a log gives back from the take's own window or
// entry, and a bucket all of it, as of now (what it refilled in the
// moments since is not counted against it). It is never denied. When
// the store fails, mode FailLocal gives it back to the stand-in, which
// counted what was taken during the outage, and to the store when it
// recovers (net of what the stand-in admitted); FailOpen and FailClosed
// give nothing back (failed open: there was nothing counted locally to
// give back to). A failure is logged and counted as any other. The state
// after it is written to *d.
func (g *Guard) GiveBack(ctx context.Context, label string, req Request, mode FailMode, d *Decision) Verdict {
	now := time.Now()
	taken := req.Refund
	req.Cost, req.Force = min(req.Cost, req.Limit.Capacity()), false
	switch p := req.Limit.Period; {
	case refills(req.Limit):
		// A take no older than the store's clock: nothing has refilled
		// since, and all of it comes back.
		req.Refund = now.Add(asOfNow)
	case !taken.IsZero():
		req.Refund = refundTime(req.Limit, taken) // the take's own window or entry
	case req.Limit.Algorithm.Resolved() == SlidingLog:
		// The log's entries of its period less a second (half of it when
		// shorter), so that they are still in the log when the refund
		// reaches the store, however late.
		req.Refund = now.Add(min(p/2, time.Second) - p)
	default:
		req.Refund = refundTime(req.Limit, now)
	}
	if mode != FailLocal {
		mode = FailOpen
	}
	return g.Take(ctx, label, req, mode, d)
}
