package sluice_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

func TestConcurrencyReleaseTwice(t *testing.T) {
	c := &sluice.Concurrency{Slots: memstore.New(memstore.Options{}), Max: 2}
	ctx := context.Background()
	r1, d, err := c.Acquire(ctx, "k")
	if err != nil || r1 == nil || d.Remaining != 1 || d.Limit.Rate != 2 {
		t.Fatalf("first: %+v, %v", d, err)
	}
	r2, _, _ := c.Acquire(ctx, "k")
	if err := r1(); err != nil {
		t.Fatal(err)
	}
	if err := r1(); !errors.Is(err, sluice.ErrReleased) {
		t.Fatalf("second release: %v; want ErrReleased", err)
	}
	// r2 still holds its slot: one free, not two.
	if r, _, _ := c.Acquire(ctx, "k"); r == nil {
		t.Fatal("no slot free after r1's release")
	}
	if r, d, _ := c.Acquire(ctx, "k"); r != nil {
		t.Fatalf("a second slot free after r1 was released twice: %+v", d)
	}
	r2()
}

func TestConcurrencyWaits(t *testing.T) {
	c := &sluice.Concurrency{Slots: memstore.New(memstore.Options{}), Max: 1, Wait: time.Minute}
	ctx := context.Background()
	release, _, _ := c.Acquire(ctx, "k")
	var freed atomic.Bool
	go func() {
		time.Sleep(100 * time.Millisecond) // so that the Acquire below waits
		freed.Store(true)
		release()
	}()
	r, d, err := c.Acquire(ctx, "k")
	if err != nil || r == nil {
		t.Fatalf("waiting for the slot: %+v, %v", d, err)
	}
	if !freed.Load() {
		t.Fatal("got the slot before it was freed")
	}
	// A wait that runs out denies.
	short := &sluice.Concurrency{Slots: c.Slots, Max: 1, Wait: 50 * time.Millisecond}
	if r2, d, err := short.Acquire(ctx, "k"); r2 != nil || err != nil || d.Allowed {
		t.Fatalf("full key, wait out: %+v, %v; want denied", d, err)
	}
	r()
}

func TestConcurrencyValidate(t *testing.T) {
	slots := memstore.New(memstore.Options{})
	for _, c := range []*sluice.Concurrency{
		{Max: 1},
		{Slots: slots},
		{Slots: slots, Max: -1},
		{Slots: slots, Max: 1, Wait: -time.Second},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v: Validate() = nil", c)
		}
	}
}

// TestConcurrencyStoreDown: with Redis unreachable, open admits, closed
// returns the error, local counts in this process.
func TestConcurrencyStoreDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	store, err := redisstore.Open("redis://"+addr, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	open := &sluice.Concurrency{Slots: store, Max: 1, FailMode: sluice.FailOpen, Timeout: 200 * time.Millisecond}
	for range 3 {
		if r, d, err := open.Acquire(ctx, "k"); r == nil || err != nil {
			t.Fatalf("fail open: %+v, %v", d, err)
		}
	}
	// Bad input is an error under every fail mode, never admitted.
	if r, _, err := open.Acquire(ctx, ""); r != nil || !errors.Is(err, sluice.ErrEmptyKey) {
		t.Fatalf("fail open, empty key: %v; want ErrEmptyKey", err)
	}
	closed := &sluice.Concurrency{Slots: store, Max: 1, FailMode: sluice.FailClosed, Timeout: 200 * time.Millisecond}
	if r, _, err := closed.Acquire(ctx, "k"); r != nil || err == nil {
		t.Fatal("fail closed admitted with Redis down")
	}
	local := &sluice.Concurrency{Slots: store, Max: 2, Local: memstore.New(memstore.Options{}), Timeout: 200 * time.Millisecond}
	var held []func() error
	var mu sync.Mutex
	for range 3 {
		r, _, err := local.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if r != nil {
			mu.Lock()
			held = append(held, r)
			mu.Unlock()
		}
	}
	if len(held) != 2 {
		t.Fatalf("fail local admitted %d of max 2", len(held))
	}
	for _, r := range held {
		if err := r(); err != nil {
			t.Fatalf("releasing a local slot: %v", err)
		}
	}
}

// TestConcurrencyThroughTheGuard: with the slots on the Guard's store, a
// request whose slot and rate both fail has one outcome and is counted
// once; the Guard's breaker spares slot calls to a hung store; the store
// decides again once it is back, with every slot free: the acquires held
// up by the hang reach Redis after it and are granted, and the releases
// sent after them when they timed out give those slots back (their
// 30-second leases would otherwise keep the key full).
func TestConcurrencyThroughTheGuard(t *testing.T) {
	c := newChaos(t, sluice.GuardOptions{Timeout: 200 * time.Millisecond})
	conc := &sluice.Concurrency{Slots: c.store, Max: 2, FailMode: sluice.FailOpen, Guard: c.guard, Label: "uploads"}
	limit := sluice.Limit{Rate: 100, Period: time.Minute}
	ctx := context.Background()
	// check holds a slot of key, then decides its rate, as a front door does.
	check := func(key string) (sluice.Verdict, sluice.Verdict, func() error) {
		chk := &sluice.Check{Label: "uploads", Enforced: []sluice.Request{{Key: key, Limit: limit, Cost: 1}},
			Modes: []sluice.FailMode{sluice.FailOpen}}
		release, _, hv := conc.Hold(ctx, chk, key)
		if release == nil {
			return hv, sluice.Verdict{}, nil
		}
		return hv, c.guard.Decide(ctx, chk, make([]sluice.Decision, 1), nil), release
	}
	hv, v, release := check("u")
	if hv.Outcome != sluice.Allowed || v.Outcome != sluice.Allowed {
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
		if hv.Outcome != sluice.FailedOpen || !errors.Is(hv.Err, sluice.ErrStoreUnavailable) || v.Outcome != sluice.FailedOpen {
			t.Fatalf("request %d during the hang: hold %v (%v), check %v; want failed_open", i, hv.Outcome, hv.Err, v.Outcome)
		}
		if errors.Is(hv.Err, sluice.ErrBreakerOpen) {
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
		if hv.Outcome == sluice.Allowed && v.Outcome == sluice.Allowed {
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
	g, err := sluice.NewGuard(memstore.New(memstore.Options{}), sluice.GuardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	limit := sluice.Limit{Rate: 100, Period: time.Minute}
	for _, tc := range []struct {
		mode  sluice.FailMode
		local sluice.Slots
		want  []sluice.Outcome
	}{
		{sluice.FailOpen, nil, []sluice.Outcome{sluice.FailedOpen, sluice.FailedOpen, sluice.FailedOpen}},
		{sluice.FailLocal, memstore.New(memstore.Options{}), []sluice.Outcome{sluice.LocalAllowed, sluice.LocalAllowed, sluice.LocalDenied}},
	} {
		conc := &sluice.Concurrency{Slots: down, Max: 2, FailMode: tc.mode, Local: tc.local, Guard: g, Label: "p", Timeout: 200 * time.Millisecond}
		before := g.Health().FailedChecks
		var held []func() error
		for i, want := range tc.want {
			chk := &sluice.Check{Label: "p", Enforced: []sluice.Request{{Key: "k", Limit: limit, Cost: 1}}}
			release, _, hv := conc.Hold(ctx, chk, "k")
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
