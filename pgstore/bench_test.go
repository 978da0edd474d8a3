package pgstore_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/pgstore"
)

// BenchmarkTake is one caller's check, a round trip each.
func BenchmarkTake(b *testing.B) {
	_, pool := database(b)
	for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.FixedWindow, sluice.Calendar} {
		b.Run(alg.String(), func(b *testing.B) {
			s := newStore(b, pool, pgstore.Options{})
			l := sluice.Limit{Algorithm: alg, Rate: 1 << 40, Period: time.Hour}
			if alg == sluice.Calendar {
				l.Period = sluice.CalendarMonth
			}
			ctx := context.Background()
			for b.Loop() {
				if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHotKey is 64 callers checking one key: coalesced (the
// default, 4 calls of the take function at once, the rest batched) and
// not (64 at once, each waiting for the row lock).
func BenchmarkHotKey(b *testing.B) {
	_, pool := database(b)
	for _, c := range []struct {
		name     string
		inFlight int
	}{{"coalesced", 0}, {"alone", 64}} {
		b.Run(c.name, func(b *testing.B) {
			s := newStore(b, pool, pgstore.Options{MaxInFlight: c.inFlight})
			l := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1 << 40, Period: time.Hour}
			ctx := context.Background()
			b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Take(ctx, sluice.Request{Key: "hot", Limit: l, Cost: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
