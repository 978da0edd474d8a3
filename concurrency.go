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

// defaultLease is the lease of a Concurrency's slots when it names none.
const defaultLease = 30 * time.Second

// Concurrency limits the requests in flight per key to Max. Acquire takes
// a slot and returns the function that gives it back. A held slot's lease
// is renewed every Lease/3, so the slots of a process that dies free
// themselves. It is safe for concurrent use; do not change its fields.
type Concurrency struct {
	// Slots keeps the slots (required) and Local is FailLocal's stand-in
	// (without it, FailLocal decides as FailOpen): memstore and redisstore
	// keep them, as guard.Slots documents.
	Slots, Local interface {
		Acquire(ctx context.Context, key, lease string, max int64, ttl time.Duration) (Decision, error)
		Renew(ctx context.Context, key, lease string, ttl time.Duration) (bool, error)
		Release(ctx context.Context, key, lease string) (bool, error)
	}
	// Max is the requests of one key in flight at most. Required.
	Max int64
	// Lease bounds how long a crashed holder keeps its slot. Zero means
	// 30s; negative: held until released, never renewed (memstore).
	Lease time.Duration
	// Wait is how long Acquire waits for a slot before it denies.
	Wait time.Duration
	// Timeout bounds each call to Slots. Zero means DefaultTimeout;
	// negative means only the caller's context bounds it.
	Timeout time.Duration
	// FailMode decides while Slots fails; FailLocal counts Max per key in
	// this process alone, in Local.
	FailMode FailMode
	// Logger receives failures of Slots, at most one line a second each.
	Logger *slog.Logger

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
	case c.Wait < 0:
		return errors.New("sluice: Concurrency: wait must not be negative")
	}
	return nil
}

// Acquire takes a slot of key, waiting up to Wait for one. Allowed, call
// release once the request is done (again: ErrReleased); denied, release
// is nil. An error is the input's, ctx's, or the store's under FailClosed.
func (c *Concurrency) Acquire(ctx context.Context, key string) (release func() error, d Decision, err error) {
	release, d, failure, err := c.Hold(ctx, key)
	if failure != nil {
		c.note("concurrency slots failing", failure)
	}
	return release, d, err
}

// Hold is Acquire that returns, rather than logs, the failure of Slots
// that FailMode decided (wrapping ErrStoreUnavailable; nil when Slots
// decided), for a caller that counts failures.
func (c *Concurrency) Hold(ctx context.Context, key string) (release func() error, d Decision, failure, err error) {
	lease := strconv.FormatUint(rand.Uint64(), 36)
	ttl := c.Lease
	if ttl == 0 {
		ttl = defaultLease
	}
	var deadline time.Time
	if c.Wait > 0 {
		deadline = time.Now().Add(c.Wait)
	}
	for backoff := 5 * time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
		slots := c.Slots
		d, err := c.acquire(ctx, slots, key, lease, ttl)
		failure = nil
		if err != nil && !IsInputError(err) {
			c.forget(slots, key, lease)
		}
		switch {
		case err != nil && IsInputError(err):
			return nil, Decision{}, nil, err
		case err != nil && ctx.Err() != nil:
			// The caller went away: no fail mode applies, nothing failed.
			return nil, Decision{}, nil, ctx.Err()
		case err != nil:
			failure = fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
			if c.FailMode == FailClosed {
				return nil, Decision{}, failure, failure
			}
			if c.FailMode == FailOpen || c.Local == nil {
				d = Decision{Allowed: true, Limit: Limit{Rate: c.Max}, Remaining: c.Max - 1}
				return func() error { return nil }, d, failure, nil
			}
			slots = c.Local
			if d, err = c.acquire(ctx, slots, key, lease, ttl); err != nil {
				return nil, Decision{}, failure, err
			}
		}
		if d.Allowed {
			return c.holder(slots, key, lease, ttl), d, failure, nil
		}
		wait := min(backoff+rand.N(backoff), d.RetryAfter)
		if deadline.IsZero() || time.Now().Add(wait).After(deadline) {
			return nil, d, failure, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, d, nil, ctx.Err()
		case <-t.C:
		}
	}
}

// forget releases lease in the background after an acquire that failed
// once sent: a store that was slow, not down, may still grant it, and a
// slot its requester gave up on must not stay held until its lease ends.
// Sent on the same connection after the acquire, the release follows it;
// releasing a lease that holds nothing changes nothing.
func (c *Concurrency) forget(slots slotStore, key, lease string) {
	go func() {
		timeout := c.Timeout
		if timeout <= 0 { // bounded all the same: no caller waits for it
			timeout = DefaultTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if _, err := slots.Release(ctx, key, lease); err != nil {
			c.note("concurrency slot not released; its lease will free it", err)
		}
	}()
}

// slotStore is the type of Concurrency's Slots and Local.
type slotStore = interface {
	Acquire(ctx context.Context, key, lease string, max int64, ttl time.Duration) (Decision, error)
	Renew(ctx context.Context, key, lease string, ttl time.Duration) (bool, error)
	Release(ctx context.Context, key, lease string) (bool, error)
}

// call makes one call to slots, bounded by Timeout.
func call[T any](c *Concurrency, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	if c.Timeout < 0 {
		return f(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(c.Timeout, DefaultTimeout))
	defer cancel()
	return f(ctx)
}

func (c *Concurrency) acquire(ctx context.Context, slots slotStore, key, lease string, ttl time.Duration) (Decision, error) {
	d, err := call(c, ctx, func(ctx context.Context) (Decision, error) {
		return slots.Acquire(ctx, key, lease, c.Max, ttl)
	})
	d.Limit = Limit{Rate: c.Max}
	return d, err
}

// holder returns the release function of a slot held by lease, renewing
// the lease meanwhile unless ttl is negative.
func (c *Concurrency) holder(slots slotStore, key, lease string, ttl time.Duration) func() error {
	var stop chan struct{}
	if ttl > 0 {
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
			_, err = call(c, context.Background(), func(ctx context.Context) (bool, error) {
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
func (c *Concurrency) renew(slots slotStore, key, lease string, ttl time.Duration, stop chan struct{}) {
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		held, err := call(c, context.Background(), func(ctx context.Context) (bool, error) {
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
