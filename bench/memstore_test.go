package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"go.uber.org/ratelimit"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// The limits are high enough that every call is allowed: the benchmarks
// measure the cost of a decision, not of a denial. sluice's limit keeps
// every key live (not back to full) for the whole run, so each Take updates
// an existing key: one take keeps a key live for 3.6s, and a burst of 1e8
// is never exhausted.
const benchRate = 1 << 30

var benchLimit = sluice.Limit{Rate: 1000, Period: time.Hour, Burst: 100_000_000}

// keys returns n distinct 16-byte key names.
func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("key-%011d", i)
	}
	return out
}

// keySets returns the key sets the benchmarks run over, built on first
// use: not at init, where they would weigh 32 MB on the heap of every
// process this binary starts, the servers whose CPU and memory
// BenchmarkRLSServerCPU and BenchmarkRSSPerKey measure among them.
var keySets = sync.OnceValue(func() []keySet {
	return []keySet{{"1key", keys(1)}, {"10kKeys", keys(10_000)}, {"1MKeys", keys(1_000_000)}}
})

type keySet struct {
	name string
	keys []string
}

// parallel runs f over keys from every goroutine, each goroutine starting at
// a different offset.
func parallel(b *testing.B, ks []string, f func(key string)) {
	b.ReportAllocs()
	var seq atomic.Uint64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1) * 7919)
		for pb.Next() {
			f(ks[i%len(ks)])
			i++
		}
	})
}

func BenchmarkMemstore(b *testing.B) {
	for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket} {
		for _, ks := range keySets() {
			b.Run(fmt.Sprintf("sluice-%v/%s", alg, ks.name), func(b *testing.B) {
				s := memstore.New(memstore.Options{})
				limit := benchLimit
				limit.Algorithm = alg
				ctx := context.Background()
				for _, k := range ks.keys { // existing keys: the steady state
					s.Take(ctx, sluice.Request{Key: k, Limit: limit, Cost: 1})
				}
				parallel(b, ks.keys, func(key string) {
					if d, err := s.Take(ctx, sluice.Request{Key: key, Limit: limit, Cost: 1}); err != nil || !d.Allowed {
						b.Fatal(d, err)
					}
				})
			})
		}
	}
	b.Run("x-time-rate/1key", func(b *testing.B) {
		lim := rate.NewLimiter(rate.Limit(benchRate), benchRate)
		parallel(b, keySets()[0].keys, func(string) {
			if !lim.Allow() {
				b.Fatal("denied")
			}
		})
	})
	for _, ks := range keySets()[1:] {
		b.Run("x-time-rate-map/"+ks.name, func(b *testing.B) {
			var mu sync.Mutex
			m := make(map[string]*rate.Limiter)
			get := func(key string) *rate.Limiter {
				mu.Lock()
				defer mu.Unlock()
				l, ok := m[key]
				if !ok {
					l = rate.NewLimiter(rate.Limit(benchRate), benchRate)
					m[key] = l
				}
				return l
			}
			for _, k := range ks.keys {
				get(k)
			}
			parallel(b, ks.keys, func(key string) {
				if !get(key).Allow() {
					b.Fatal("denied")
				}
			})
		})
	}
	for _, ks := range keySets() {
		b.Run("go-limiter/"+ks.name, func(b *testing.B) {
			store, err := memorystore.New(&memorystore.Config{Tokens: 1_000_000_000, Interval: time.Hour, SweepInterval: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close(context.Background())
			ctx := context.Background()
			for _, k := range ks.keys {
				store.Take(ctx, k)
			}
			parallel(b, ks.keys, func(key string) {
				if _, _, _, ok, err := store.Take(ctx, key); err != nil || !ok {
					b.Fatal("denied", err)
				}
			})
		})
	}
	// The clock every decision reads (the monotonic clock, as memstore
	// and go-limiter read it), alone in the same harness: the part of each
	// figure no limiter that reads a clock per decision avoids.
	b.Run("clock-only/1key", func(b *testing.B) {
		base := time.Now()
		var sink atomic.Int64
		parallel(b, keySets()[0].keys, func(string) {
			if time.Since(base) < 0 {
				sink.Add(1)
			}
		})
	})
	// The wall and monotonic clocks together (time.Now), which go-limiter
	// reads per decision (its fasttime is time.now).
	b.Run("clock-now-only/1key", func(b *testing.B) {
		var sink atomic.Int64
		parallel(b, keySets()[0].keys, func(string) {
			if time.Now().UnixNano() < 0 {
				sink.Add(1)
			}
		})
	})
	// The least any exact limiter does for a hot key: read the clock and
	// compare-and-swap one word that every caller shares, with nothing
	// else (no key, no limit, no report). On one key it bounds every
	// figure above from below: the word's cache line moves between the
	// cores at every decision.
	b.Run("cas-clock-only/1key", func(b *testing.B) {
		base := time.Now()
		var word struct {
			_ [64]byte
			v atomic.Int64
			_ [56]byte
		}
		parallel(b, keySets()[0].keys, func(string) {
			now := int64(time.Since(base))
			for {
				old := word.v.Load()
				if word.v.CompareAndSwap(old, max(old, now)+1) {
					return
				}
			}
		})
	})
	// The same without the clock: the cost of the line's trips alone.
	b.Run("cas-only/1key", func(b *testing.B) {
		var word struct {
			_ [64]byte
			v atomic.Int64
			_ [56]byte
		}
		parallel(b, keySets()[0].keys, func(string) {
			for {
				old := word.v.Load()
				if word.v.CompareAndSwap(old, old+1) {
					return
				}
			}
		})
	})
	b.Run("uber-ratelimit/1key", func(b *testing.B) {
		rl := ratelimit.New(benchRate, ratelimit.WithoutSlack)
		parallel(b, keySets()[0].keys, func(string) { rl.Take() })
	})
}

// BenchmarkHeapPerKey reports the heap held per live key with 1M keys of 16
// bytes, for the O(1) algorithms, measured with runtime.MemStats.
func BenchmarkHeapPerKey(b *testing.B) {
	for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.FixedWindow} {
		b.Run(alg.String(), func(b *testing.B) {
			ks := keySets()[2].keys
			ctx := context.Background()
			limit := sluice.Limit{Algorithm: alg, Rate: 100, Period: time.Hour}
			var perKey float64
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				s := memstore.New(memstore.Options{})
				for _, k := range ks {
					s.Take(ctx, sluice.Request{Key: k, Limit: limit, Cost: 1})
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				if s.Len() != len(ks) {
					b.Fatalf("%d keys held, want %d", s.Len(), len(ks))
				}
				perKey = float64(after.HeapAlloc-before.HeapAlloc) / float64(len(ks))
				runtime.KeepAlive(s)
			}
			b.ReportMetric(perKey, "bytes/key")
		})
	}
}
