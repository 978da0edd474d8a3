package sluice

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/sample"
)

// Slots keeps, per key, the slots of requests in flight: the state of a
// Concurrency limiter. The memory and Redis stores implement it.
//
// A slot is held by a lease, named by its holder: a slot whose lease is
// neither renewed nor released within its ttl frees itself, so a holder
// that crashed never keeps it. A store whose holders live in its own
// process (InProcess) may keep slots until they are released.
type Slots interface {
	// Acquire takes one of max slots of key under lease for ttl, unless
	// max are held. The Decision says which: Remaining is the slots left,
	// RetryAfter (when denied) the soonest a held lease expires unless
	// released first.
	Acquire(ctx context.Context, key string, lease string, max int64, ttl time.Duration) (Decision, error)
	// Renew extends lease to ttl from now; false when it no longer holds
	// a slot (it expired).
	Renew(ctx context.Context, key string, lease string, ttl time.Duration) (bool, error)
	// Release frees the slot lease holds; false when it held none (released
	// already, or expired). A slot is never freed twice.
	Release(ctx context.Context, key string, lease string) (bool, error)
}

// Errors of Slots' input.
var (
	ErrEmptyLease         = errors.New("sluice: empty lease")
	ErrInvalidConcurrency = errors.New("sluice: concurrency must be above 0")
)

// CheckSlot validates the arguments of Slots.Acquire: a key as a
// Request's, a lease, and a max above 0. Stores call it first.
func CheckSlot(key, lease string, max int64) error {
	switch {
	case lease == "":
		return ErrEmptyLease
	case max <= 0:
		return fmt.Errorf("%w: %d", ErrInvalidConcurrency, max)
	}
	return checkKey(key, 1)
}

// ErrReleased is returned by a release function called a second time: the
// slot was freed by the first call and nothing changes.
var ErrReleased = errors.New("sluice: slot released already")

// DefaultLease is the lease of a Concurrency's slots when it names none.
const DefaultLease = 30 * time.Second

// Concurrency limits the requests in flight per key: at most Max at once.
// A request takes a slot with Acquire and gives it back with the release
// function Acquire returns. While it is held, the slot's lease is renewed
// every Lease/3 in the background; a process that dies stops renewing and
// its slots free themselves when their leases expire. It is safe for
// concurrent use once made; do not change its fields after.
type Concurrency struct {
	// Slots keeps the slots. Required.
	Slots Slots
	// Max is how many requests of one key may be in flight. Required,
	// above 0.
	Max int64
	// Lease bounds how long a crashed holder keeps its slot. Default
	// DefaultLease. Ignored by in-process Slots, whose holders cannot
	// outlive them.
	Lease time.Duration
	// Wait, if above 0, is how long Acquire waits for a slot of a full key
	// before it denies. Default 0: deny at once.
	Wait time.Duration
	// Timeout bounds each call to Slots. Default DefaultTimeout.
	Timeout time.Duration
	// FailMode decides while Slots fails: FailLocal (the default) counts
	// in this process alone, Max per key per process, in Local; FailOpen
	// admits; FailClosed returns the error.
	FailMode FailMode
	// Local is the stand-in of FailLocal. Required for FailLocal when
	// Slots is not InProcess.
	Local Slots
	// Logger receives a line when Slots fails and when a held slot's
	// lease is lost, sampled: at most one a second per kind.
	Logger *slog.Logger
	// Guard, if set, is the Guard that checks this request's rates (the
	// front doors set it): a failure of Slots is logged through its Logger
	// and counted in its Health as a rate check's is, and when Slots is
	// its store, calls to Slots go through its circuit breaker and
	// timeout, so that a store that is down costs an acquire no timeout
	// once the breaker opens.
	Guard *Guard
	// Label names it in the Guard's logs: its policy.
	Label string

	logs     *sample.Sampler
	logsOnce sync.Once
}

// Validate reports why c cannot be used, naming the field, or nil.
func (c *Concurrency) Validate() error {
	switch {
	case c.Slots == nil:
		return errors.New("sluice: Concurrency: no Slots")
	case c.Max <= 0:
		return fmt.Errorf("sluice: Concurrency: max: %w: %d", ErrInvalidConcurrency, c.Max)
	case c.Lease < 0, c.Wait < 0, c.Timeout < 0:
		return errors.New("sluice: Concurrency: lease, wait and timeout must not be negative")
	case c.FailMode == FailLocal && c.Local == nil && !inProcess(c.Slots):
		return errors.New("sluice: Concurrency: fail mode local needs Local slots")
	}
	return nil
}

func inProcess(s Slots) bool {
	ip, ok := s.(InProcess)
	return ok && ip.InProcess()
}

// Acquire takes a slot of key, waiting up to Wait for one. When the
// Decision allows, release must be called once the request is done; a
// second call returns ErrReleased and changes nothing. When it denies,
// release is nil. An error is the store's under FailClosed, ctx's, or
// one about the input (an empty or oversized key), whatever the fail mode.
func (c *Concurrency) Acquire(ctx context.Context, key string) (release func() error, d Decision, err error) {
	release, d, v := c.Hold(ctx, nil, key)
	switch v.Outcome {
	case Invalid, FailedClosed:
		return nil, d, v.Err
	}
	return release, d, nil
}

// Hold is Acquire as part of check chk (nil for none), which the Guard
// decides next, with the hold's Outcome: Allowed or Denied when the slots
// decided; FailedOpen, LocalAllowed or LocalDenied when their store failed
// and FailMode decided; FailedClosed when it failed under FailClosed (or
// the caller went away: Err says which); Invalid for bad input. A failure
// is logged, sampled, and counted in the Guard's Health once per check;
// one that admitted is noted in chk.Held.
func (c *Concurrency) Hold(ctx context.Context, chk *Check, key string) (release func() error, d Decision, v Verdict) {
	lease := strconv.FormatUint(rand.Uint64(), 36)
	ttl := cmp.Or(c.Lease, DefaultLease)
	var deadline time.Time
	if c.Wait > 0 {
		deadline = time.Now().Add(c.Wait)
	}
	counted := false
	for backoff := 5 * time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
		v = Verdict{Outcome: Allowed, Closest: 0}
		slots := c.Slots
		d, err := c.acquire(ctx, slots, key, lease, ttl)
		if err != nil && !IsInputError(err) && !errors.Is(err, ErrBreakerOpen) {
			c.forget(slots, key, lease)
		}
		switch {
		case err != nil && IsInputError(err):
			return nil, Decision{}, Verdict{Outcome: Invalid, Closest: -1, Err: err}
		case err != nil && ctx.Err() != nil:
			// The caller went away: no fail mode applies, nothing failed.
			return nil, Decision{}, Verdict{Outcome: FailedClosed, Closest: -1, Err: ctx.Err()}
		case err != nil:
			v.Err = fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
			if !counted {
				c.failed(ctx, chk, v.Err)
				counted = true
			}
			switch c.FailMode {
			case FailOpen:
				v.Outcome = FailedOpen
				d = Decision{Allowed: true, Limit: Limit{Rate: c.Max}, Remaining: c.Max - 1}
				c.held(chk, v.Outcome)
				return func() error { return nil }, d, v
			case FailClosed:
				return nil, Decision{}, Verdict{Outcome: FailedClosed, Closest: -1, Err: v.Err}
			}
			slots = cmp.Or(c.Local, c.Slots)
			if d, err = c.acquire(ctx, slots, key, lease, ttl); err != nil {
				return nil, Decision{}, Verdict{Outcome: FailedClosed, Closest: -1, Err: err}
			}
			v.Outcome = LocalAllowed
			if !d.Allowed {
				v.Outcome = LocalDenied
			}
		}
		if d.Allowed {
			c.held(chk, v.Outcome)
			return c.holder(slots, key, lease, ttl), d, v
		}
		if v.Outcome == Allowed {
			v.Outcome = Denied
		}
		wait := min(backoff+rand.N(backoff), d.RetryAfter)
		if deadline.IsZero() || time.Now().Add(wait).After(deadline) {
			return nil, d, v
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, d, Verdict{Outcome: FailedClosed, Closest: -1, Err: ctx.Err()}
		case <-t.C:
		}
	}
}

// forget releases lease in the background after an acquire that failed
// once sent: a store that was slow, not down, may still grant it, and a
// slot its requester gave up on must not stay held until its lease ends.
// Sent on the same connection after the acquire, the release follows it;
// releasing a lease that holds nothing changes nothing.
func (c *Concurrency) forget(slots Slots, key, lease string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(c.Timeout, DefaultTimeout))
		defer cancel()
		if _, err := slots.Release(ctx, key, lease); err != nil {
			c.note("concurrency slot not released; its lease will free it", err)
		}
	}()
}

// held notes in chk an outcome of a failure that admitted.
func (c *Concurrency) held(chk *Check, o Outcome) {
	if chk != nil && o.Failed() && !chk.Held.Failed() {
		chk.Held = o
	}
}

// failed logs and counts a failure of the slots' store, once per check.
func (c *Concurrency) failed(ctx context.Context, chk *Check, err error) {
	g := c.Guard
	if g == nil {
		c.note("concurrency slots failing", err)
		return
	}
	if chk == nil || !chk.Held.Failed() {
		g.failures.Add(1)
	}
	g.note(ctx, c.Label, "concurrency slots failed; fail_mode "+c.FailMode.String()+" decides", err)
}

// call makes one call to slots: through the Guard's breaker and timeout
// when they are its store, else bounded by Timeout.
func call[T any](c *Concurrency, ctx context.Context, slots Slots, f func(context.Context) (T, error)) (T, error) {
	if c.Guard != nil && any(slots) == any(c.Guard.Store()) {
		return do(c.Guard, ctx, f)
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(c.Timeout, DefaultTimeout))
	defer cancel()
	return f(ctx)
}

func (c *Concurrency) acquire(ctx context.Context, slots Slots, key, lease string, ttl time.Duration) (Decision, error) {
	d, err := call(c, ctx, slots, func(ctx context.Context) (Decision, error) {
		return slots.Acquire(ctx, key, lease, c.Max, ttl)
	})
	d.Limit = Limit{Rate: c.Max}
	return d, err
}

// holder returns the release function of a slot held by lease, renewing
// the lease meanwhile unless slots is in-process.
func (c *Concurrency) holder(slots Slots, key, lease string, ttl time.Duration) func() error {
	var stop chan struct{}
	if !inProcess(slots) {
		stop = make(chan struct{})
		go c.renew(slots, key, lease, ttl, stop)
	}
	var once sync.Once
	return func() error {
		err := ErrReleased
		once.Do(func() {
			if stop != nil {
				close(stop)
			}
			_, err = call(c, context.Background(), slots, func(ctx context.Context) (bool, error) {
				return slots.Release(ctx, key, lease)
			})
			if err != nil {
				c.note("concurrency slot not released; its lease will free it", err)
			}
		})
		return err
	}
}

// renew extends lease every ttl/3 until stop is closed or the lease is
// lost.
func (c *Concurrency) renew(slots Slots, key, lease string, ttl time.Duration, stop chan struct{}) {
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		held, err := call(c, context.Background(), slots, func(ctx context.Context) (bool, error) {
			return slots.Renew(ctx, key, lease, ttl)
		})
		switch {
		case err != nil:
			c.note("concurrency lease not renewed", err)
		case !held:
			c.note("concurrency lease lost: it expired before it was renewed", nil)
			return
		}
	}
}

// note logs msg, sampled per msg.
func (c *Concurrency) note(msg string, err error) {
	if c.Logger == nil {
		return
	}
	c.logsOnce.Do(func() { c.logs = sample.New(1) })
	ok, held := c.logs.Allow(msg)
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.Int64("suppressed", held)}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	c.Logger.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}
