package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// limiter is one library as the side-by-side benchmarks run it: new
// returns a fresh one's decision of one event of a key under limit.
type limiter struct {
	name string
	new  func(b *testing.B, limit sluice.Limit) func(key string) (allowed bool, err error)
}

// limiters are sluice's memory store, go-limiter's memorystore and
// x/time/rate (a Limiter per key, in a map under a mutex). go-limiter and
// x/time/rate take the limit's rate, and its capacity as their burst.
var limiters = []limiter{
	{"sluice", func(_ *testing.B, limit sluice.Limit) func(string) (bool, error) {
		s := memstore.New(memstore.Options{})
		ctx := context.Background()
		return func(key string) (bool, error) {
			d, err := s.Take(ctx, sluice.Request{Key: key, Limit: limit, Cost: 1})
			return d.Allowed, err
		}
	}},
	{"go-limiter", func(b *testing.B, limit sluice.Limit) func(string) (bool, error) {
		// go-limiter's Tokens per Interval: the same rate, its burst
		// being its tokens.
		tokens := uint64(limit.Capacity())
		interval := time.Duration(float64(limit.Period) * float64(limit.Capacity()) / float64(limit.Rate))
		store, err := memorystore.New(&memorystore.Config{Tokens: tokens, Interval: interval, SweepInterval: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.Cleanup(func() { store.Close(ctx) })
		return func(key string) (bool, error) {
			_, _, _, ok, err := store.Take(ctx, key)
			return ok, err
		}
	}},
	{"x-time-rate-map", func(_ *testing.B, limit sluice.Limit) func(string) (bool, error) {
		every := rate.Limit(float64(limit.Rate) / limit.Period.Seconds())
		var mu sync.Mutex
		m := make(map[string]*rate.Limiter)
		return func(key string) (bool, error) {
			mu.Lock()
			l, ok := m[key]
			if !ok {
				l = rate.NewLimiter(every, int(limit.Capacity()))
				m[key] = l
			}
			mu.Unlock()
			return l.Allow(), nil
		}
	}},
}
