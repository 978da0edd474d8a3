package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkOneGoroutine prices one decision made by one goroutine, every
// library on the same keys and limits in the same run: sluice's memory
// store (GCRA, its default), x/time/rate's Limiter (one per key in a map
// under a mutex) and sethvargo/go-limiter's memory store (token buckets).
// A limit of 100/1s is used up first, so every call is denied but for
// what it refills during the run; the other two never deny. Run with -cpu 1:
//
//	cd bench && go test -run '^$' -bench OneGoroutine -cpu 1 -count 5 .
func BenchmarkOneGoroutine(b *testing.B) {
	limits := []struct {
		name   string
		rate   int64
		period time.Duration
		allow  bool
	}{
		{"100per1s-denied", 100, time.Second, false},
		{"999999937per1h", 999_999_937, time.Hour, true},
		{"1e9per1s", 1_000_000_000, time.Second, true},
	}
	ctx := context.Background()
	for _, lm := range limits {
		for _, ks := range keySets[:2] {
			b.Run(fmt.Sprintf("sluice/%s/%s", lm.name, ks.name), func(b *testing.B) {
				s := memstore.New(memstore.Options{})
				limit := sluice.Limit{Rate: lm.rate, Period: lm.period}
				take := func(key string) bool {
					d, err := s.Take(ctx, sluice.Request{Key: key, Limit: limit, Cost: 1})
					if err != nil {
						b.Fatal(err)
					}
					return d.Allowed
				}
				oneGoroutine(b, ks.keys, lm.allow, take)
			})
			b.Run(fmt.Sprintf("x-time-rate/%s/%s", lm.name, ks.name), func(b *testing.B) {
				var mu sync.Mutex
				m := make(map[string]*rate.Limiter)
				every := rate.Limit(float64(lm.rate) / lm.period.Seconds())
				take := func(key string) bool {
					mu.Lock()
					l, ok := m[key]
					if !ok {
						l = rate.NewLimiter(every, int(lm.rate))
						m[key] = l
					}
					mu.Unlock()
					return l.Allow()
				}
				oneGoroutine(b, ks.keys, lm.allow, take)
			})
			b.Run(fmt.Sprintf("go-limiter/%s/%s", lm.name, ks.name), func(b *testing.B) {
				store, err := memorystore.New(&memorystore.Config{Tokens: uint64(lm.rate), Interval: lm.period, SweepInterval: time.Hour})
				if err != nil {
					b.Fatal(err)
				}
				defer store.Close(ctx)
				take := func(key string) bool {
					_, _, _, ok, err := store.Take(ctx, key)
					if err != nil {
						b.Fatal(err)
					}
					return ok
				}
				oneGoroutine(b, ks.keys, lm.allow, take)
			})
		}
	}
}

// oneGoroutine makes every key exist (and, for a limit that denies, used
// up), then times take over the keys in turn from this goroutine. It
// reports the share of calls allowed: 0 or 100 but for what the limit
// refills during the run, or a library that decides otherwise.
func oneGoroutine(b *testing.B, ks []string, allow bool, take func(key string) bool) {
	for _, k := range ks {
		for take(k) && !allow {
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	allowed := 0
	for i := range b.N {
		if take(ks[i%len(ks)]) {
			allowed++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(allowed)/float64(b.N)*100, "allowed-%")
}
