package memstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

var copiesSink bool

// BenchmarkTakeCopies prices the whole copies of a Request and a Decision
// that Take's values cost a caller, on one key, denied and allowed: Take;
// TakeInto from a Request literal built per call (the Decision is not
// copied, the literal still is, into the variable whose address is
// passed); TakeInto with one Request and one Decision reused (neither
// copied). With -count, the three alternate:
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
		b.Run(limit.String()+"/literal", func(b *testing.B) {
			var d sluice.Decision
			for range b.N {
				req := sluice.Request{Key: "key", Limit: limit, Cost: 1}
				s.TakeInto(ctx, &req, &d)
				copiesSink = d.Allowed
			}
		})
		b.Run(limit.String()+"/reused", func(b *testing.B) {
			req := sluice.Request{Limit: limit, Cost: 1}
			var d sluice.Decision
			for range b.N {
				req.Key = "key"
				s.TakeInto(ctx, &req, &d)
				copiesSink = d.Allowed
			}
		})
	}
}
