package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A Limiter given a Guard with a stand-in decides through it while the
// store hangs: the outage admits what the key had left in the store and
// no more, without an error; once the store is back it decides again.
func TestLimiterOnAGuardDecidesLocallyDuringHang(t *testing.T) {
	redistest.HourAhead()
	c := newChaos(t, guard.Options{Timeout: 200 * time.Millisecond})
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Hour}
	l, err := sluice.NewLimiter(c.guard, limit, sluice.LimiterOptions{FailMode: sluice.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("healthy: %+v, %v", d, err)
		}
	}
	c.proxy.Stall(true)
	admitted := 0
	for i := range 12 {
		d, err := l.Allow(ctx, "k")
		if err != nil {
			t.Fatalf("check %d during the hang: %v; want decided by the stand-in, without an error", i, err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("the hang admitted %d; want 3, what the store had left", admitted)
	}
	if h := c.guard.Health(); !h.Failing || h.FailedChecks != 12 {
		t.Fatalf("health during the hang: %+v; want failing, 12 failed checks", h)
	}
	c.proxy.Stall(false)
	c.recovered(t, func(h guard.Health) bool { return h.Replayed >= 3 })
}

// A Limiter given a Guard without a stand-in gets the store's failure as
// an error wrapping ErrStoreUnavailable, and decides it by its own
// FailMode: closed denies with the error, open allows without one. The
// two Limiters share the Guard's breaker: the failures of both open it,
// and then neither waits for the store.
func TestLimitersOnOneGuardShareItsBreaker(t *testing.T) {
	c := newChaos(t, guard.Options{Timeout: 200 * time.Millisecond})
	g, err := guard.New(c.store, guard.Options{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var storeErrors int
	closed, _ := sluice.NewLimiter(g, sluice.PerMinute(10), sluice.LimiterOptions{FailMode: sluice.FailClosed})
	open, _ := sluice.NewLimiter(g, sluice.PerMinute(10), sluice.LimiterOptions{FailMode: sluice.FailOpen,
		OnStoreError: func(error) { storeErrors++ }})
	other, _ := guard.New(c.store, guard.Options{Timeout: 200 * time.Millisecond})
	apart, _ := sluice.NewLimiter(other, sluice.PerMinute(10), sluice.LimiterOptions{FailMode: sluice.FailClosed})
	c.proxy.Down()
	ctx := context.Background()
	for i := range 3 {
		d, err := closed.Allow(ctx, "k")
		if !errors.Is(err, sluice.ErrStoreUnavailable) || d.Allowed || d.RetryAfter != time.Second {
			t.Fatalf("closed, check %d: %+v, %v; want denied with ErrStoreUnavailable", i, d, err)
		}
		if d, err := open.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("open, check %d: %+v, %v; want allowed without an error", i, d, err)
		}
	}
	if storeErrors != 3 {
		t.Errorf("OnStoreError called %d times for 3 failed calls", storeErrors)
	}
	// Six failures through one Guard: its breaker is open for both.
	if _, err := closed.Allow(ctx, "k"); !errors.Is(err, guard.ErrBreakerOpen) {
		t.Errorf("after 6 failures through one Guard: %v; want ErrBreakerOpen", err)
	}
	if h := g.Health(); h.Breaker != "open" || h.FailedChecks < 6 {
		t.Errorf("the shared Guard: %+v; want its breaker open after the failures of both", h)
	}
	// Another Guard on the same store shares nothing: its breaker is closed.
	if _, err := apart.Allow(ctx, "k"); errors.Is(err, guard.ErrBreakerOpen) || !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("a Limiter on another Guard: %v; want the store's own failure", err)
	}
	if h := other.Health(); h.FailedChecks != 1 {
		t.Errorf("the other Guard counts %d failed checks; want its own 1", h.FailedChecks)
	}
}

// Input errors pass through a Guard to the Limiter as they are: not a
// store failure, counted nowhere, under every mode.
func TestGuardStorePassesInputErrors(t *testing.T) {
	c := newChaos(t, guard.Options{})
	ctx := context.Background()
	if _, err := c.guard.Take(ctx, sluice.Request{Limit: sluice.PerSecond(1), Cost: 1}); !errors.Is(err, sluice.ErrEmptyKey) {
		t.Fatalf("Take with an empty key: %v", err)
	}
	reqs := []sluice.Request{{Key: "a", Limit: sluice.PerSecond(1), Cost: 1}, {Key: "a", Limit: sluice.PerSecond(1), Cost: 1}}
	if err := c.guard.TakeAll(ctx, reqs, make([]sluice.Decision, 2)); !errors.Is(err, sluice.ErrDuplicateRequest) {
		t.Fatalf("TakeAll with two requests of one state: %v", err)
	}
	if h := c.guard.Health(); h.FailedChecks != 0 || h.Failing {
		t.Fatalf("after bad input: %+v; want nothing failed", h)
	}
	if err := c.guard.Reset(ctx, "a", sluice.PerSecond(1)); err != nil {
		t.Fatal(err)
	}
}
