package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/pgstore"
)

func BenchmarkTake(b *testing.B) {
	_, pool := database(b)
	for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.FixedWindow, sluice.SlidingLog} {
		b.Run(alg.String(), func(b *testing.B) {
			s := newStore(b, pool, pgstore.Options{})
			l := sluice.Limit{Algorithm: alg, Rate: 1000000, Period: time.Hour}
			ctx := context.Background()
			for b.Loop() {
				if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
