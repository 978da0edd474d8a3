package sluice_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkLimiterAllow is the cost of the Limiter over its store: Allow on
// one existing key against the store's Take of the same request.
func BenchmarkLimiterAllow(b *testing.B) {
	limit := sluice.Limit{Rate: 1000, Period: time.Hour, Burst: 100_000_000, Algorithm: sluice.GCRA}
	store := memstore.New(memstore.Options{})
	l, err := sluice.NewLimiter(store, limit, sluice.LimiterOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const key = "key-00000000001"
	b.Run("limiter", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if d, err := l.Allow(ctx, key); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
	b.Run("store", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if d, err := store.Take(ctx, sluice.Request{Key: key, Limit: limit, Cost: 1}); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
}

// BenchmarkLimiterAllowWithLocal is Allow through a guard.Guard with a
// Local store, over 10,000 keys: each decision is also written into the
// stand-in's record of what the store last said, which a fail_mode local
// outage starts from. The store is a memory store behind a wrapper that
// hides its InProcess, as a remote store would be.
func BenchmarkLimiterAllowWithLocal(b *testing.B) {
	limit := sluice.Limit{Rate: 1_000_000_000, Period: time.Second}
	g, err := guard.New(remote{memstore.New(memstore.Options{})}, guard.Options{Local: memstore.New(memstore.Options{})})
	if err != nil {
		b.Fatal(err)
	}
	l, err := sluice.NewLimiter(g, limit, sluice.LimiterOptions{FailMode: sluice.FailLocal})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if d, err := l.Allow(ctx, keys[i%len(keys)]); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
		i++
	}
}

// remote is a Store that does not say it is in process.
type remote struct{ sluice.Store }
