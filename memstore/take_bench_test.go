package memstore_test

import (
	"context"
	"fmt"
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
