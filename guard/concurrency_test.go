package guard_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// TestConcurrencyThroughTheGuard: with the slots on the Guard's store, a
// request whose slot and rate both fail has one outcome and is counted
// once; the Guard's breaker spares slot calls to a hung store; the store
// decides again once it is back, with every slot free: the acquires held
// up by the hang reach Redis after it and are granted, and the releases
// sent after them when they timed out give those slots back (their
// 30-second leases would otherwise keep the key full).
func TestConcurrencyThroughTheGuard(t *testing.T) {
	c := newChaos(t, guard.Options{Timeout: 200 * time.Millisecond})
	conc := &sluice.Concurrency{Slots: c.store, Max: 2, FailMode: sluice.FailOpen}
	c.guard.Bind(conc)
	limit := sluice.Limit{Rate: 100, Period: time.Minute}
	ctx := context.Background()
	// check holds a slot of key, then decides its rate, as a front door does.
	check := func(key string) (guard.Verdict, guard.Verdict, func() error) {
		chk := &guard.Check{Label: "uploads", Enforced: []sluice.Request{{Key: key, Limit: limit, Cost: 1}},
			Modes: []sluice.FailMode{sluice.FailOpen}}
		release, _, hv := c.guard.Hold(ctx, conc, chk, "uploads", key)
		if release == nil {
			return hv, guard.Verdict{}, nil
		}
		return hv, c.guard.Decide(ctx, chk, make([]sluice.Decision, 1), nil), release
	}
	hv, v, release := check("u")
	if hv.Outcome != guard.Allowed || v.Outcome != guard.Allowed {
		t.Fatalf("healthy: hold %v, check %v", hv.Outcome, v.Outcome)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	c.proxy.Stall(true)
	const n = 12
	spared := 0
	start := time.Now()
	for i := range n {
		hv, v, release := check("u")
		if hv.Outcome != guard.FailedOpen || !errors.Is(hv.Err, sluice.ErrStoreUnavailable) || v.Outcome != guard.FailedOpen {
			t.Fatalf("request %d during the hang: hold %v (%v), check %v; want failed_open", i, hv.Outcome, hv.Err, v.Outcome)
		}
		if errors.Is(hv.Err, guard.ErrBreakerOpen) {
			spared++
		}
		release()
	}
	took := time.Since(start)
	if h := c.guard.Health(); h.FailedChecks != n {
		t.Fatalf("%d requests failed open, slot and rate each; Health counts %d, want %d", n, h.FailedChecks, n)
	}
	// Five failures in a row open the breaker, so most slot calls are
	// spared: without it each would wait out the 200ms timeout.
	if spared < n-5 {
		t.Fatalf("the breaker spared %d of %d slot calls (took %v); want at least %d", spared, n, took, n-5)
	}
	if !strings.Contains(c.log.String(), "concurrency slots failed") {
		t.Fatalf("no line for the slots' failure in:\n%s", c.log)
	}
	c.proxy.Stall(false)
	// Slot calls that timed out during the hang may still reach Redis when
	// it is back and hold a slot until their lease ends: wait for that.
	for deadline := time.Now().Add(30 * time.Second); ; {
		hv, v, release := check("u")
		if release != nil {
			release()
		}
		if hv.Outcome == guard.Allowed && v.Outcome == guard.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the hang: hold %v, check %v; want the store deciding", hv.Outcome, v.Outcome)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConcurrencyFailureCountedWhenRatesDecide: slots on a store that is
// down, rates on one that works: a request the slots' fail mode admitted
// has that outcome, not "allowed", and counts as a failed check; one
// their stand-in refused is local_denied.
func TestConcurrencyFailureCountedWhenRatesDecide(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	down, err := redisstore.Open("redis://"+addr, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	g, err := guard.New(memstore.New(memstore.Options{}), guard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limit := sluice.Limit{Rate: 100, Period: time.Minute}
	for _, tc := range []struct {
		mode  sluice.FailMode
		local guard.Slots
		want  []guard.Outcome
	}{
		{sluice.FailOpen, nil, []guard.Outcome{guard.FailedOpen, guard.FailedOpen, guard.FailedOpen}},
		{sluice.FailLocal, memstore.New(memstore.Options{}), []guard.Outcome{guard.LocalAllowed, guard.LocalAllowed, guard.LocalDenied}},
	} {
		conc := &sluice.Concurrency{Slots: down, Max: 2, FailMode: tc.mode, Timeout: 200 * time.Millisecond}
		if tc.local != nil {
			conc.Local = tc.local
		}
		g.Bind(conc)
		before := g.Health().FailedChecks
		var held []func() error
		for i, want := range tc.want {
			chk := &guard.Check{Label: "p", Enforced: []sluice.Request{{Key: "k", Limit: limit, Cost: 1}}}
			release, _, hv := g.Hold(ctx, conc, chk, "p", "k")
			got := hv.Outcome
			if release != nil {
				held = append(held, release)
				got = g.Decide(ctx, chk, make([]sluice.Decision, 1), nil).Outcome
			}
			if got != want {
				t.Fatalf("%v, request %d: %v; want %v", tc.mode, i, got, want)
			}
		}
		if n := g.Health().FailedChecks - before; n != int64(len(tc.want)) {
			t.Fatalf("%v: %d failed checks counted for %d requests", tc.mode, n, len(tc.want))
		}
		for _, r := range held {
			r()
		}
	}
}
