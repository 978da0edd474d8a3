package bench

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkHotKey prices the decision path above the memory store, one
// goroutine on one key (GCRA, never denied): limiter is Limiter.Allow,
// decide a Guard's Decide of a check of one request (what every front
// door makes), store the store's own Take, the floor under both. Run with
// -cpu 1:
//
//	cd bench && go test -run '^$' -bench HotKey -cpu 1 -count 8 .
func BenchmarkHotKey(b *testing.B) {
	limit := sluice.Limit{Rate: 1000, Period: time.Hour, Burst: 100_000_000}
	store := memstore.New(memstore.Options{})
	ctx := context.Background()
	const key = "key-00000000001"
	b.Run("limiter", func(b *testing.B) {
		l, err := sluice.NewLimiter(store, limit, sluice.LimiterOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if d, err := l.Allow(ctx, key); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
	b.Run("decide", func(b *testing.B) {
		g, err := guard.New(store, guard.Options{})
		if err != nil {
			b.Fatal(err)
		}
		c := guard.Check{Label: "p", Enforced: []sluice.Request{{Key: key, Limit: limit, Cost: 1}}}
		ds := make([]sluice.Decision, 1)
		b.ReportAllocs()
		for b.Loop() {
			if v := g.Decide(ctx, &c, ds, nil); v.Outcome != guard.Allowed {
				b.Fatal(v)
			}
		}
	})
	b.Run("store", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if d, err := store.Take(ctx, sluice.Request{Key: key, Limit: limit, Cost: 1}); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
}
