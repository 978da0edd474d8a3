package memstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

var copiesSink bool

// BenchmarkTakeCopies prices the whole copies of a Request and a Decision
// that Take's values cost a caller: Take against the store's own
// take(&req, &d) on one key, denied and allowed. With -count, the two
// alternate:
//
//	go test -run '^$' -bench TakeCopies -cpu 1 -count 8 ./memstore/
func BenchmarkTakeCopies(b *testing.B) {
	for _, limit := range []sluice.Limit{{Rate: 100, Period: time.Second}, {Rate: 1_000_000_000, Period: time.Second}} {
		s := New(Options{})
		ctx := context.Background()
		for i := 0; i < 200; i++ {
			s.Take(ctx, sluice.Request{Key: "key", Limit: limit, Cost: 1})
		}
		b.Run(limit.String()+"/values", func(b *testing.B) {
			for range b.N {
				d, _ := s.Take(ctx, sluice.Request{Key: "key", Limit: limit, Cost: 1})
				copiesSink = d.Allowed
			}
		})
		b.Run(limit.String()+"/pointers", func(b *testing.B) {
			for range b.N {
				req := sluice.Request{Key: "key", Limit: limit, Cost: 1}
				var d sluice.Decision
				s.take(&req, &d)
				copiesSink = d.Allowed
			}
		})
	}
}
