package algorithm_test

import (
	"math/big"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
)

// settle records a settlement on the machine: the difference of actual
// and estimate taken by force at now when it is more, given back as
// taken at taken when it is less.
func (m *machine) settle(now, taken, estimate, actual int64) {
	switch d := actual - estimate; {
	case d > 0:
		if m.alg == sluice.SlidingLog {
			drop, _, at := algorithm.TakeLog(m.log, &m.p, now, 0)
			m.log = append(m.log[drop:], algorithm.LogEntry{T: at, Cost: d})
			return
		}
		m.s = algorithm.Apply(m.alg, m.s, &m.p, now, d)
	case d < 0:
		if m.alg == sluice.SlidingLog {
			m.log = algorithm.RefundLog(m.log, &m.p, now, taken, -d)
			return
		}
		m.s = algorithm.Refund(m.alg, m.s, &m.p, now, taken, -d)
	}
}

// reference is each algorithm written the plain way, with exact
// fractions, refunds included: the model reservations are checked
// against.
type reference struct {
	alg                 sluice.Algorithm
	rate, period, burst int64
	// Buckets: tokens at last, as a fraction.
	tokens *big.Rat
	last   int64
	// Windows: count per window start, and the newest window a take saw.
	counts map[int64]int64
	newest int64
	// Sliding log: the admitted entries.
	log []algorithm.LogEntry
}

func newReference(alg sluice.Algorithm, rate, period, burst int64) *reference {
	return &reference{alg: alg, rate: rate, period: period, burst: burst, tokens: big.NewRat(burst, 1), counts: map[int64]int64{}, newest: -1 << 62}
}

func (r *reference) window(t int64) int64 { return t - t%r.period }

// refill brings the bucket to now (never back in time), up to burst.
func (r *reference) refill(now int64) {
	if now <= r.last {
		return
	}
	r.tokens.Add(r.tokens, big.NewRat(r.rate*(now-r.last), r.period))
	if r.tokens.Cmp(big.NewRat(r.burst, 1)) > 0 {
		r.tokens.SetInt64(r.burst)
	}
	r.last = now
}

// inWindow is the cost the sliding window counts at now.
func (r *reference) weighed(now int64) *big.Rat {
	w := max(r.window(now), r.newest)
	e := max(now-w, 0)
	x := new(big.Rat).SetInt64(r.counts[w])
	return x.Add(x, big.NewRat(r.counts[w-r.period]*(r.period-e), r.period))
}

// take decides cost at now; forced records it whether or not it fits.
func (r *reference) take(now, cost int64, forced bool) bool {
	c := big.NewRat(cost, 1)
	switch r.alg {
	case sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket:
		r.refill(now)
		ok := r.tokens.Cmp(c) >= 0
		if ok || forced {
			r.tokens.Sub(r.tokens, c)
		}
		return ok
	case sluice.SlidingLog:
		at := now
		if n := len(r.log); n > 0 {
			at = max(at, r.log[n-1].T)
		}
		var sum int64
		for _, e := range r.log {
			if e.T > at-r.period {
				sum += e.Cost
			}
		}
		ok := sum+cost <= r.rate
		if ok || forced {
			r.log = append(r.log, algorithm.LogEntry{T: at, Cost: cost})
		}
		return ok
	}
	r.newest = max(r.newest, r.window(now))
	w := r.newest
	var ok bool
	if r.alg == sluice.FixedWindow {
		ok = r.counts[w]+cost <= r.rate
	} else {
		ok = r.weighed(now).Add(r.weighed(now), c).Cmp(big.NewRat(r.rate, 1)) <= 0
	}
	if ok || forced {
		r.counts[w] += cost
	}
	return ok
}

// refund gives back at now cost taken at taken.
func (r *reference) refund(now, taken, cost int64) {
	switch r.alg {
	case sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket:
		// What refilled since the take gave that much of it back already.
		back := new(big.Rat).Sub(big.NewRat(cost, 1), big.NewRat(r.rate*max(now-taken, 0), r.period))
		if back.Sign() <= 0 {
			return
		}
		r.tokens.Add(r.tokens, back)
		if r.tokens.Cmp(big.NewRat(r.burst, 1)) > 0 {
			r.tokens.SetInt64(r.burst)
		}
	case sluice.SlidingLog:
		if taken <= now-r.period {
			return // the request's entry has left the window
		}
		for i := range r.log {
			if e := &r.log[i]; e.T >= taken {
				give := min(cost, e.Cost)
				e.Cost, cost = e.Cost-give, cost-give
			}
		}
	default:
		w := r.window(taken)
		keep := w == r.newest || (r.alg == sluice.SlidingWindow && w == r.newest-r.period)
		if keep {
			r.counts[w] -= min(cost, r.counts[w])
		}
	}
}

// For random sequences of reserve, settle and cancel, every algorithm
// admits exactly what the reference model admits: a settlement for more
// takes the difference by force, one for less and a cancellation give
// back what the state still holds of the reservation.
func TestReservationsMatchTheReference(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				rate, period, burst := genParams(t)
				if alg == sluice.FixedWindow || alg == sluice.SlidingWindow || alg == sluice.SlidingLog {
					burst = 0
				}
				m := newMachine(alg, rate, period, burst)
				capacity := m.p.Burst
				ref := newReference(alg, rate, period, capacity)
				type open struct{ taken, estimate int64 }
				var held []open
				now := rapid.Int64Range(0, 10*period).Draw(t, "start")
				for i := range rapid.IntRange(1, 150).Draw(t, "ops") {
					now += rapid.Int64Range(0, period/3+1).Draw(t, "gap")
					switch op := rapid.IntRange(0, 2).Draw(t, "op"); {
					case op == 0 || len(held) == 0:
						cost := rapid.Int64Range(1, capacity).Draw(t, "estimate")
						got := m.take(now, cost).Allowed
						if want := ref.take(now, cost, false); got != want {
							t.Fatalf("op %d: reserve %d at %d: allowed %v, reference %v", i, cost, now, got, want)
						}
						if got {
							held = append(held, open{now, cost})
						}
					default:
						j := rapid.IntRange(0, len(held)-1).Draw(t, "which")
						h := held[j]
						held = append(held[:j], held[j+1:]...)
						actual := int64(0) // a cancellation
						if op == 1 {
							actual = rapid.Int64Range(0, 2*capacity).Draw(t, "actual")
						}
						m.settle(now, h.taken, h.estimate, actual)
						if d := actual - h.estimate; d > 0 {
							ref.take(now, d, true)
						} else if d < 0 {
							ref.refund(now, h.taken, -d)
						}
					}
				}
			})
		})
	}
}

// A refund never leaves more than the capacity, nor a count below zero.
func TestRefundIsBounded(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				rate, period, burst := genParams(t)
				m := newMachine(alg, rate, period, burst)
				now := rapid.Int64Range(0, 10*period).Draw(t, "start")
				for range rapid.IntRange(0, 20).Draw(t, "takes") {
					now += rapid.Int64Range(0, period/3+1).Draw(t, "gap")
					m.take(now, 1)
				}
				taken := now - rapid.Int64Range(0, 2*period).Draw(t, "age")
				m.settle(now, taken, rapid.Int64Range(1, 1000).Draw(t, "refund"), 0)
				capacity := m.p.Burst
				if r := m.try(now, 0); r.Remaining > capacity || r.Remaining < 0 {
					t.Fatalf("remaining %d after a refund, capacity %d", r.Remaining, capacity)
				}
				if m.s.B < 0 || m.s.C < 0 && alg != sluice.GCRA && alg != sluice.LeakyBucket {
					t.Fatalf("a count below zero: %+v", m.s)
				}
				for _, e := range m.log {
					if e.Cost <= 0 {
						t.Fatalf("a log entry of cost %d", e.Cost)
					}
				}
			})
		})
	}
}

// For random sequences of reserve, settle for less and cancel on a small
// bucket, the settled costs of the takes in any span come to at most
// the burst plus what refills in the span: a refund never gives back
// what the bucket has refilled since its take. Independent of the
// reference model, it fails when a refund gives back even a fraction of
// a token too much.
func TestRefundsNeverBank(t *testing.T) {
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				rate, period, burst := rapid.Int64Range(1, 4).Draw(t, "rate"), int64(1000), rapid.Int64Range(1, 4).Draw(t, "burst")
				m := newMachine(alg, rate, period, burst)
				type take struct{ at, cost int64 } // cost: the estimate while open, then the settled cost
				var takes []*take
				var open []int
				now := int64(0)
				for range rapid.IntRange(1, 40).Draw(t, "ops") {
					now += rapid.Int64Range(0, period).Draw(t, "gap")
					if rapid.Bool().Draw(t, "reserve") || len(open) == 0 {
						cost := rapid.Int64Range(1, burst).Draw(t, "estimate")
						if m.take(now, cost).Allowed {
							open = append(open, len(takes))
							takes = append(takes, &take{now, cost})
						}
						continue
					}
					j := rapid.IntRange(0, len(open)-1).Draw(t, "which")
					h := takes[open[j]]
					open = append(open[:j], open[j+1:]...)
					actual := rapid.Int64Range(0, h.cost).Draw(t, "actual")
					m.settle(now, h.at, h.cost, actual)
					h.cost = actual
				}
				for i := range takes {
					var sum int64
					for _, tk := range takes[i:] {
						sum += tk.cost
						if refill := (tk.at - takes[i].at) * rate / period; sum > burst+refill {
							t.Fatalf("served %d from %d to %d: past burst %d plus the %d refilled", sum, takes[i].at, tk.at, burst, refill)
						}
					}
				}
			})
		})
	}
}
