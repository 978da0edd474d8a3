package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultTimeout bounds a store call of a Concurrency, or a guard.Guard,
// whose Timeout is zero: a ceiling for "the store is down".
const DefaultTimeout = time.Second

// LimiterOptions configures a Limiter; the zero value is ready to use.
// A breaker, a default timeout and a stand-in while the store fails are
// the store's: give the Limiter guard.New(store, ...), itself a Store.
// Limiters given one guarded store share its breaker and stand-in.
type LimiterOptions struct {
	// Timeout, if above zero, bounds each store call through its ctx.
	Timeout time.Duration
	// FailMode decides a request whose store call failed: FailClosed
	// denies, the others allow.
	FailMode FailMode
	// DenyCacheSize, if positive, keeps up to that many keys known to be
	// denied until their RetryAfter, denied without a store call. It does
	// not see a Reset made through another Limiter.
	DenyCacheSize int
	// OnStoreError, if set, is called with every failed store call.
	OnStoreError func(error)
	// Clock is the time source for the deny cache. Default time.Now.
	Clock func() time.Time
}

// Limiter applies one Limit to many keys through a Store, with a policy for
// store failures. It is safe for concurrent use.
//
// Which method to call:
//
//   - Allow (AllowN for a cost other than 1) where a request over the
//     limit is refused: answer it 429 with Decision.RetryAfter. The usual
//     call; it never waits.
//   - Wait (WaitN) where a request over the limit should wait its turn
//     instead: a client or a worker pacing itself (and a leaky bucket's
//     shaping Delay).
//   - Reserve where the cost is known only once the work is done (tokens
//     an answer reported, bytes sent): it takes an estimate, which the
//     Reservation settles.
//   - Peek to show what is left (a quota page) without taking anything.
//   - Reset to give a key its whole capacity back.
//
// A store that fails is decided by LimiterOptions.FailMode without an
// error, except under FailClosed.
type Limiter struct {
	store  Store
	limit  Limit
	opts   LimiterOptions
	denied *denyCache
}

// NewLimiter returns a Limiter enforcing limit through store. It returns an
// error wrapping ErrInvalidLimit for an invalid limit.
func NewLimiter(store Store, limit Limit, opts LimiterOptions) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("sluice: NewLimiter: nil store")
	}
	if err := limit.Validate(); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	l := &Limiter{store: store, limit: limit, opts: opts}
	if opts.DenyCacheSize > 0 {
		l.denied = newDenyCache(opts.DenyCacheSize)
	}
	return l, nil
}

// Limit returns the Limiter's limit.
func (l *Limiter) Limit() Limit { return l.limit }

// Allow takes one event for key. It is shorthand for AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN takes n events for key if the limit allows, and reports the
// decision; it does not wait out a leaky bucket's Delay. The error is the
// input's (nothing counted), or under FailClosed the store's failure,
// wrapping ErrStoreUnavailable, with a denial.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (d Decision, err error) {
	if err := checkKeyAndCost(key, n, &l.limit); err != nil { // NewLimiter validated the limit
		return Decision{Limit: l.limit}, err
	}
	_, err = l.take(ctx, key, n, &d)
	return d, err
}

// Peek reports key's decision for one event without taking it.
func (l *Limiter) Peek(ctx context.Context, key string) (d Decision, err error) {
	if err := checkKeyAndCost(key, 0, &l.limit); err != nil {
		return Decision{Limit: l.limit}, err
	}
	_, err = l.take(ctx, key, 0, &d)
	return d, err
}

// Reset forgets key's state, giving it full capacity.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if l.denied != nil {
		l.denied.forget(key)
	}
	return l.store.Reset(ctx, key, l.limit)
}

// Wait takes one event for key, blocking until it is allowed. It is
// shorthand for WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN takes n events for key, blocking until they are allowed and for a
// leaky bucket's Delay; one that gives up (ctx done) gives its slot back.
// It returns ErrWouldExceedDeadline at once when ctx's deadline is sooner
// than the wait.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		r, err := l.Reserve(ctx, key, n)
		if err != nil {
			return err
		}
		wait := r.Delay
		if !r.Allowed {
			wait = r.RetryAfter
		}
		if wait > 0 {
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
				r.Cancel(context.WithoutCancel(ctx))
				return fmt.Errorf("%w: would wait %v", ErrWouldExceedDeadline, wait)
			}
			if err := sleep(ctx, wait); err != nil {
				r.Cancel(context.WithoutCancel(ctx))
				return err
			}
		}
		if r.Allowed {
			return nil
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// take asks the store for cost events of key into *d, through the deny
// cache, and reports whether the store took them: false for a denial, an
// error, or a failure that FailMode allowed. The error is the input's, or
// the store's under FailClosed.
func (l *Limiter) take(ctx context.Context, key string, cost int64, d *Decision) (took bool, err error) {
	var now time.Time
	if l.denied != nil {
		now = l.opts.Clock()
		if c, ok := l.denied.lookup(key, cost, now); ok {
			c.Limit = l.limit
			*d = c
			return false, nil
		}
	}
	req := Request{Key: key, Limit: l.limit, Cost: cost}
	if err = l.call(ctx, &req, d); err == nil {
		if !d.Allowed && l.denied != nil {
			l.denied.add(key, cost, now, *d)
		}
		return d.Allowed, nil
	}
	return false, l.failed(&req, d, err)
}

// call makes one store call for *req into *d, bounded by Timeout.
func (l *Limiter) call(ctx context.Context, req *Request, d *Decision) (err error) {
	if l.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.opts.Timeout)
		defer cancel()
	}
	*d, err = l.store.Take(ctx, *req)
	return err
}

// failed decides *req after its store call failed with err, into *d, and
// returns the error the caller gets: the input's, or the store's under
// FailClosed.
func (l *Limiter) failed(req *Request, d *Decision, err error) error {
	if IsInputError(err) {
		*d = Decision{Limit: req.Limit}
		return err
	}
	if l.opts.OnStoreError != nil {
		l.opts.OnStoreError(err)
	}
	if !errors.Is(err, ErrStoreUnavailable) {
		err = fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
	}
	if l.opts.FailMode == FailClosed {
		*d = Decision{Limit: req.Limit, RetryAfter: time.Second}
		return err
	}
	*d = Decision{Allowed: true, Limit: req.Limit, Remaining: req.Limit.Capacity() - req.Cost}
	return nil
}
