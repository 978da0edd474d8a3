package guard

import (
	"context"

	"github.com/sluicehq/sluice"
)

// The Guard as a sluice.Store: what a Limiter, or any caller of the Store
// interface, decides through. Every request is FailLocal: while the store
// fails, the stand-in decides (Options.Local); without one, or when it
// fails too, the call returns the store's error wrapped in
// sluice.ErrStoreUnavailable, for the caller's own failure policy.

var _ sluice.Store = (*Guard)(nil)

// Take decides req through the Guard: the store, under the timeout and
// the breaker, or the stand-in while the store fails.
func (g *Guard) Take(ctx context.Context, req sluice.Request) (d sluice.Decision, err error) {
	v := g.take(ctx, "", &req, sluice.FailLocal, &d)
	return d, storeErr(&v)
}

// TakeAll decides reqs together, all-or-nothing, as Take decides one.
func (g *Guard) TakeAll(ctx context.Context, reqs []sluice.Request, dst []sluice.Decision) error {
	v := g.Decide(ctx, &Check{Enforced: reqs}, dst, nil)
	return storeErr(&v)
}

// Reset forgets the state of key under limit in the store.
func (g *Guard) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	return g.store.Reset(ctx, key, limit)
}

// storeErr is the error a Store call returns for v: the input's, or the
// store's where no stand-in decided.
func storeErr(v *Verdict) error {
	switch v.Outcome {
	case Invalid, FailedOpen, FailedClosed:
		return v.Err
	}
	return nil
}

// Closest returns the index of the decision closest to its limit: a denied one
// with the longest RetryAfter if any, else the one with the fewest remaining
// relative to its rate. It returns -1 for no decisions.
func Closest(ds []sluice.Decision) int {
	best := -1
	for i := range ds {
		if best < 0 || closer(&ds[i], &ds[best]) {
			best = i
		}
	}
	return best
}

func closer(a, b *sluice.Decision) bool {
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
