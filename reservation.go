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
	// nothing: settling it does nothing.
	Decision
	l        *Limiter
	key      string
	estimate int64
	taken    time.Time
	done     atomic.Bool
}

// clockSkew is how much earlier than the call a reservation records its
// take: a store's clock may run behind the caller's (Redis's, or the
// memory store's in whole microseconds), and a refund gives back only
// what was taken at or after that time.
const clockSkew = time.Millisecond

// Reserve takes estimate events for key now, as Allow would, and returns
// the Reservation that settles them once the request's actual cost is
// known. Use it where the cost is known only after the work is done: an
// LLM call limited in tokens, a download in bytes, a login attempt that
// counts only when it fails.
func (l *Limiter) Reserve(ctx context.Context, key string, estimate int64) (*Reservation, error) {
	r := &Reservation{l: l, key: key, estimate: estimate, taken: time.Now().Add(-clockSkew)}
	if err := checkKeyAndCost(key, estimate, l.limit.Capacity()); err != nil {
		r.Decision = Decision{Limit: l.limit}
		r.done.Store(true)
		return r, err
	}
	err := l.take(ctx, key, estimate, &r.Decision)
	if err != nil || !r.Allowed || estimate == 0 {
		r.done.Store(true) // nothing taken, nothing to settle
	}
	return r, err
}

// Settle settles the reservation to actual, the request's real cost: the
// difference is taken when actual is more than the estimate (never
// refused: the work is done; past the capacity, the capacity is taken)
// and given back when it is less, as far as the state still holds it (a
// window that has moved on since holds none of it: see Request.Refund).
// A second call returns ErrSettled and changes nothing.
func (r *Reservation) Settle(ctx context.Context, actual int64) error {
	if !r.done.CompareAndSwap(false, true) {
		if r.l == nil || !r.Allowed || r.estimate == 0 {
			return nil // took nothing
		}
		return ErrSettled
	}
	switch d := max(actual, 0) - r.estimate; {
	case d > 0:
		return r.l.settle(ctx, Request{Key: r.key, Limit: r.l.limit, Cost: min(d, r.l.limit.Capacity()), Force: true})
	case d < 0:
		return r.l.settle(ctx, Request{Key: r.key, Limit: r.l.limit, Cost: -d, Refund: r.taken})
	}
	return nil
}

// Cancel gives the whole estimate back: Settle(ctx, 0).
func (r *Reservation) Cancel(ctx context.Context) error { return r.Settle(ctx, 0) }

// settle decides a settlement's request through the Guard: a failed store
// decides it by the fail mode (the stand-in records it under FailLocal).
func (l *Limiter) settle(ctx context.Context, req Request) error {
	if l.denied != nil {
		l.denied.forget(req.Key)
	}
	var d Decision
	v := l.guard.Take(ctx, l.label, req, l.opts.FailMode, &d)
	switch v.Outcome {
	case Invalid, FailedClosed:
		return v.Err
	}
	return nil
}
