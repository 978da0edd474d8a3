package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
)

// NewSlots returns Slots with no slots held; stores sharing a backend
// must isolate themselves, for example with a fresh key prefix.
type NewSlots func(t *testing.T) guard.Slots

// RunSlots checks a guard.Slots: exact under concurrency, a slot never
// freed twice, bad input refused without a change, and (unless the
// Slots are InProcess, whose holders cannot outlive them) leases that
// free their slots when they expire and hold them while renewed.
func RunSlots(t *testing.T, newSlots NewSlots) {
	t.Run("exact under concurrency", func(t *testing.T) { slotsExact(t, newSlots(t)) })
	t.Run("release twice", func(t *testing.T) { slotsReleaseTwice(t, newSlots(t)) })
	t.Run("bad input", func(t *testing.T) { slotsBadInput(t, newSlots(t)) })
	s := newSlots(t)
	if ip, ok := s.(guard.InProcess); ok && ip.InProcess() {
		return
	}
	t.Run("lease expires", func(t *testing.T) { slotsLeaseExpires(t, s) })
	t.Run("renewed lease holds", func(t *testing.T) { slotsRenewed(t, newSlots(t)) })
}

// slotsExact has 64 goroutines take, hold and release slots of one key
// of 5: never more than 5 held at once, each one's Remaining consistent
// with that, and every slot free at the end.
func slotsExact(t *testing.T, s guard.Slots) {
	const max, callers, rounds = 5, 64, 20
	ctx := context.Background()
	var inFlight, peak, admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			for r := range rounds {
				lease := fmt.Sprintf("c%d-r%d", c, r)
				d, err := s.Acquire(ctx, "hot", lease, max, time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if !d.Allowed {
					continue
				}
				n := inFlight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				admitted.Add(1)
				time.Sleep(100 * time.Microsecond)
				inFlight.Add(-1)
				if ok, err := s.Release(ctx, "hot", lease); err != nil || !ok {
					errs <- fmt.Errorf("release %s: %v, %v", lease, ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if peak.Load() > max {
		t.Fatalf("%d held at once, max %d", peak.Load(), max)
	}
	if admitted.Load() < max {
		t.Fatalf("only %d slots ever taken", admitted.Load())
	}
	d, err := s.Acquire(ctx, "hot", "last", max, time.Minute)
	if err != nil || !d.Allowed || d.Remaining != max-1 {
		t.Fatalf("after every release: %+v, %v; want allowed with %d left", d, err, max-1)
	}
}

// slotsReleaseTwice: a second release of one lease frees nothing.
func slotsReleaseTwice(t *testing.T, s guard.Slots) {
	ctx := context.Background()
	for _, lease := range []string{"a", "b"} {
		if d, err := s.Acquire(ctx, "k", lease, 2, time.Minute); err != nil || !d.Allowed {
			t.Fatalf("acquire %s: %+v, %v", lease, d, err)
		}
	}
	if ok, err := s.Release(ctx, "k", "a"); err != nil || !ok {
		t.Fatalf("first release: %v, %v", ok, err)
	}
	if ok, err := s.Release(ctx, "k", "a"); err != nil || ok {
		t.Fatalf("second release: %v, %v; want false, nothing freed", ok, err)
	}
	if d, err := s.Acquire(ctx, "k", "c", 2, time.Minute); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("acquire c: %+v, %v; want allowed, 0 left", d, err)
	}
	if d, err := s.Acquire(ctx, "k", "d", 2, time.Minute); err != nil || d.Allowed {
		t.Fatalf("acquire d past max: %+v, %v; want denied (b and c hold both slots)", d, err)
	}
}

// slotsBadInput: an error naming the problem, and no slot taken.
func slotsBadInput(t *testing.T, s guard.Slots) {
	ctx := context.Background()
	for _, tc := range []struct {
		key, lease string
		max        int64
		want       error
	}{
		{"k", "l", 0, sluice.ErrInvalidConcurrency},
		{"k", "l", -3, sluice.ErrInvalidConcurrency},
		{"k", "", 1, sluice.ErrEmptyLease},
		{"", "l", 1, sluice.ErrEmptyKey},
	} {
		if _, err := s.Acquire(ctx, tc.key, tc.lease, tc.max, time.Minute); !errors.Is(err, tc.want) {
			t.Errorf("Acquire(%q, %q, %d) = %v; want %v", tc.key, tc.lease, tc.max, err, tc.want)
		}
	}
	if d, err := s.Acquire(ctx, "k", "l", 1, time.Minute); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after bad input: %+v, %v; want the one slot free", d, err)
	}
}

// slotsLeaseExpires: a lease neither renewed nor released frees its slot
// when it expires, and not before.
func slotsLeaseExpires(t *testing.T, s guard.Slots) {
	ctx := context.Background()
	if d, err := s.Acquire(ctx, "e", "gone", 1, 300*time.Millisecond); err != nil || !d.Allowed {
		t.Fatalf("acquire: %+v, %v", d, err)
	}
	d, err := s.Acquire(ctx, "e", "next", 1, time.Minute)
	if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > 300*time.Millisecond {
		t.Fatalf("while held: %+v, %v; want denied, retry within the lease", d, err)
	}
	time.Sleep(d.RetryAfter + 20*time.Millisecond)
	if d, err := s.Acquire(ctx, "e", "next", 1, time.Minute); err != nil || !d.Allowed {
		t.Fatalf("after the lease expired: %+v, %v; want allowed", d, err)
	}
	if ok, err := s.Renew(ctx, "e", "gone", time.Minute); err != nil || ok {
		t.Fatalf("renewing the expired lease: %v, %v; want false", ok, err)
	}
}

// slotsRenewed: a lease renewed before it expires keeps its slot.
func slotsRenewed(t *testing.T, s guard.Slots) {
	ctx := context.Background()
	if d, err := s.Acquire(ctx, "r", "kept", 1, 300*time.Millisecond); err != nil || !d.Allowed {
		t.Fatalf("acquire: %+v, %v", d, err)
	}
	for range 3 {
		time.Sleep(150 * time.Millisecond)
		if ok, err := s.Renew(ctx, "r", "kept", 300*time.Millisecond); err != nil || !ok {
			t.Fatalf("renew: %v, %v", ok, err)
		}
	}
	if d, err := s.Acquire(ctx, "r", "other", 1, time.Minute); err != nil || d.Allowed {
		t.Fatalf("450ms in, a renewed 300ms lease: %+v, %v; want the slot still held", d, err)
	}
}
