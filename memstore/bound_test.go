package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func take(t testing.TB, s *memstore.Store, key string, l sluice.Limit, cost int64, now time.Time) sluice.Decision {
	t.Helper()
	d, err := s.Take(context.Background(), sluice.Request{Key: key, Limit: l, Cost: cost, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A key flood beyond MaxKeys evicts keys already back to full first, and
// counts only evictions of live keys.
func TestMaxKeysEvictsFullKeysFirst(t *testing.T) {
	s := memstore.New(memstore.Options{Shards: 1, MaxKeys: 100})
	l := sluice.Limit{Rate: 1, Period: time.Second}
	for i := range 100 {
		take(t, s, fmt.Sprint("old", i), l, 1, t0)
	}
	// A second later all 100 are back to full: a flood replaces them
	// without a counted eviction.
	for i := range 100 {
		take(t, s, fmt.Sprint("new", i), l, 1, t0.Add(time.Second))
	}
	if n := s.Len(); n > 100 {
		t.Fatalf("Len = %d, over MaxKeys", n)
	}
	if e := s.Evictions(); e != 0 {
		t.Fatalf("%d live evictions while expired keys were available", e)
	}
	// Now all 100 are live: more keys must evict live ones, and count them.
	for i := range 50 {
		take(t, s, fmt.Sprint("flood", i), l, 1, t0.Add(time.Second))
	}
	if n := s.Len(); n > 100 {
		t.Fatalf("Len = %d, over MaxKeys", n)
	}
	if e := s.Evictions(); e != 50 {
		t.Fatalf("Evictions = %d, want 50", e)
	}
}

// Expired keys are swept as new keys arrive, without a goroutine.
func TestExpiredKeysAreSwept(t *testing.T) {
	s := memstore.New(memstore.Options{Shards: 1})
	l := sluice.Limit{Rate: 10, Period: time.Second}
	for i := range 1000 {
		take(t, s, fmt.Sprint("a", i), l, 1, t0)
	}
	for i := range 1000 {
		take(t, s, fmt.Sprint("b", i), l, 1, t0.Add(time.Hour))
	}
	if n := s.Len(); n > 1200 {
		t.Fatalf("Len = %d after 1000 keys expired and 1000 arrived; sweeping is not keeping up", n)
	}
}

// Under steady churn below half the bound (new keys at 1,000 a second,
// each back to full at once and kept 10 s for its return), the store holds
// about as many keys as arrived within a few graces, and no more: sweeping
// looks less often while it finds only keys within their grace, never so
// little that it falls behind.
func TestChurnBelowHalfTheBoundStaysProportional(t *testing.T) {
	s := memstore.New(memstore.Options{Shards: 1, MaxKeys: 1_000_000})
	l := sluice.Limit{Rate: 1000, Period: time.Second, Burst: 1}
	const perSecond, seconds = 1000, 120
	most := 0
	for i := range perSecond * seconds {
		take(t, s, fmt.Sprint("k", i), l, 1, t0.Add(time.Duration(i)*time.Second/perSecond))
		if i > perSecond*60 {
			most = max(most, s.Len())
		}
	}
	// 10 s of arrivals are within their grace: 10,000 keys; with no
	// sweeping the store would hold every one of the 120,000.
	t.Logf("keys held in the second minute: at most %d", most)
	if most > 3*10*perSecond {
		t.Fatalf("%d keys held under a churn of %d/s with a 10 s grace; sweeping fell behind", most, perSecond)
	}
}

// A peek never creates a key.
func TestPeekCreatesNothing(t *testing.T) {
	s := memstore.New(memstore.Options{})
	take(t, s, "p", sluice.PerSecond(5), 0, t0)
	if n := s.Len(); n != 0 {
		t.Fatalf("Len = %d after a peek", n)
	}
}

func TestTakeAllocatesNothingOnAnExistingKey(t *testing.T) {
	s := memstore.New(memstore.Options{})
	ctx := context.Background()
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.TokenBucket, sluice.LeakyBucket, sluice.GCRA} {
		req := sluice.Request{Key: "k", Limit: sluice.Limit{Algorithm: alg, Rate: 1000, Period: time.Second}, Cost: 1}
		s.Take(ctx, req)
		if n := testing.AllocsPerRun(100, func() { s.Take(ctx, req) }); n != 0 {
			t.Errorf("%v: %v allocations per Take", alg, n)
		}
		var d sluice.Decision
		if n := testing.AllocsPerRun(100, func() { s.TakeInto(ctx, &req, &d) }); n != 0 {
			t.Errorf("%v: %v allocations per TakeInto", alg, n)
		}
	}
	reqs := []sluice.Request{
		{Key: "k", Limit: sluice.PerSecond(1e6), Cost: 1},
		{Key: "k", Limit: sluice.PerMinute(1e7), Cost: 1},
	}
	dst := make([]sluice.Decision, 2)
	s.TakeAll(ctx, reqs, dst)
	if n := testing.AllocsPerRun(100, func() { s.TakeAll(ctx, reqs, dst) }); n != 0 {
		t.Errorf("TakeAll: %v allocations", n)
	}
}

// The sliding log's memory is bounded by its rate: entries at one instant
// merge, and entries that left the window are dropped.
func TestSlidingLogMemoryIsBounded(t *testing.T) {
	s := memstore.New(memstore.Options{Shards: 1})
	l := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1000, Period: time.Second}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 100_000 {
		take(t, s, "log", l, 1, t0.Add(time.Duration(i)*time.Millisecond))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<10 {
		t.Fatalf("heap grew %d bytes for one sliding-log key of rate 1000", grew)
	}
}

// Two rates sharing a table (same algorithm and period): a token bucket
// key is never swept before it is full at its own, slower rate.
func TestSweepRespectsEachKeysRate(t *testing.T) {
	s := memstore.New(memstore.Options{Shards: 1})
	slow := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 1, Period: time.Second, Burst: 10}
	fast := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 1000, Period: time.Second, Burst: 10}
	take(t, s, "slow", slow, 10, t0) // full again after 10s
	// A second later, many keys under the fast rate arrive and sweep.
	for i := range 2000 {
		take(t, s, fmt.Sprint("fast", i), fast, 1, t0.Add(time.Second))
	}
	if d := take(t, s, "slow", slow, 0, t0.Add(time.Second)); d.Remaining != 1 {
		t.Fatalf("the slow key after 1s: %d remaining; want 1 (it was swept as if full)", d.Remaining)
	}
}

// A hot key stays exact while other goroutines churn its shard: new keys
// arriving, expired ones swept, the index growing and rebuilt, keys
// evicted under MaxKeys and reset. Run with -race, it also checks that the
// lock-free lookup of existing keys is sound.
func TestHotKeyExactUnderChurn(t *testing.T) {
	redistest.HourAhead()
	// 500/1h has a whole emission interval (the GCRA swaps one word); 499
	// per hour with a burst of 500 does not (its entries are locked).
	for _, rate := range []int64{500, 499} {
		for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.TokenBucket, sluice.LeakyBucket, sluice.GCRA} {
			hot := sluice.Limit{Algorithm: alg, Rate: rate, Period: time.Hour}
			if alg != sluice.FixedWindow && alg != sluice.SlidingWindow {
				hot.Burst = 500
			}
			hotKeyUnderChurn(t, alg, hot)
		}
	}
}

func hotKeyUnderChurn(t *testing.T, alg sluice.Algorithm, hot sluice.Limit) {
	t.Run(fmt.Sprintf("%v/%d", alg, hot.Rate), func(t *testing.T) {
		s := memstore.New(memstore.Options{Shards: 1, MaxKeys: 200})
		capacity := hot.Capacity()
		brief := sluice.Limit{Algorithm: alg, Rate: 1000, Period: time.Millisecond}
		if hot.Burst != 0 {
			// The churners' clocks run up to 2000 s apart, and a bucket
			// from a clock ahead looks used up at one behind; with this
			// burst it has capacity left at every clock, as keys of a
			// store with one clock have, and eviction takes them, the
			// soonest to expire, before the hot key.
			brief.Burst = 1 << 40
		}
		ctx := context.Background()
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for range 3 * capacity / 8 {
					d, err := s.Take(ctx, sluice.Request{Key: "hot", Limit: hot, Cost: 1, Now: t0})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
			// Churn: each goroutine's keys expire a second after they
			// arrive, long before the hot key (an hour).
			wg.Go(func() {
				for i := range 2000 {
					now := t0.Add(time.Duration(i) * time.Second)
					key := fmt.Sprint("churn-", g, "-", i)
					if _, err := s.Take(ctx, sluice.Request{Key: key, Limit: brief, Cost: 1, Now: now}); err != nil {
						t.Error(err)
						return
					}
					if i%7 == 0 {
						if err := s.Reset(ctx, key, brief); err != nil {
							t.Error(err)
							return
						}
					}
				}
			})
		}
		wg.Wait()
		if got := admitted.Load(); got != capacity {
			t.Fatalf("admitted %d of a capacity of %d", got, capacity)
		}
		if n := s.Len(); n > 200 {
			t.Fatalf("Len = %d, over MaxKeys", n)
		}
		if d := take(t, s, "hot", hot, 0, t0); d.Remaining != 0 {
			t.Fatalf("hot key lost its state: %+v", d)
		}
	})
}

// Keys are copied, inline up to 16 bytes and apart beyond: a caller may
// reuse its buffer, and keys that share 16 bytes, or differ only in length,
// stay apart.
func TestKeysAreCopiedAndKeptApart(t *testing.T) {
	s := memstore.New(memstore.Options{Shards: 1})
	l := sluice.Limit{Rate: 3, Period: time.Hour}
	buf := []byte("0123456789abcdefXYZ")
	var keys []string
	for _, n := range []int{1, 15, 16, 17, 19} {
		keys = append(keys, string(buf[:n]))
	}
	keys = append(keys, strings.Repeat("k", 4096))
	for _, k := range keys {
		// A key built over the caller's buffer, which is then overwritten.
		b := []byte(k)
		key := unsafe.String(&b[0], len(b))
		if d := take(t, s, key, l, 1, t0); d.Remaining != 2 {
			t.Fatalf("first take of a %d-byte key: %+v", len(k), d)
		}
		for i := range b {
			b[i] = '#'
		}
	}
	for _, k := range keys {
		if d := take(t, s, k, l, 1, t0); d.Remaining != 1 {
			t.Fatalf("second take of a %d-byte key: %+v; its first was lost or merged", len(k), d)
		}
	}
	if n := s.Len(); n != len(keys) {
		t.Fatalf("Len = %d, want %d", n, len(keys))
	}
}

// A hot key under limits whose emission interval is not a whole number of
// microseconds (their state packed into one word, decided by
// compare-and-swap) admits exactly its burst from 16 goroutines at one
// instant, and exactly its rate's share as time goes on.
func TestHotKeyExactOddInterval(t *testing.T) {
	for _, tc := range []struct {
		l     sluice.Limit
		later time.Duration
	}{
		{sluice.Limit{Algorithm: sluice.GCRA, Rate: 7, Period: time.Second, Burst: 500}, 3 * time.Second},
		{sluice.Limit{Algorithm: sluice.LeakyBucket, Rate: 999, Period: 7 * time.Second, Burst: 300}, 3 * time.Second},
		// Emission intervals of 1/3 µs and 1/1000 µs: the remainder
		// packs in units of 10^6 (one word, swapped), where 999,999,937
		// over an hour's has none and takes two words, swapped together
		// (cas128) or under the lock.
		{sluice.Limit{Algorithm: sluice.GCRA, Rate: 3_000_000, Period: time.Second, Burst: 500}, 7 * time.Microsecond},
		{sluice.Limit{Algorithm: sluice.GCRA, Rate: 1_000_000_000, Period: time.Second, Burst: 1000}, time.Microsecond},
		{sluice.Limit{Algorithm: sluice.GCRA, Rate: 999_999_937, Period: time.Hour, Burst: 1000}, time.Millisecond},
	} {
		l := tc.l
		s := memstore.New(memstore.Options{})
		// hammer has 16 goroutines take 100 each at now, and returns how
		// many were admitted.
		hammer := func(now time.Time) int64 {
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for range 100 {
						if d := take(t, s, "hot", l, 1, now); d.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			return admitted.Load()
		}
		if got := hammer(t0); got != l.Burst {
			t.Fatalf("%v: admitted %d at one instant, want the burst %d", l, got, l.Burst)
		}
		// Later, exactly later × Rate / Period more fit (whole µs
		// count: Now is kept in µs), at most the burst: 21 and 300 of
		// 428.1 after 3s, 21 after 7µs, 1000 after 1µs, 277 after 1ms.
		later := tc.later.Truncate(time.Microsecond)
		want := min(int64(later)*l.Rate/int64(l.Period), l.Burst)
		if got := hammer(t0.Add(later)); got != want {
			t.Fatalf("%v: admitted %d after %v, want %d", l, got, later, want)
		}
	}
}

// A hot key whose state is two words, swapped together without the lock
// where the processor can (cas128), stays exact while batches lock it and
// peeks read it: at one instant the Takes and the batches that include it
// admit its burst between them, and no peek reports more than is left.
func TestTwoWordsSwapBesideTheLock(t *testing.T) {
	l := sluice.Limit{Algorithm: sluice.GCRA, Rate: 999_999_937, Period: time.Hour, Burst: 1000}
	s := memstore.New(memstore.Options{})
	ctx := context.Background()
	hammer := func(now time.Time) int64 {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				for range 300 {
					d, err := s.Take(ctx, sluice.Request{Key: "hot", Limit: l, Cost: 1, Now: now})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		for range 2 { // each batch also takes from a key of its own, never short
			wg.Go(func() {
				reqs := []sluice.Request{{Key: "hot", Limit: l, Cost: 1, Now: now}, {Key: "cold", Limit: l, Cost: 1, Now: now}}
				ds := make([]sluice.Decision, 2)
				for range 300 {
					if err := s.TakeAll(ctx, reqs, ds); err != nil {
						t.Error(err)
						return
					}
					if ds[0].Allowed && ds[1].Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Go(func() {
			for range 300 {
				d, err := s.Take(ctx, sluice.Request{Key: "hot", Limit: l, Now: now})
				if err != nil || d.Remaining < 0 || d.Remaining > l.Burst {
					t.Errorf("a peek: %+v, %v", d, err)
					return
				}
			}
		})
		wg.Wait()
		return admitted.Load()
	}
	take(t, s, "cold", l, 0, t0)
	if got := hammer(t0); got != l.Burst {
		t.Fatalf("admitted %d at one instant, want the burst %d", got, l.Burst)
	}
	// A millisecond later, 277 of 277.77 more fit.
	if got, want := hammer(t0.Add(time.Millisecond)), int64(time.Millisecond)*l.Rate/int64(l.Period); got != want {
		t.Fatalf("admitted %d a millisecond later, want %d", got, want)
	}
}

// A peek on a two-word state read while admissions swap it reports a
// state the key was in: with only admissions at one instant, what it
// reports left never grows. A pair read torn between two swaps (one
// swap's TAT, the next one's remainder) would report up to a µs of
// admissions, a thousand of these, given back.
func TestTwoWordsPeekSeesOneState(t *testing.T) {
	l := sluice.Limit{Algorithm: sluice.GCRA, Rate: 999_999_937, Period: time.Second, Burst: 10_000_000}
	s := memstore.New(memstore.Options{})
	ctx := context.Background()
	take(t, s, "hot", l, 1, t0)
	var done atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 300_000 {
				if d, err := s.Take(ctx, sluice.Request{Key: "hot", Limit: l, Cost: 1, Now: t0}); err != nil || !d.Allowed {
					t.Errorf("an admission: %+v, %v", d, err)
					return
				}
			}
		})
	}
	peeks, last := 0, l.Burst
	go func() { wg.Wait(); done.Store(true) }()
	for !done.Load() {
		d, err := s.Take(ctx, sluice.Request{Key: "hot", Limit: l, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		if d.Remaining > last {
			t.Fatalf("peek %d: %d left, after %d: a state the key was never in", peeks, d.Remaining, last)
		}
		peeks, last = peeks+1, d.Remaining
	}
	if d := take(t, s, "hot", l, 0, t0); d.Remaining != l.Burst-600_001 {
		t.Fatalf("after 600,001 admissions a peek reports %d left, want %d", d.Remaining, l.Burst-600_001)
	}
}

// One key's limit changes among rates of one period whose remainders count
// in different units (10^6, 1, 2 × 10^5, none) and back, as a reload or an
// override changes it mid-flight: every decision is the reference's
// (package algorithm on one state), through the state's conversions
// between rates, between one word and two, and back.
func TestLimitChangesAcrossUnits(t *testing.T) {
	limits := []sluice.Limit{
		{Algorithm: sluice.GCRA, Rate: 1_000_000_000, Period: time.Second, Burst: 40},
		{Algorithm: sluice.GCRA, Rate: 999_999_937, Period: time.Second, Burst: 40},
		{Algorithm: sluice.GCRA, Rate: 3_000_000, Period: time.Second, Burst: 20},
		{Algorithm: sluice.GCRA, Rate: 1_000_005, Period: time.Second, Burst: 30},
		{Algorithm: sluice.GCRA, Rate: 7, Period: time.Second, Burst: 5},
		{Algorithm: sluice.GCRA, Rate: 1_000_000, Period: time.Second, Burst: 50},
	}
	for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.LeakyBucket} {
		rng := rand.New(rand.NewPCG(7, uint64(alg)))
		s := memstore.New(memstore.Options{})
		var st algorithm.State
		now := t0
		allowed := 0
		for i := range 20_000 {
			if rng.IntN(3) == 0 {
				now = now.Add(time.Duration(rng.IntN(40)) * time.Microsecond)
			}
			l := limits[rng.IntN(len(limits))]
			if rng.IntN(4) > 0 { // runs of one limit, where a key mostly stays
				l = limits[i/500%len(limits)]
			}
			l.Algorithm = alg
			cost := int64(rng.IntN(4))
			p := algorithm.ParamsOf(l)
			next, res := algorithm.Take(alg, st, &p, now.UnixMicro(), cost)
			if res.Allowed && cost > 0 {
				st = next
				allowed++
			}
			if got, want := take(t, s, "k", l, cost, now), res.Decision(l); got != want {
				t.Fatalf("%v step %d at %v, cost %d under %v:\n got %+v\nwant %+v", alg, i, now.Sub(t0), cost, l, got, want)
			}
		}
		if allowed < 5000 || allowed > 15000 {
			t.Fatalf("%v: %d of 20,000 allowed: the run did not mix admissions and denials", alg, allowed)
		}
	}
}

// A flood of unique keys under one limit, six times MaxKeys, never frees
// a client denied under another: eviction takes the flood's keys, which
// have capacity left, even when they expire later than the denied ones.
func TestEvictionSparesDenyingKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a store to its bound")
	}
	redistest.WindowAhead(10*time.Minute, time.Minute) // its fixed window on the wall clock
	login := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: 15 * time.Minute}
	burst := sluice.Limit{Algorithm: sluice.GCRA, Rate: 3, Period: time.Minute}
	window := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: 10 * time.Minute}
	for _, flood := range []sluice.Limit{
		{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Hour}, // the flood's keys outlive the denied ones
		{Algorithm: sluice.GCRA, Rate: 100, Period: time.Minute},
	} {
		t.Run(flood.String(), func(t *testing.T) {
			s := memstore.New(memstore.Options{MaxKeys: 50_000})
			denied := map[string]sluice.Limit{"login:victim": login, "api:victim": burst, "upload:victim": window}
			for k, l := range denied {
				take(t, s, k, l, l.Capacity(), t0)
				if d := take(t, s, k, l, 1, t0); d.Allowed {
					t.Fatalf("%s: allowed past its limit", k)
				}
			}
			for i := range 300_000 {
				take(t, s, fmt.Sprint("flood:", i), flood, 1, t0.Add(time.Duration(i)*time.Microsecond))
			}
			at := t0.Add(time.Second)
			for k, l := range denied {
				if d := take(t, s, k, l, 1, at); d.Allowed {
					t.Errorf("%s: allowed after the flood: its state was evicted", k)
				}
			}
			if n := s.Len(); n > 50_000 {
				t.Errorf("Len = %d, over MaxKeys", n)
			}
			if s.Evictions() == 0 || s.DenyingEvictions() != 0 {
				t.Errorf("evictions %d, of denying keys %d; want some, and none", s.Evictions(), s.DenyingEvictions())
			}
		})
	}
}

// When every key denies, eviction still makes room, and counts it.
func TestEvictionOfDenyingKeysIsCounted(t *testing.T) {
	s := memstore.New(memstore.Options{Shards: 1, MaxKeys: 100})
	l := sluice.Limit{Rate: 1, Period: time.Hour}
	for i := range 150 {
		take(t, s, fmt.Sprint("k", i), l, 1, t0)
	}
	if n, e := s.Len(), s.DenyingEvictions(); n != 100 || e != 50 {
		t.Fatalf("Len %d, denying evictions %d; want 100 and 50", n, e)
	}
}

// MaxBytes bounds long keys: 4,000-byte keys, far more than fit, leave
// the store's count and the heap measured within it.
func TestMaxBytesBoundsLongKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a store to its bound")
	}
	redistest.HourAhead()
	const maxBytes = 32 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := memstore.New(memstore.Options{MaxBytes: maxBytes})
	l := sluice.Limit{Rate: 100, Period: time.Hour}
	pad := strings.Repeat("x", 4000-8)
	for i := range 50_000 {
		take(t, s, fmt.Sprintf("%s%08d", pad, i), l, 1, t0)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if b := s.Bytes(); b > maxBytes {
		t.Errorf("Bytes = %d, over MaxBytes %d", b, maxBytes)
	}
	if heap := int64(after.HeapAlloc) - int64(before.HeapAlloc); heap > maxBytes*5/4 {
		t.Errorf("the store holds %d bytes of heap; MaxBytes is %d", heap, maxBytes)
	}
	t.Logf("%d keys of 4,000 bytes held in %d bytes counted, %d of heap", s.Len(), s.Bytes(), int64(after.HeapAlloc)-int64(before.HeapAlloc))
	if n := s.Len(); n < maxBytes/5000 || n > maxBytes/4096 {
		t.Errorf("Len = %d keys of 4,000 bytes in %d bytes", n, maxBytes)
	}
	runtime.KeepAlive(s)
	// Sliding logs are counted with their entries.
	s = memstore.New(memstore.Options{MaxBytes: 4 << 20})
	log := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1000, Period: time.Hour}
	for i := range 2000 {
		for j := range 20 {
			take(t, s, fmt.Sprint("log", i), log, 1, t0.Add(time.Duration(j)*time.Millisecond))
		}
	}
	if b := s.Bytes(); b > 4<<20 {
		t.Errorf("sliding logs: Bytes = %d, over MaxBytes", b)
	}
}

// Limits compare by their meaning: a calendar limit's zone loaded twice
// (two pointers) is one limit and one state.
func TestZonesLoadedTwiceAreOneState(t *testing.T) {
	a, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no zone database")
	}
	b, _ := time.LoadLocation("America/New_York")
	la := sluice.Limit{Algorithm: sluice.Calendar, Rate: 2, Period: sluice.CalendarDay, Zone: a}
	lb := la
	lb.Zone = b
	if a == b || !la.Equal(lb) || !la.SameState(lb) {
		t.Fatalf("the same zone twice: equal %v, same state %v", la.Equal(lb), la.SameState(lb))
	}
	if other := (sluice.Limit{Algorithm: sluice.Calendar, Rate: 2, Period: sluice.CalendarDay, Zone: time.UTC}); la.Equal(other) || la.SameState(other) {
		t.Fatal("New York and UTC compare equal")
	}
	s := memstore.New(memstore.Options{})
	take(t, s, "k", la, 2, t0)
	if d := take(t, s, "k", lb, 1, t0); d.Allowed {
		t.Fatalf("the same limit with its zone loaded again started afresh: %+v", d)
	}
}
