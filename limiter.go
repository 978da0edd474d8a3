package sluice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// LimiterOptions configures a Limiter. The zero value means the default
// timeout (DefaultTimeout, not applied to the memory store), FailLocal
// without a stand-in (so decided as FailOpen), and no deny cache.
type LimiterOptions struct {
	// Guard, if set, is the decision core to share with other Limiters and
	// front doors on the same store: one breaker and one stand-in for all.
	// It must decide through the Limiter's store. When set, Timeout, Local,
	// Instances, Logger and OnStoreError are the Guard's, not these.
	// Unset, the Limiter shares one with every Limiter on the same store
	// with the same Timeout, Local, Instances and Logger, unless it sets
	// OnStoreError or OwnGuard.
	Guard *Guard
	// OwnGuard gives the Limiter a Guard of its own (its own breaker,
	// prober and stand-in) rather than the store's shared one.
	OwnGuard bool
	// Timeout bounds each store call: zero means DefaultTimeout, negative
	// means only the caller's context bounds it.
	Timeout time.Duration
	// FailMode decides requests while the store fails. Default FailLocal.
	FailMode FailMode
	// Local is the stand-in FailLocal decides with while the store fails:
	// a memory store of its own (memstore.New). What it admits is told to
	// the store when the store recovers (see Guard).
	Local Store
	// Instances is how many processes share the store; see GuardOptions.
	Instances int
	// DenyCacheSize, if positive, keeps up to that many keys known to be
	// denied until their RetryAfter, answering them without a store call:
	// an abusive client then costs no round trip. The cache only ever
	// denies, so it never admits more; it does not see a Reset made through
	// another Limiter.
	DenyCacheSize int
	// Logger receives the store's health changes and sampled failures.
	Logger *slog.Logger
	// OnStoreError, if set, is called with every failed store call (for
	// metrics). It must be safe for concurrent use.
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
//     instead: a client or a worker pacing itself. On a leaky bucket it
//     sleeps each request's shaping Delay, which spaces the output at the
//     rate; it returns ErrWouldExceedDeadline at once when the turn comes
//     after ctx's deadline.
//   - Reserve where the cost is known only once the work is done (tokens
//     an answer reported, bytes sent, a login that counts only when it
//     fails): it takes an estimate, and the Reservation's Settle charges
//     the difference or gives it back; Cancel gives it all back.
//   - Peek to show what is left (a quota page) without taking anything.
//   - Reset to give a key its whole capacity back.
//
// A Decision's Remaining, RetryAfter and ResetAfter fill the
// X-RateLimit-* and Retry-After headers. On a remote store, a store that
// fails is decided by LimiterOptions.FailMode without an error, except
// under FailClosed.
type Limiter struct {
	store  Store
	limit  Limit
	label  string // the limit, in logs
	opts   LimiterOptions
	guard  *Guard
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
	g := opts.Guard
	if g == nil {
		var err error
		if g, err = sharedGuard(store, opts); err != nil {
			return nil, err
		}
	} else if g.Store() != store {
		return nil, errors.New("sluice: NewLimiter: the Guard decides through another store")
	}
	l := &Limiter{store: store, limit: limit, label: limit.String(), opts: opts, guard: g}
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
// decision. It does not wait: a leaky bucket's Delay is reported, and a
// policing caller may ignore it (the meter form).
//
// The error is non-nil for invalid input (the request is then not counted)
// and, under FailClosed, when the store fails: the Decision is then a denial
// and the error wraps ErrStoreUnavailable. Under FailOpen and FailLocal a
// store failure is decided without an error.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (d Decision, err error) {
	if err := checkKeyAndCost(key, n, &l.limit); err != nil { // NewLimiter validated the limit
		return Decision{Limit: l.limit}, err
	}
	v := l.take(ctx, key, n, &d)
	return d, v.limiterErr()
}

// Peek reports key's decision for one event without taking it.
func (l *Limiter) Peek(ctx context.Context, key string) (d Decision, err error) {
	if err := checkKeyAndCost(key, 0, &l.limit); err != nil {
		return Decision{Limit: l.limit}, err
	}
	v := l.take(ctx, key, 0, &d)
	return d, v.limiterErr()
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

// ErrWouldExceedDeadline is returned by Wait when the context's deadline
// comes before the event could be allowed; it returns at once, not at the
// deadline.
var ErrWouldExceedDeadline = errors.New("sluice: wait would exceed context deadline")

// WaitN takes n events for key, blocking until they are allowed: until
// RetryAfter and then again, and for the Delay of a shaping decision
// (leaky bucket), which is a reservation: a Wait that gives up while it
// waits out its Delay (ctx done) cancels it, giving the slot back. It
// honours ctx, and returns ErrWouldExceedDeadline at once when ctx's
// deadline is sooner than the wait.
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

// take asks the Guard for cost events of key into *d, through the deny
// cache. The Request is built in the call and the Decision written in
// place, never copied whole from layer to layer: each has more fields than
// the compiler keeps in registers, and a whole copy is stores and reloads
// that the processor cannot forward, which cost Allow more than the rest
// of this function.
func (l *Limiter) take(ctx context.Context, key string, cost int64, d *Decision) Verdict {
	var now time.Time
	if l.denied != nil {
		now = l.opts.Clock()
		if c, ok := l.denied.lookup(key, cost, now); ok {
			c.Limit = l.limit
			*d = c
			return Verdict{Outcome: Denied}
		}
	}
	req := Request{Key: key, Limit: l.limit, Cost: cost}
	v := l.guard.take(ctx, l.label, &req, l.opts.FailMode, d)
	if v.Outcome == Denied && l.denied != nil {
		l.denied.add(key, cost, now, *d)
	}
	return v
}

// limiterErr is the error a Limiter returns for v: the input's, or the
// store's under FailClosed. FailOpen and FailLocal decide a failure
// without one.
func (v *Verdict) limiterErr() error {
	if v.Outcome == Invalid || v.Outcome == FailedClosed {
		return v.Err
	}
	return nil
}

// storeErrors adapts an OnStoreError hook to GuardOptions.OnStoreCall.
func storeErrors(f func(error)) func(time.Duration, error) {
	if f == nil {
		return nil
	}
	return func(_ time.Duration, err error) {
		if err != nil {
			f(err)
		}
	}
}
