package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkTake is one Take on an existing key from one goroutine: the
// cost of a decision with no contention (bench/ has the parallel figures
// against other limiters).
func BenchmarkTake(b *testing.B) {
	for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket} {
		b.Run(alg.String(), func(b *testing.B) {
			s := memstore.New(memstore.Options{})
			req := sluice.Request{Key: "key-00000000001", Limit: sluice.Limit{Algorithm: alg, Rate: 1000, Period: time.Hour, Burst: 100_000_000}, Cost: 1}
			ctx := context.Background()
			s.Take(ctx, req)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if d, err := s.Take(ctx, req); err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
			}
		})
	}
}

// BenchmarkHotKeyManyWaiters is one key taken by 32 goroutines per CPU,
// under a limit whose state is one word (decided by compare-and-swap) and
// one whose state is two (decided under the lock that is its first word):
// waiters that spin and yield, never sleep, must not collapse when they
// far outnumber the processors.
//
//	go test -run '^$' -bench HotKeyManyWaiters -cpu 1,2 -count 3 ./memstore/
func BenchmarkHotKeyManyWaiters(b *testing.B) {
	for _, tc := range []struct {
		name  string
		limit sluice.Limit
	}{
		{"one-word", sluice.Limit{Rate: 1_000_000, Period: time.Second, Burst: 100_000_000}},
		{"two-words", sluice.Limit{Rate: 999_999_937, Period: time.Hour, Burst: 100_000_000}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := memstore.New(memstore.Options{})
			ctx := context.Background()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Take(ctx, sluice.Request{Key: "hot", Limit: tc.limit, Cost: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkTakeCount compares counting every request with counting
// admissions only, on one key over its limit (every request refused: where
// the two differ) and under it, for both window counters: count all costs
// the forced path's write, nothing more.
//
//	go test -run '^$' -bench TakeCount -count 6 ./memstore/
func BenchmarkTakeCount(b *testing.B) {
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow} {
		for _, over := range []bool{false, true} {
			for _, all := range []bool{false, true} {
				name := fmt.Sprintf("%v/over=%v/count=%s", alg, over, map[bool]string{false: "admitted", true: "all"}[all])
				b.Run(name, func(b *testing.B) {
					s := memstore.New(memstore.Options{})
					rate := int64(1 << 40)
					if over {
						rate = 1
					}
					req := sluice.Request{Key: "key-00000000001", Limit: sluice.Limit{Algorithm: alg, Rate: rate, Period: time.Hour, CountAll: all}, Cost: 1}
					ctx := context.Background()
					s.Take(ctx, req)
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						if d, err := s.Take(ctx, req); err != nil || d.Allowed == over {
							b.Fatal(d, err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkFullStore is a new key on a store below its MaxKeys and on one
// at it, every key held live (a limit of an hour, so none is back to full):
// at the cap each new key evicts one, and the figure is what that costs.
// The existing-key p99 is of checks from a second goroutine, while the
// first inserts, on the thousand keys inserted last (held keys, not the
// ones evicted).
//
//	go test -run '^$' -bench FullStore -count 3 ./memstore/
func BenchmarkFullStore(b *testing.B) {
	const held = 200_000
	limit := sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Hour}
	ctx := context.Background()
	for _, full := range []bool{false, true} {
		name := "new-key/below-cap"
		if full {
			name = "new-key/at-cap"
		}
		b.Run(name, func(b *testing.B) {
			maxKeys := 1 << 30
			if full {
				maxKeys = held
			}
			s := memstore.New(memstore.Options{MaxKeys: maxKeys})
			heldKeys := make([]string, held)
			for i := range heldKeys {
				heldKeys[i] = fmt.Sprintf("held-%09d", i)
				s.Take(ctx, sluice.Request{Key: heldKeys[i], Limit: limit, Cost: 1})
			}
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = fmt.Sprintf("new-%012d", i)
			}
			// Checks on held keys beside the inserts, timed one by one.
			var inserted atomic.Int64
			stop := make(chan struct{})
			lat := make(chan []time.Duration)
			go func() {
				var ds []time.Duration
				for i := 0; ; i++ {
					select {
					case <-stop:
						lat <- ds
						return
					default:
					}
					n := inserted.Load()
					if n < 1000 {
						runtime.Gosched()
						continue
					}
					t := time.Now()
					d, _ := s.Take(ctx, sluice.Request{Key: keys[n-1-int64(i%1000)], Limit: limit, Cost: 0})
					ds = append(ds, time.Since(t))
					if d.Remaining != limit.Rate-1 {
						panic(fmt.Sprintf("a key inserted last is not held: %+v", d))
					}
				}
			}()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.Take(ctx, sluice.Request{Key: keys[i], Limit: limit, Cost: 1}); err != nil {
					b.Fatal(err)
				}
				inserted.Store(int64(i + 1))
			}
			b.StopTimer()
			close(stop)
			ds := <-lat
			if len(ds) > 0 {
				slices.Sort(ds)
				b.ReportMetric(float64(ds[len(ds)*99/100].Nanoseconds()), "held-p99-ns")
			}
			if full && s.Evictions() == 0 {
				b.Fatal("no eviction at the cap")
			}
		})
	}
}
