package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// maxTime bounds Request.Now: with MaxSpan after it, times stay below 2^53
// microseconds, exact in Lua's doubles.
var maxTime = time.Date(2150, 1, 1, 0, 0, 0, 0, time.UTC)

// MaxKeyLen is the longest Request.Key, in bytes: a client's identity of
// up to MaxIdentityLen, with room for what a front door puts before it (a
// policy's name, an Envoy domain and descriptor keys). A longer key is an
// error, never truncated: truncation would merge two clients.
const MaxKeyLen = 16384

// MaxIdentityLen is the longest identity a front door takes from a client,
// in bytes: a /v1/check key, an Envoy descriptor value, an API key header.
// Front doors refuse a longer one with its length, before it becomes part
// of a key.
const MaxIdentityLen = 4096

// Sentinel errors. Each is wrapped with detail; test with errors.Is.
var (
	// ErrEmptyKey is returned for a Request whose Key is empty.
	ErrEmptyKey = errors.New("sluice: empty key")
	// ErrKeyTooLong is returned for a Request whose Key exceeds MaxKeyLen.
	ErrKeyTooLong = errors.New("sluice: key too long")
	// ErrCostExceedsBurst is returned for a Request whose Cost exceeds its
	// Limit's capacity: it could never be allowed.
	ErrCostExceedsBurst = errors.New("sluice: cost exceeds burst")
	// ErrNegativeCost is returned for a Request whose Cost is negative.
	ErrNegativeCost = errors.New("sluice: negative cost")
	// ErrInvalidTime is returned for a Request whose Now is before 1970 or
	// after 2150.
	ErrInvalidTime = errors.New("sluice: request time out of range")
	// ErrDuplicateRequest is returned by TakeAll for a batch in which two
	// requests share key, algorithm and period, and so one state.
	ErrDuplicateRequest = errors.New("sluice: two requests in one batch share key, algorithm and period")
	// ErrRefundInBatch is returned by TakeAll for a batch of more than one
	// request that holds a refund (Request.Refund): refunds go alone.
	ErrRefundInBatch = errors.New("sluice: a refund in a batch of several requests; refunds are decided alone")
	// ErrStoreUnavailable wraps a store failure in a Decision made by a
	// fail-closed Limiter, so callers can tell it from a rate-limit denial.
	ErrStoreUnavailable = errors.New("sluice: store unavailable")
	// ErrStoreClosed is wrapped by the errors of a store's calls after its
	// Close: a Guard stops probing a closed store.
	ErrStoreClosed = errors.New("sluice: store closed")
)

// Request asks a Store to take Cost events from the state of Key under Limit.
//
// State is identified by Key, the algorithm and the period, so one key may
// carry "10/s" and "1000/h" at once. Changing Rate or Burst keeps the state.
type Request struct {
	Key   string
	Limit Limit
	// Cost is the number of events. Cost 0 peeks: the Decision says whether
	// one event would be allowed now, and nothing is consumed.
	Cost int64
	// Force records Cost even when the limit would deny it: for events
	// that happened anyway, such as admissions made locally and synced
	// later (package localsync). The Decision says whether the cost fit
	// (Allowed) and reports the state after recording it. A forced request
	// is recorded even when another request of its batch is denied.
	Force bool
	// ID, if set on the first request of a call, makes the call idempotent
	// where the network could fail half-way: a store that has applied a
	// call with this ID in the last minute does not apply it again, and
	// answers with the state as it is. The memory store, whose calls cannot
	// fail half-way, ignores it.
	ID string
	// Now is the time of the request. The zero value means the store's
	// clock (Redis TIME for the Redis store); an explicit Now is for replays
	// and tests. Stores work in whole microseconds and truncate.
	Now time.Time
	// Refund, when not zero, gives Cost back instead of taking it: cost a
	// request took at the time Refund holds and did not use (a Reservation
	// settled for less, or cancelled). What the state still holds of it is
	// given back, never past the capacity: a window that has moved on
	// since holds none of it, nor a bucket what it has refilled since
	// (algorithm.Refund says what each algorithm gives back). A refund is never denied, and it is decided alone: a
	// batch (TakeAll) of more than one request must not hold one.
	Refund time.Time
}

// Forced reports whether r's cost is recorded even when it does not fit:
// r.Force, or a limit that counts every request (Limit.CountAll). Stores
// decide by it, not by Force alone.
func (r *Request) Forced() bool { return r.Force || r.Limit.CountAll }

// Validate reports why r cannot be decided, or nil.
func (r *Request) Validate() error {
	if err := r.Limit.Validate(); err != nil {
		return err
	}
	return r.CheckKeyAndCost()
}

// CheckKeyAndCost is Validate without validating the Limit itself, for
// stores that cache a limit's validation. The Limit must be valid.
func (r *Request) CheckKeyAndCost() error {
	if r.Now.IsZero() && r.Refund.IsZero() {
		return checkKeyAndCost(r.Key, r.Cost, &r.Limit)
	}
	if !r.Now.IsZero() && outOfRange(r.Now) {
		return fmt.Errorf("%w: %v is outside 1970..%v", ErrInvalidTime, r.Now, maxTime.Year())
	}
	if !r.Refund.IsZero() && outOfRange(r.Refund) {
		return fmt.Errorf("%w: refund of a take at %v, outside 1970..%v", ErrInvalidTime, r.Refund, maxTime.Year())
	}
	return checkInFull(r.Key, r.Cost, &r.Limit)
}

func outOfRange(t time.Time) bool { return t.Before(time.Unix(0, 0)) || t.After(maxTime) }

// checkKeyAndCost is CheckKeyAndCost for a Request without Now or Refund.
// Most requests are one event on a key of a few bytes, which need no
// more: every capacity is at least 1. Small enough to be inlined.
func checkKeyAndCost(key string, cost int64, l *Limit) error {
	if uint(len(key))-1 < MaxKeyLen && uint64(cost) <= 1 {
		return nil
	}
	return checkInFull(key, cost, l)
}

// checkInFull checks key and cost, whatever they are.
func checkInFull(key string, cost int64, l *Limit) error {
	if err := checkKey(key, cost); err != nil {
		return err
	}
	if capacity := l.Capacity(); cost > capacity {
		return fmt.Errorf("%w: cost %d, capacity %d", ErrCostExceedsBurst, cost, capacity)
	}
	return nil
}

func checkKey(key string, cost int64) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, the maximum is %d", ErrKeyTooLong, len(key), MaxKeyLen)
	case cost < 0:
		return fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	return nil
}

// Decision is a Store's answer to one Request.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Limit is the limit that decided.
	Limit Limit
	// Remaining is how many more events of cost 1 the key may have now.
	Remaining int64
	// RetryAfter is how long until this same request would be allowed; 0
	// when allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to full capacity.
	ResetAfter time.Duration
	// Delay is for shaping (leaky bucket): the request is allowed but should
	// proceed only after Delay, so output never exceeds the rate.
	Delay time.Duration
}

// Store keeps per-key state and decides Requests atomically.
//
// Implementations are safe for concurrent use. A denial is a Decision, not an
// error; errors mean invalid input or a failed store.
type Store interface {
	// Take decides one request.
	Take(ctx context.Context, req Request) (Decision, error)
	// TakeAll decides reqs together, all-or-nothing: if any is denied, no
	// state changes, and each decision still reports its own limit. It
	// writes one Decision per request into dst, which must be at least
	// len(reqs) long. In a denied batch, a request its own limit would have
	// allowed reports Allowed with the Remaining and ResetAfter of the
	// unchanged state. Taking the destination lets callers decide without
	// allocating.
	TakeAll(ctx context.Context, reqs []Request, dst []Decision) error
	// Reset forgets the state of key under limit.
	Reset(ctx context.Context, key string, limit Limit) error
}

// Closest returns the index of the decision closest to its limit: a denied one
// with the longest RetryAfter if any, else the one with the fewest remaining
// relative to its rate. It returns -1 for no decisions.
func Closest(ds []Decision) int {
	best := -1
	for i := range ds {
		if best < 0 || closer(&ds[i], &ds[best]) {
			best = i
		}
	}
	return best
}

func closer(a, b *Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		return a.RetryAfter > b.RetryAfter
	}
	// a.Remaining/a.Rate < b.Remaining/b.Rate, in floating point: both are
	// below 2^40, so the products are exact enough to order.
	return float64(a.Remaining)*float64(b.Limit.Rate) < float64(b.Remaining)*float64(a.Limit.Rate)
}
