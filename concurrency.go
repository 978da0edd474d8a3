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

// Errors of Concurrency's input.
var (
	ErrEmptyLease         = errors.New("sluice: empty lease")
	ErrInvalidConcurrency = errors.New("sluice: concurrency must be above 0")
)

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
	// Slots keeps the slots, and Local is the stand-in FailLocal counts in
	// while Slots fails: memstore.Store and redisstore.Store keep them.
	// Slots is required; without Local, FailLocal decides as FailOpen.
	//
	// A slot is held by a lease, named by its holder: Acquire takes one of
	// max slots of key for lease for ttl, unless max are held, and its
	// Decision says which (Remaining: the slots left; RetryAfter, when
	// denied: the soonest a held lease expires unless released first).
	// Renew extends lease to ttl from now, false when it no longer holds
	// a slot. Release frees lease's slot, false when it held none; a slot
	// is never freed twice.
	Slots, Local interface {
		Acquire(ctx context.Context, key, lease string, max int64, ttl time.Duration) (Decision, error)
		Renew(ctx context.Context, key, lease string, ttl time.Duration) (bool, error)
		Release(ctx context.Context, key, lease string) (bool, error)
	}
	// Max is how many requests of one key may be in flight. Required,
	// above 0.
	Max int64
	// Lease bounds how long a crashed holder keeps its slot. Zero means
	// DefaultLease; negative means slots are held until released and
	// never renewed, for Slots whose holders live in their own process
	// (the memory store's).
	Lease time.Duration
	// Wait, if above 0, is how long Acquire waits for a slot of a full key
	// before it denies. Default 0: deny at once.
	Wait time.Duration
	// Timeout bounds each call to Slots. Zero means DefaultTimeout;
	// negative means only the caller's context bounds it.
	Timeout time.Duration
	// FailMode decides while Slots fails: FailLocal (the default) counts
	// in this process alone, Max per key per process, in Local; FailOpen
	// admits; FailClosed returns the error.
	FailMode FailMode
	// Logger receives a line when Slots fails (from Acquire) and when a
	// held slot's lease is lost, sampled: at most one a second per kind.
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

// Acquire takes a slot of key, waiting up to Wait for one. When the
// Decision allows, release must be called once the request is done; a
// second call returns ErrReleased and changes nothing. When it denies,
// release is nil. An error is the store's under FailClosed, ctx's, or
// one about the input (an empty or oversized key), whatever the fail mode.
func (c *Concurrency) Acquire(ctx context.Context, key string) (release func() error, d Decision, err error) {
	release, d, failure, err := c.Hold(ctx, key)
	if failure != nil {
		c.note("concurrency slots failing", failure)
	}
	return release, d, err
}

// Hold is Acquire that also returns the failure of Slots that FailMode
// decided, wrapped in ErrStoreUnavailable: nil when Slots decided. When
// failure is set and err is nil, FailOpen admitted (or FailLocal without
// Local), or FailLocal decided in Local. Unlike Acquire, it does not log
// the failure: a caller that counts failures reports it.
func (c *Concurrency) Hold(ctx context.Context, key string) (release func() error, d Decision, failure, err error) {
	lease := strconv.FormatUint(rand.Uint64(), 36)
	ttl := c.Lease
	if ttl == 0 {
		ttl = DefaultLease
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
