package guard

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// Slots keeps, per key, the slots of requests in flight: the state of a
// sluice.Concurrency, which takes it as its Slots. The memory and Redis
// stores implement it.
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
	Acquire(ctx context.Context, key string, lease string, max int64, ttl time.Duration) (sluice.Decision, error)
	// Renew extends lease to ttl from now; false when it no longer holds
	// a slot (it expired).
	Renew(ctx context.Context, key string, lease string, ttl time.Duration) (bool, error)
	// Release frees the slot lease holds; false when it held none (released
	// already, or expired). A slot is never freed twice.
	Release(ctx context.Context, key string, lease string) (bool, error)
}

// CheckSlot validates the arguments of Slots.Acquire: a key as a
// Request's, a lease, and a max above 0. Stores call it first.
func CheckSlot(key, lease string, max int64) error {
	switch {
	case lease == "":
		return sluice.ErrEmptyLease
	case max <= 0:
		return fmt.Errorf("%w: %d", sluice.ErrInvalidConcurrency, max)
	}
	r := sluice.Request{Key: key, Limit: sluice.Limit{Rate: max}, Cost: 1}
	return r.CheckKeyAndCost()
}

// Bind sets c, before its first use, to call its Slots through g when
// they are g's store: under g's timeout and circuit breaker (c.Timeout is
// then not used), so that a store that is down costs an acquire no
// timeout once the breaker opens. Slots of an InProcess store are held
// until released, never renewed (c.Lease -1). Hold a slot of c with Hold.
func (g *Guard) Bind(c *sluice.Concurrency) {
	if inProcess(c.Slots) {
		c.Lease = -1
	}
	if s, ok := c.Slots.(Slots); ok && any(s) == any(g.store) {
		c.Slots, c.Timeout = guardedSlots{g, s}, -1
	}
}

// guardedSlots are a Guard's store's slots, called through the Guard.
type guardedSlots struct {
	g *Guard
	s Slots
}

func (gs guardedSlots) Acquire(ctx context.Context, key, lease string, max int64, ttl time.Duration) (sluice.Decision, error) {
	return do(gs.g, ctx, func(ctx context.Context) (sluice.Decision, error) {
		return gs.s.Acquire(ctx, key, lease, max, ttl)
	})
}

func (gs guardedSlots) Renew(ctx context.Context, key, lease string, ttl time.Duration) (bool, error) {
	return do(gs.g, ctx, func(ctx context.Context) (bool, error) { return gs.s.Renew(ctx, key, lease, ttl) })
}

func (gs guardedSlots) Release(ctx context.Context, key, lease string) (bool, error) {
	return do(gs.g, ctx, func(ctx context.Context) (bool, error) { return gs.s.Release(ctx, key, lease) })
}

// Hold takes a slot of key from c as part of check chk (nil for none),
// which the Guard decides next, labelled label, with the hold's Outcome:
// Allowed or Denied when the slots decided; FailedOpen, LocalAllowed or
// LocalDenied when their store failed and c.FailMode decided;
// FailedClosed when it failed under FailClosed (or the caller went away:
// Err says which); Invalid for bad input. A failure is logged, sampled,
// and counted in the Guard's Health once per check; one that admitted is
// noted in chk.Held. When the Decision allows, release must be called
// once the request is done.
func (g *Guard) Hold(ctx context.Context, c *sluice.Concurrency, chk *Check, label, key string) (release func() error, d sluice.Decision, v Verdict) {
	release, d, failure, err := c.Hold(ctx, key)
	switch {
	case err != nil && sluice.IsInputError(err):
		return nil, sluice.Decision{}, Verdict{Outcome: Invalid, Closest: -1, Err: err}
	case failure != nil:
		if chk == nil || !chk.Held.Failed() {
			g.failures.Add(1)
		}
		g.note(ctx, label, "concurrency slots failed; fail_mode "+c.FailMode.String()+" decides", failure)
	}
	if err != nil {
		return nil, sluice.Decision{}, Verdict{Outcome: FailedClosed, Closest: -1, Err: err}
	}
	v = Verdict{Outcome: Allowed, Closest: 0, Err: failure}
	switch {
	case failure == nil && !d.Allowed:
		v.Outcome = Denied
	case failure == nil:
	case c.FailMode == sluice.FailOpen || c.Local == nil:
		v.Outcome = FailedOpen
	case d.Allowed:
		v.Outcome = LocalAllowed
	default:
		v.Outcome = LocalDenied
	}
	if chk != nil && release != nil && v.Outcome.Failed() && !chk.Held.Failed() {
		chk.Held = v.Outcome
	}
	return release, d, v
}
