package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
)

// RunProperties checks, for every algorithm: that the store decides random
// traffic exactly as the sequential reference does; that concurrent callers
// on one hot key are admitted exactly the capacity, never one more; that a
// batch is all-or-nothing under concurrency; that Reset restores capacity;
// that the store's own clock is used when Request.Now is zero; that a
// refund never lets a bucket serve past its capacity plus its refill;
// and that the store keeps no caller's bytes of a key (the Store
// contract).
func RunProperties(t *testing.T, newStore NewStore) {
	t.Run("keys copied", func(t *testing.T) { RunKeysCopied(t, newStore) })
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Run("matches reference", func(t *testing.T) { matchesReference(t, newStore(t), alg) })
			t.Run("extreme limits", func(t *testing.T) { extremeLimits(t, newStore(t), alg) })
			t.Run("long state", func(t *testing.T) { longState(t, newStore(t), alg) })
			t.Run("hot key exact", func(t *testing.T) { hotKeyExact(t, newStore(t), alg) })
			t.Run("batch atomic", func(t *testing.T) { batchAtomic(t, newStore(t), alg) })
			t.Run("reset", func(t *testing.T) { reset(t, newStore(t), alg) })
			t.Run("store clock", func(t *testing.T) { storeClock(t, newStore(t), alg) })
			t.Run("reservations", func(t *testing.T) { reservations(t, newStore(t), alg) })
			if alg == sluice.TokenBucket || alg == sluice.GCRA || alg == sluice.LeakyBucket {
				t.Run("refunds never bank", func(t *testing.T) { refundsNeverBank(t, newStore(t), alg) })
			}
			if alg == sluice.Calendar {
				t.Run("next midnight", func(t *testing.T) { nextMidnight(t, newStore(t)) })
			}
		})
	}
}

// RunKeysCopied checks, for every algorithm, that the store keeps copies
// of the keys it holds and never the caller's bytes, as the Store contract
// says. RunProperties runs it; a store that is not exact (localsync) can
// run it alone, on the algorithms it takes (none means all).
func RunKeysCopied(t *testing.T, newStore NewStore, algs ...sluice.Algorithm) {
	if len(algs) == 0 {
		algs = algorithms
	}
	for _, alg := range algs {
		t.Run(alg.String(), func(t *testing.T) { keysCopied(t, newStore(t), alg) })
	}
}

// calendarised turns limits of the Calendar algorithm into calendar
// limits of about their period, some in zones, and returns by how much
// their traffic's time should run faster, so that it still crosses
// windows: 60× for calendars, 1× for the rest.
func calendarised(limits []sluice.Limit) time.Duration {
	if len(limits) == 0 || limits[0].Algorithm != sluice.Calendar {
		return 1
	}
	units := []struct {
		upTo time.Duration
		unit time.Duration
		zone string
	}{
		{time.Second, sluice.CalendarMinute, "UTC"},
		{10 * time.Second, sluice.CalendarHour, "Asia/Kolkata"},
		{time.Hour, sluice.CalendarHour, "UTC"},
		{2 * time.Hour, sluice.CalendarDay, "America/New_York"},
		{30 * 24 * time.Hour, sluice.CalendarWeek, "Europe/Berlin"},
		{sluice.MaxSpan, sluice.CalendarMonth, "Australia/Lord_Howe"},
	}
	for i := range limits {
		l := &limits[i]
		for _, u := range units {
			if l.Period <= u.upTo {
				l.Period, l.Burst = u.unit, 0
				l.Zone, _ = sluice.LoadZone(u.zone)
				break
			}
		}
	}
	return 60
}

var algorithms = []sluice.Algorithm{
	sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow,
	sluice.TokenBucket, sluice.LeakyBucket, sluice.GCRA, sluice.Calendar,
}

// matchesReference replays seeded random traffic: a few keys, two limits
// per algorithm (single requests and two-limit batches on one key), costs
// 0..3, times moving forward by 0..300ms with some bursts at one instant.
func matchesReference(t *testing.T, store sluice.Store, alg sluice.Algorithm) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(alg), 42))
	limits := []sluice.Limit{
		{Algorithm: alg, Rate: 7, Period: time.Second, Burst: 4},
		{Algorithm: alg, Rate: 20, Period: 3 * time.Second},
		// The first's state under another rate, as a limit raised or an
		// override gives it, taken in turn with the first.
		{Algorithm: alg, Rate: 11, Period: time.Second},
	}
	if alg == sluice.SlidingLog || alg == sluice.SlidingWindow || alg == sluice.FixedWindow {
		limits[0].Burst = 0
	}
	speed := calendarised(limits)
	ref := newReference()
	now := Epoch.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
	got := make([]sluice.Decision, 2)
	for i := range 3000 {
		if rng.IntN(3) > 0 {
			now = now.Add(time.Duration(rng.IntN(300_000)) * time.Microsecond * speed)
		}
		key := fmt.Sprintf("k%d", rng.IntN(4))
		cost := int64(rng.IntN(4))
		var reqs []sluice.Request
		if rng.IntN(4) == 0 {
			reqs = []sluice.Request{
				{Key: key, Limit: limits[0], Cost: cost, Now: now},
				{Key: key, Limit: limits[1], Cost: cost, Now: now},
			}
		} else {
			reqs = []sluice.Request{{Key: key, Limit: limits[rng.IntN(3)], Cost: cost, Now: now}}
		}
		want := ref.take(reqs, now.UnixMicro())
		var err error
		if len(reqs) == 1 {
			got[0], err = store.Take(ctx, reqs[0])
		} else {
			err = store.TakeAll(ctx, reqs, got)
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		for j := range reqs {
			if got[j] != want[j] {
				t.Fatalf("step %d at %v, %s cost %d under %v:\n got %+v\nwant %+v",
					i, now.Sub(Epoch), key, cost, reqs[j].Limit, got[j], want[j])
			}
		}
	}
}

// reservations replays seeded random reservations: a take of an
// estimate, then a settlement for an actual cost (the difference taken by
// force when it is more, given back as a refund of the take when it is
// less) or a cancellation (all of it given back), some long after their
// take, and checks that every take is decided as the reference decides it.
func reservations(t *testing.T, store sluice.Store, alg sluice.Algorithm) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(alg), 7))
	limits := []sluice.Limit{{Algorithm: alg, Rate: 9, Period: time.Second, Burst: 6}}
	if alg == sluice.SlidingLog || alg == sluice.SlidingWindow || alg == sluice.FixedWindow {
		limits[0].Burst = 0
	}
	speed := calendarised(limits)
	limit := limits[0]
	capacity := limit.Capacity()
	ref := newReference()
	type held struct {
		req   sluice.Request
		taken time.Time
	}
	var open []held
	now := Epoch.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
	for i := range 2000 {
		if rng.IntN(3) > 0 {
			now = now.Add(time.Duration(rng.IntN(200_000)) * time.Microsecond * speed)
		}
		if op := rng.IntN(3); op == 0 || len(open) == 0 {
			req := sluice.Request{Key: fmt.Sprintf("k%d", rng.IntN(3)), Limit: limit, Cost: 1 + rng.Int64N(capacity), Now: now}
			want := ref.take([]sluice.Request{req}, now.UnixMicro())[0]
			got, err := store.Take(ctx, req)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if got != want {
				t.Fatalf("step %d at %v: reserve %d of %s under %v:\n got %+v\nwant %+v", i, now.Sub(Epoch), req.Cost, req.Key, limit, got, want)
			}
			if got.Allowed {
				open = append(open, held{req, now})
			}
			continue
		}
		j := rng.IntN(len(open))
		h := open[j]
		open = append(open[:j], open[j+1:]...)
		actual := int64(0) // a cancellation
		if rng.IntN(2) == 0 {
			actual = rng.Int64N(2*capacity + 1)
		}
		req := sluice.Request{Key: h.req.Key, Limit: limit, Now: now}
		switch d := actual - h.req.Cost; {
		case d > 0:
			req.Cost, req.Force = min(d, capacity), true
			ref.force(req, now.UnixMicro())
		case d < 0:
			req.Cost, req.Refund = -d, h.taken
			ref.refund(req, now.UnixMicro())
		default:
			continue
		}
		d, err := store.Take(ctx, req)
		if err != nil {
			t.Fatalf("step %d: settle %+v: %v", i, req, err)
		}
		if !req.Refund.IsZero() && !d.Allowed {
			t.Fatalf("step %d: a refund was denied: %+v", i, d)
		}
	}
}

// extremeLimits replays traffic on the largest limits Validate accepts,
// where products pass 2^53 and exactness needs 128-bit (Go) or long
// (Lua) multiplication, and compares with the reference.
func extremeLimits(t *testing.T, store sluice.Store, alg sluice.Algorithm) {
	ctx := context.Background()
	limits := []sluice.Limit{
		{Algorithm: alg, Rate: 1e9, Period: 365 * 24 * time.Hour},
		{Algorithm: alg, Rate: 1e9, Period: time.Millisecond},
		{Algorithm: alg, Rate: sluice.MaxRate, Period: 7 * time.Millisecond, Burst: sluice.MaxRate - 1},
		{Algorithm: alg, Rate: 7, Period: sluice.MaxSpan, Burst: 3},
		{Algorithm: alg, Rate: 999_999_937, Period: 97 * 24 * time.Hour, Burst: 123_456_789},
	}
	calendarised(limits)
	rng := rand.New(rand.NewPCG(uint64(alg), 7))
	ref := newReference()
	now := Epoch
	for i, l := range limits {
		if l.Validate() != nil {
			continue // the sliding log's rate cap
		}
		key := fmt.Sprintf("x%d", i)
		capacity := l.Capacity()
		for step := range 40 {
			dt := min(l.Period/8, 365*24*time.Hour) // stay before 2150, the bound of Request.Now
			now = now.Add(time.Duration(rng.Int64N(int64(dt)+1)) / time.Microsecond * time.Microsecond)
			cost := []int64{1, 0, capacity / 3, capacity, rng.Int64N(capacity + 1)}[rng.IntN(5)]
			req := sluice.Request{Key: key, Limit: l, Cost: cost, Now: now}
			want := ref.take([]sluice.Request{req}, now.UnixMicro())[0]
			got, err := store.Take(ctx, req)
			if err != nil {
				t.Fatalf("%v step %d: %v", l, step, err)
			}
			if got != want {
				t.Fatalf("%v step %d, cost %d:\n got %+v\nwant %+v", l, step, cost, got, want)
			}
		}
	}
}

// longState replays traffic on one key under 500/1s: hundreds of
// admissions within a period (a sliding log of hundreds of entries), and
// now and then a pause that expires many at once, and compares with the
// reference.
func longState(t *testing.T, store sluice.Store, alg sluice.Algorithm) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(alg), 9))
	limits := []sluice.Limit{{Algorithm: alg, Rate: 500, Period: time.Second}}
	speed := calendarised(limits)
	l := limits[0]
	ref := newReference()
	now := Epoch
	for step := range 4000 {
		switch r := rng.IntN(100); {
		case r == 0:
			now = now.Add(time.Duration(500+rng.IntN(1000)) * time.Millisecond * speed)
		case r < 70:
			now = now.Add(time.Duration(rng.IntN(4000)) * time.Microsecond * speed)
		}
		req := sluice.Request{Key: "long", Limit: l, Cost: int64(rng.IntN(4)), Now: now}
		want := ref.take([]sluice.Request{req}, now.UnixMicro())[0]
		got, err := store.Take(ctx, req)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if got != want {
			t.Fatalf("step %d at %v, cost %d:\n got %+v\nwant %+v", step, now.Sub(Epoch), req.Cost, got, want)
		}
	}
}

// hotKeyExact has 16 goroutines take cost 1 from one key at one instant,
// 3x the capacity in all: exactly the capacity must be admitted.
func hotKeyExact(t *testing.T, store sluice.Store, alg sluice.Algorithm) {
	const capacity = 100
	limit := sluice.Limit{Algorithm: alg, Rate: capacity, Period: time.Hour}
	now := Epoch.Add(time.Minute)
	var admitted atomic.Int64
	hammer(t, 16, 3*capacity/16+1, func() error {
		d, err := store.Take(context.Background(), sluice.Request{Key: "hot", Limit: limit, Cost: 1, Now: now})
		if d.Allowed {
			admitted.Add(1)
		}
		return err
	})
	if got := admitted.Load(); got != capacity {
		t.Fatalf("admitted %d of a capacity of %d", got, capacity)
	}
}

// batchAtomic has goroutines take from one key under two limits at once and
// under the larger alone: every admitted batch took from both, so the small
// limit's count equals the batches admitted and both stay within capacity.
func batchAtomic(t *testing.T, store sluice.Store, alg sluice.Algorithm) {
	limits := []sluice.Limit{{Algorithm: alg, Rate: 30, Period: time.Hour}, {Algorithm: alg, Rate: 50, Period: 2 * time.Hour}}
	calendarised(limits)
	small, large := limits[0], limits[1]
	now := Epoch.Add(time.Minute)
	var batches, singles atomic.Int64
	var i atomic.Int64
	hammer(t, 8, 20, func() error {
		if i.Add(1)%2 == 0 {
			d, err := store.Take(context.Background(), sluice.Request{Key: "b", Limit: large, Cost: 1, Now: now})
			if d.Allowed {
				singles.Add(1)
			}
			return err
		}
		reqs := []sluice.Request{
			{Key: "b", Limit: small, Cost: 1, Now: now},
			{Key: "b", Limit: large, Cost: 1, Now: now},
		}
		ds := make([]sluice.Decision, 2)
		if err := store.TakeAll(context.Background(), reqs, ds); err != nil {
			return err
		}
		if ds[0].Allowed && ds[1].Allowed {
			batches.Add(1)
		}
		return nil
	})
	ctx := context.Background()
	ps, err := store.Take(ctx, sluice.Request{Key: "b", Limit: small, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := store.Take(ctx, sluice.Request{Key: "b", Limit: large, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if used := small.Rate - ps.Remaining; used != batches.Load() {
		t.Errorf("small limit used %d, batches admitted %d", used, batches.Load())
	}
	if used := large.Rate - pl.Remaining; used != batches.Load()+singles.Load() {
		t.Errorf("large limit used %d, admitted %d batches + %d singles", used, batches.Load(), singles.Load())
	}
	if batches.Load()+singles.Load() != large.Rate {
		t.Errorf("admitted %d in all, want the large limit's %d", batches.Load()+singles.Load(), large.Rate)
	}
}

func reset(t *testing.T, store sluice.Store, alg sluice.Algorithm) {
	ctx := context.Background()
	limit := sluice.Limit{Algorithm: alg, Rate: 3, Period: time.Hour}
	now := Epoch.Add(time.Minute)
	req := sluice.Request{Key: "r", Limit: limit, Cost: 3, Now: now}
	for i, want := range []bool{true, false} {
		if d, err := store.Take(ctx, req); err != nil || d.Allowed != want {
			t.Fatalf("take %d: allowed %v, err %v; want %v", i, d.Allowed, err, want)
		}
	}
	if err := store.Reset(ctx, "r", limit); err != nil {
		t.Fatal(err)
	}
	if d, err := store.Take(ctx, req); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after Reset: %+v, %v; want allowed with 0 remaining", d, err)
	}
}

// keysCopied checks that a store keeps copies of the keys it holds, never
// the caller's bytes: it exhausts a key whose bytes the caller then
// overwrites with another key's, and the first key must still be exhausted
// and the second untouched. Short and long keys, as stores may keep the
// two apart.
func keysCopied(t *testing.T, store sluice.Store, alg sluice.Algorithm) {
	ctx := context.Background()
	limit := sluice.Limit{Algorithm: alg, Rate: 2, Period: time.Hour}
	now := Epoch.Add(time.Minute)
	for _, n := range []int{14, 300} {
		a, b := strings.Repeat("a", n-1)+"1", strings.Repeat("a", n-1)+"2"
		buf := []byte(a)
		key := unsafe.String(&buf[0], len(buf)) // what a caller with a reused buffer hands over
		if d, err := store.Take(ctx, sluice.Request{Key: key, Limit: limit, Cost: 2, Now: now}); err != nil || !d.Allowed {
			t.Fatalf("%d-byte key: first take: %+v, %v", n, d, err)
		}
		copy(buf, b) // the caller reuses its buffer
		if d, err := store.Take(ctx, sluice.Request{Key: a, Limit: limit, Cost: 1, Now: now}); err != nil || d.Allowed {
			t.Fatalf("%d-byte key: the exhausted key, after its caller's bytes changed: %+v, %v; want denied", n, d, err)
		}
		if d, err := store.Take(ctx, sluice.Request{Key: b, Limit: limit, Cost: 1, Now: now}); err != nil || !d.Allowed || d.Remaining != 1 {
			t.Fatalf("%d-byte key: a fresh key that the caller's bytes now spell: %+v, %v; want allowed, 1 remaining", n, d, err)
		}
	}
}

// storeClock checks that a zero Now means the store's clock: the decision's
// durations are those of a fresh key at a real time.
func storeClock(t *testing.T, store sluice.Store, alg sluice.Algorithm) {
	limit := sluice.Limit{Algorithm: alg, Rate: 2, Period: time.Hour}
	d, err := store.Take(context.Background(), sluice.Request{Key: "clock", Limit: limit, Cost: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || d.Remaining != 0 || d.ResetAfter <= 0 || d.ResetAfter > 2*time.Hour {
		t.Fatalf("got %+v; want allowed, 0 remaining, reset within two hours", d)
	}
	d, err = store.Take(context.Background(), sluice.Request{Key: "clock", Limit: limit, Cost: 1})
	if err != nil || d.Allowed {
		t.Fatalf("second take: %+v, %v; want denied", d, err)
	}
}

// hammer runs f n times in each of g goroutines and fails on the first error.
func hammer(t *testing.T, g, n int, f func() error) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range g {
		wg.Go(func() {
			for range n {
				if err := f(); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil && !errors.Is(first, context.Canceled) {
		t.Fatal(first)
	}
}

// nextMidnight checks that a calendar day on the store's clock resets at
// the next midnight in its zone, within a second, in zones either side
// of UTC and one that is not a whole number of hours off it.
func nextMidnight(t *testing.T, store sluice.Store) {
	for _, name := range []string{"UTC", "America/New_York", "Pacific/Auckland", "Asia/Kathmandu"} {
		zone, err := sluice.LoadZone(name)
		if err != nil {
			t.Fatal(err)
		}
		limit := sluice.Limit{Algorithm: sluice.Calendar, Rate: 1000, Period: sluice.CalendarDay, Zone: zone}
		d, err := store.Take(context.Background(), sluice.Request{Key: "midnight", Limit: limit, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().In(zone)
		y, m, day := now.Date()
		want := time.Date(y, m, day+1, 0, 0, 0, 0, zone).Sub(now)
		if !d.Allowed || d.Remaining != 999 || (d.ResetAfter-want).Abs() > time.Second {
			t.Errorf("%s: got %+v; want allowed, 999 remaining, reset in %v (the next midnight) within 1s", name, d, want)
		}
	}
}
