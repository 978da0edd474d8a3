package sluice_test

import (
	"context"
	"errors"
	"net"
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
