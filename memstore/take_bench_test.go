package memstore_test

import (
	"context"
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
