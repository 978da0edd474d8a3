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

// MaxKeyLen is the longest Request.Key, in bytes: an identity of up to
// MaxIdentityLen and what a front door puts before it. A longer key is an
// error, never truncated (that would merge two clients).
const MaxKeyLen = 16384

// MaxIdentityLen is the longest identity, in bytes, a front door takes
// from a client (an API key, an Envoy descriptor value); longer is refused.
const MaxIdentityLen = 4096

// Sentinel errors. Each is wrapped with detail; test with errors.Is.
var (
	// ErrEmptyKey is returned for a Request whose Key is empty.
	ErrEmptyKey = errors.New("sluice: empty key")
	// ErrKeyTooLong is returned for a Request whose Key exceeds MaxKeyLen.
	ErrKeyTooLong = errors.New("sluice: key too long")
	// ErrCostExceedsBurst is returned for a Cost past the Limit's capacity.
	ErrCostExceedsBurst = errors.New("sluice: cost exceeds burst")
	// ErrNegativeCost is returned for a Request whose Cost is negative.
	ErrNegativeCost = errors.New("sluice: negative cost")
	// ErrInvalidTime is returned for a Now before 1970 or after 2150.
	ErrInvalidTime = errors.New("sluice: request time out of range")
	// ErrDuplicateRequest is returned by TakeAll for two requests of one
	// key's state (Limit.SameState).
	ErrDuplicateRequest = errors.New("sluice: two requests in one batch share key, algorithm and period")
	// ErrRefundInBatch is returned by TakeAll for a refund in a batch.
	ErrRefundInBatch = errors.New("sluice: a refund in a batch of several requests; refunds are decided alone")
	// ErrStoreUnavailable wraps a store failure that a FailMode decided.
	ErrStoreUnavailable = errors.New("sluice: store unavailable")
	// ErrStoreClosed is wrapped by a store's errors after its Close.
	ErrStoreClosed = errors.New("sluice: store closed")
	// ErrEmptyLease and ErrInvalidConcurrency are a slot store's bad input.
	ErrEmptyLease         = errors.New("sluice: empty lease")
	ErrInvalidConcurrency = errors.New("sluice: concurrency must be above 0")
	// ErrReleased is returned by a Concurrency's release function called
	// again: nothing changes.
	ErrReleased = errors.New("sluice: slot released already")
	// ErrSettled is returned by a Reservation's second Settle or Cancel.
	ErrSettled = errors.New("sluice: reservation settled already")
	// ErrWouldExceedDeadline is returned by Wait, at once, when ctx's
	// deadline comes before the event could be allowed.
	ErrWouldExceedDeadline = errors.New("sluice: wait would exceed context deadline")
)

// Request asks a Store to take Cost events from the state of Key under
// Limit. A key has one state per Limit.SameState: "10/s" and "1000/h" at
// once, and a new Rate or Burst keeps the state.
type Request struct {
	Key   string
	Limit Limit
	// Cost is the number of events. Cost 0 peeks: the Decision says whether
	// one event would be allowed now, and nothing is consumed.
	Cost int64
	// Force records Cost even when the limit, or another request of the
	// batch, would deny it: for events that happened anyway. The Decision
	// says whether it fit and reports the state after it.
	Force bool
	// ID, if set on the first request of a call, makes it idempotent: a
	// remote store that applied a call of this ID in the last minute
	// answers with the state as it is.
	ID string
	// Now is the time of the request; zero means the store's clock (Redis
	// TIME). Stores truncate it to whole microseconds.
	Now time.Time
	// Refund, when not zero, gives back Cost that a request took at that
	// time and did not use, as far as the state still holds it (a window
	// that has moved on holds none, a bucket none of what it has refilled
	// since): never denied, and never in a batch.
	Refund time.Time
}

// Forced reports whether stores record r's cost even when it does not
// fit: r.Force or r.Limit.CountAll.
func (r *Request) Forced() bool { return r.Force || r.Limit.CountAll }

// Validate reports why r cannot be decided, or nil.
func (r *Request) Validate() error {
	if err := r.Limit.Validate(); err != nil {
		return err
	}
	return r.CheckKeyAndCost()
}

// CheckKeyAndCost is Validate for a Limit known to be valid.
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

// Store keeps per-key state and decides Requests atomically. It is safe for
// concurrent use; a denial is a Decision, an error is bad input or a
// failed store.
type Store interface {
	// Take decides one request.
	Take(ctx context.Context, req Request) (Decision, error)
	// TakeAll decides reqs together, all-or-nothing, into dst (at least
	// len(reqs) long): if any is denied, no state changes, and each
	// decision reports its own limit on the unchanged state.
	TakeAll(ctx context.Context, reqs []Request, dst []Decision) error
	// Reset forgets the state of key under limit.
	Reset(ctx context.Context, key string, limit Limit) error
}

// IsInputError reports whether err is a problem with the request itself,
// which no store and no failure policy can decide.
func IsInputError(err error) bool {
	for _, e := range inputErrors {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

var inputErrors = []error{ErrEmptyKey, ErrKeyTooLong, ErrCostExceedsBurst, ErrNegativeCost, ErrInvalidTime, ErrDuplicateRequest, ErrRefundInBatch, ErrInvalidLimit,
	ErrEmptyLease, ErrInvalidConcurrency}
