package storetest

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// refundsNeverBank replays, on one key of a bucket limit, reservations
// settled for no more than their estimate or cancelled, often long after
// the bucket refilled, and holds what the limit served to what it may
// serve: over any span between two takes, the settled costs of the takes
// in it (an open one counts its estimate) come to at most the capacity
// plus what refills in the span. It holds every store to the rule that a
// refund gives back only what the state still holds of its take,
// independently of the reference model: a refund that gave back what had
// refilled already would let a key be served past it.
func refundsNeverBank(t *testing.T, store sluice.Store, alg sluice.Algorithm) {
	ctx := context.Background()
	limit := sluice.Limit{Algorithm: alg, Rate: 10, Period: time.Second, Burst: 10}
	rng := rand.New(rand.NewPCG(uint64(alg), 59))
	type take struct {
		at   int64 // µs
		cost int64 // the estimate while open, then what it was settled to
	}
	var takes []*take
	var open []int
	now := Epoch
	for i := range 1500 {
		now = now.Add(time.Duration(rng.IntN(150)) * time.Millisecond)
		if rng.IntN(2) == 0 || len(open) == 0 {
			req := sluice.Request{Key: "bank", Limit: limit, Cost: 1 + rng.Int64N(limit.Burst), Now: now}
			d, err := store.Take(ctx, req)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if d.Allowed {
				open = append(open, len(takes))
				takes = append(takes, &take{now.UnixMicro(), req.Cost})
			}
			continue
		}
		j := rng.IntN(len(open))
		h := takes[open[j]]
		open = append(open[:j], open[j+1:]...)
		actual := rng.Int64N(h.cost + 1)
		if rng.IntN(2) == 0 {
			actual = 0 // a cancellation
		}
		if actual < h.cost {
			req := sluice.Request{Key: "bank", Limit: limit, Cost: h.cost - actual, Now: now, Refund: time.UnixMicro(h.at)}
			if d, err := store.Take(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("step %d: refund %+v: %+v, %v", i, req, d, err)
			}
		}
		h.cost = actual
	}
	period := limit.Period.Microseconds()
	for i := range takes {
		var sum int64
		for _, tk := range takes[i:] {
			sum += tk.cost
			refill := (tk.at - takes[i].at) * limit.Rate / period
			if sum > limit.Burst+refill {
				t.Fatalf("%v served %d from %v to %v, past its capacity %d plus the %d refilled", limit,
					sum, time.UnixMicro(takes[i].at).Sub(Epoch), time.UnixMicro(tk.at).Sub(Epoch), limit.Burst, refill)
			}
		}
	}
}
