package sluice

import (
	"context"
	"sync/atomic"
	"time"
)

// Reservation is an estimate taken now and settled later to what the
// request really cost. Make one with Limiter.Reserve; call Settle or
// Cancel once.
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

// refundTime is the time a refund of a take at taken names
// (Request.Refund), taken being read before the take reached the store:
// clockSkew earlier for the windows and the sliding log, which find the
// take by it; later for the buckets, which give back less what has
// refilled since it, by refundGrace.
func refundTime(l Limit, taken time.Time) time.Time {
	if l.Algorithm.HasBurst() { // the buckets and GCRA refill
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

// Reserve takes estimate events for key now, as Allow would, and returns
// the Reservation that settles them once the actual cost is known.
func (l *Limiter) Reserve(ctx context.Context, key string, estimate int64) (*Reservation, error) {
	r := &Reservation{l: l, key: key, estimate: estimate, taken: time.Now()}
	if err := checkKeyAndCost(key, estimate, &l.limit); err != nil {
		r.Decision = Decision{Limit: l.limit}
		return r, err
	}
	// Held when it took the estimate (one of 0 settles its whole cost
	// later); one that failed open took nothing, and owes nothing.
	took, err := l.take(ctx, key, estimate, &r.Decision)
	r.held = took
	return r, err
}

// Settle settles the reservation to actual, the request's real cost, as
// Request.Settlement says. A second call returns ErrSettled.
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
	req, ok := Request{Key: r.key, Limit: r.l.limit}.Settlement(r.taken, r.estimate, actual)
	if !ok {
		return nil
	}
	var d Decision
	if err := r.l.call(ctx, &req, &d); err != nil {
		return r.l.failed(&req, &d, err)
	}
	return nil
}

// Cancel gives the whole estimate back: Settle(ctx, 0).
func (r *Reservation) Cancel(ctx context.Context) error { return r.Settle(ctx, 0) }

// Settlement returns the request that moves what r's key and limit are
// charged from charged to actual, for a take at taken: more is forced
// (never refused; at most the capacity), less a refund of that take. It
// returns false when there is nothing to move. r.Cost is not read.
func (r Request) Settlement(taken time.Time, charged, actual int64) (Request, bool) {
	r.Force, r.Refund = false, time.Time{}
	switch d := max(actual, 0) - charged; {
	case d > 0:
		r.Cost, r.Force = min(d, r.Limit.Capacity()), true
	case d < 0:
		r.Cost, r.Refund = min(-d, r.Limit.Capacity()), refundTime(r.Limit, taken)
	default:
		return r, false
	}
	return r, true
}
