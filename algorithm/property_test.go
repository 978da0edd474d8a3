package algorithm_test

import (
	"math"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
)

var allAlgorithms = []sluice.Algorithm{
	sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow,
	sluice.TokenBucket, sluice.LeakyBucket, sluice.GCRA,
}

// arrival is one request of a generated sequence.
type arrival struct{ t, cost int64 }

// genParams draws a limit small enough to hit often: rate 1..20 per
// 1ms..2s, burst 1..30.
func genParams(t *rapid.T) (rate, period, burst int64) {
	return rapid.Int64Range(1, 20).Draw(t, "rate"),
		rapid.Int64Range(1_000, 2_000_000).Draw(t, "period"),
		rapid.Int64Range(1, 30).Draw(t, "burst")
}

// genArrivals draws times moving forward by 0..period/3 (so bursts and gaps
// both happen) and costs 1..maxCost.
func genArrivals(t *rapid.T, period, maxCost int64) []arrival {
	n := rapid.IntRange(1, 200).Draw(t, "n")
	out := make([]arrival, n)
	now := rapid.Int64Range(0, 10*period).Draw(t, "start")
	for i := range out {
		if rapid.Bool().Draw(t, "same instant") {
			now += 0
		} else {
			now += rapid.Int64Range(0, period/3+1).Draw(t, "gap")
		}
		out[i] = arrival{now, rapid.Int64Range(1, maxCost).Draw(t, "cost")}
	}
	return out
}

// run decides every arrival and returns which were admitted, checking
// every Result's promises on the way.
func run(t *rapid.T, m *machine, arrivals []arrival) []bool {
	admitted := make([]bool, len(arrivals))
	for i, a := range arrivals {
		before := m.clone()
		r := m.take(a.t, a.cost)
		if err := checkResult(before, a.t, a.cost, r); err != nil {
			t.Fatalf("%v at %d cost %d: %v", m.alg, a.t, a.cost, err)
		}
		admitted[i] = r.Allowed
	}
	return admitted
}

// (a) The sliding log never admits more than Rate in any interval of
// length Period.
func TestSlidingLogNeverExceedsRate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate, period, _ := genParams(t)
		arr := genArrivals(t, period, rate)
		ok := run(t, newMachine(sluice.SlidingLog, rate, period, 0), arr)
		for i := range arr {
			var sum int64
			for j := i; j >= 0 && arr[j].t > arr[i].t-period; j-- {
				if ok[j] {
					sum += arr[j].cost
				}
			}
			if sum > rate {
				t.Fatalf("admitted %d in (%d, %d], rate %d", sum, arr[i].t-period, arr[i].t, rate)
			}
		}
	})
}

// (b) Token bucket and GCRA never admit more than Burst + Rate×t/Period
// in any interval of length t.
func TestBucketsNeverExceedBurstPlusRate(t *testing.T) {
	for _, alg := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				rate, period, burst := genParams(t)
				arr := genArrivals(t, period, burst)
				ok := run(t, newMachine(alg, rate, period, burst), arr)
				for i := range arr {
					var sum int64
					for j := i; j < len(arr); j++ {
						if ok[j] {
							sum += arr[j].cost
						}
						if sum*period > burst*period+rate*(arr[j].t-arr[i].t) {
							t.Fatalf("admitted %d in [%d, %d]: over burst %d + rate %d/%dµs", sum, arr[i].t, arr[j].t, burst, rate, period)
						}
					}
				}
			})
		})
	}
}

// (c) The leaky bucket as a meter, and GCRA, admit exactly what the token
// bucket with the same parameters admits.
func TestLeakyMeterAndGCRAMatchTokenBucket(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate, period, burst := genParams(t)
		arr := genArrivals(t, period, burst)
		tb := run(t, newMachine(sluice.TokenBucket, rate, period, burst), arr)
		lb := run(t, newMachine(sluice.LeakyBucket, rate, period, burst), arr)
		gc := run(t, newMachine(sluice.GCRA, rate, period, burst), arr)
		for i := range arr {
			if tb[i] != lb[i] || tb[i] != gc[i] {
				t.Fatalf("arrival %d (t=%d cost=%d): token bucket %v, leaky bucket %v, gcra %v", i, arr[i].t, arr[i].cost, tb[i], lb[i], gc[i])
			}
		}
	})
}

// (d) The queue's output (admission time + Delay) never exceeds the rate:
// the cost leaving in [d_i, d_j) is below Rate × (d_j − d_i + 1µs)/Period.
func TestLeakyQueueOutputNeverExceedsRate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate, period, burst := genParams(t)
		arr := genArrivals(t, period, burst)
		m := newMachine(sluice.LeakyBucket, rate, period, burst)
		var dep, cost []int64
		for _, a := range arr {
			if r := m.take(a.t, a.cost); r.Allowed {
				dep = append(dep, a.t+r.Delay)
				cost = append(cost, a.cost)
			}
		}
		for i := range dep {
			var sum int64
			for j := i + 1; j < len(dep); j++ {
				sum += cost[j-1]
				if dep[j] < dep[j-1] {
					t.Fatalf("departures out of order: %d then %d", dep[j-1], dep[j])
				}
				if sum*period >= rate*(dep[j]-dep[i]+1) {
					t.Fatalf("%d left in [%d, %d): over rate %d/%dµs", sum, dep[i], dep[j], rate, period)
				}
			}
		}
	})
}

// (e) The sliding window counter approximates the sliding log: report how
// often they decide differently on the same traffic, and bound it.
func TestSlidingWindowDisagreementWithLog(t *testing.T) {
	var total, differ int
	rapid.Check(t, func(t *rapid.T) {
		rate, period, _ := genParams(t)
		arr := genArrivals(t, period, 1)
		sw := run(t, newMachine(sluice.SlidingWindow, rate, period, 0), arr)
		sl := run(t, newMachine(sluice.SlidingLog, rate, period, 0), arr)
		for i := range arr {
			total++
			if sw[i] != sl[i] {
				differ++
			}
		}
	})
	rate := float64(differ) / float64(total)
	t.Logf("sliding window counter vs sliding log: %d of %d decisions differ (%.2f%%) on adversarially dense random traffic", differ, total, 100*rate)
	if rate > 0.25 {
		t.Errorf("disagreement %.2f%% is implausibly high for the weighted counter", 100*rate)
	}
}

// Time that goes backwards never admits more than the same traffic with the
// clock held at the latest time seen.
func TestTimeBackwardsNeverAdmitsMore(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				rate, period, burst := genParams(t)
				arr := genArrivals(t, period, 1)
				skewed := make([]arrival, len(arr))
				for i, a := range arr {
					skewed[i] = a
					if rapid.IntRange(0, 4).Draw(t, "skew") == 0 {
						skewed[i].t -= rapid.Int64Range(0, 2*period).Draw(t, "back")
					}
				}
				var n, ns int
				latest := int64(math.MinInt64)
				steady := newMachine(alg, rate, period, burst)
				back := newMachine(alg, rate, period, burst)
				for i := range arr {
					// The steady run sees the latest time so far.
					latest = max(latest, skewed[i].t)
					if steady.take(latest, 1).Allowed {
						n++
					}
					if back.take(skewed[i].t, 1).Allowed {
						ns++
					}
				}
				if ns > n {
					t.Fatalf("%v admitted %d with a clock going back, %d without", alg, ns, n)
				}
			})
		})
	}
}

// Every Result keeps its promises (checked inside run) for every algorithm,
// with costs up to the capacity.
func TestResultsKeepTheirPromises(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				rate, period, burst := genParams(t)
				m := newMachine(alg, rate, period, burst)
				capacity := burst
				if alg == sluice.FixedWindow || alg == sluice.SlidingLog || alg == sluice.SlidingWindow {
					capacity = rate
				}
				run(t, m, genArrivals(t, period, capacity))
			})
		})
	}
}

// FullAt agrees with every Result's ResetAfter, so a store can derive a
// state's life from the state instead of storing it.
func TestFullAtMatchesResetAfter(t *testing.T) {
	for _, alg := range allAlgorithms {
		if alg == sluice.SlidingLog {
			continue
		}
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				rate, period, burst := genParams(t)
				m := newMachine(alg, rate, period, burst)
				for _, a := range genArrivals(t, period, 1) {
					if r := m.take(a.t, a.cost); r.Allowed {
						if got, want := algorithm.FullAt(alg, m.s, &m.p), a.t+r.ResetAfter; got != want && !(r.ResetAfter == 0 && got <= a.t) {
							t.Fatalf("%v at %d: FullAt %d, now + ResetAfter %d", alg, a.t, got, want)
						}
					}
				}
			})
		})
	}
}

// A forced cost is recorded: afterwards the state admits exactly what it
// would have after the same cost had fit, and never more.
func TestApplyRecordsDebt(t *testing.T) {
	for _, alg := range allAlgorithms {
		if alg == sluice.SlidingLog {
			continue
		}
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				rate, period, burst := genParams(t)
				m := newMachine(alg, rate, period, burst)
				now := rapid.Int64Range(0, 10*period).Draw(t, "now")
				capacity := m.p.Burst
				if alg == sluice.FixedWindow || alg == sluice.SlidingWindow {
					capacity = rate
				}
				extra := rapid.Int64Range(1, 3*capacity).Draw(t, "forced")
				m.s = algorithm.Apply(alg, m.s, &m.p, now, extra)
				// As much as fits is gone: what remains is capacity − extra, at least 0.
				if r := m.try(now, 0); r.Remaining != max(capacity-extra, 0) {
					t.Fatalf("after forcing %d of %d: remaining %d", extra, capacity, r.Remaining)
				}
				if extra >= capacity && m.try(now, 1).Allowed {
					t.Fatalf("a request was allowed right after forcing %d over a capacity of %d", extra, capacity)
				}
			})
		})
	}
}

// (h) Admit and Admitted, which a store uses to hold its lock (or keep its
// compare-and-swap window) for the admission alone, and Denied, with which
// it reports a denial without deciding it again, say exactly what the
// algorithm says, for every O(1) algorithm, across the whole range of
// limits, on states the algorithm reached and with the clock on either side
// of them.
func TestAdmitThenAdmittedOrDeniedMatchesStatus(t *testing.T) {
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.TokenBucket, sluice.LeakyBucket, sluice.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				rate := rapid.Int64Range(1, sluice.MaxRate).Draw(t, "rate")
				period := rapid.Int64Range(1_000, 100*365*24*3600*1_000_000).Draw(t, "period")
				burst := rapid.Int64Range(1, sluice.MaxRate).Draw(t, "burst")
				p := algorithm.NewParams(rate, period, burst)
				capacity := burst
				if alg == sluice.FixedWindow || alg == sluice.SlidingWindow {
					capacity = rate
				}
				now := rapid.Int64Range(0, 1<<51).Draw(t, "start")
				var s algorithm.State
				for range rapid.IntRange(0, 5).Draw(t, "steps") {
					now = max(now+rapid.Int64Range(-period, period).Draw(t, "step"), 0)
					next, res := algorithm.Status(alg, s, &p, now, rapid.Int64Range(1, capacity).Draw(t, "cost"))
					if res.Allowed {
						s = next
					}
				}
				now = max(now+rapid.Int64Range(-period, 2*period).Draw(t, "at"), 0)
				cost := rapid.Int64Range(1, capacity).Draw(t, "cost")
				next, ok := algorithm.Admit(alg, s, &p, now, cost)
				want, res := algorithm.Status(alg, s, &p, now, cost)
				if ok != res.Allowed {
					t.Fatalf("Admit says %v, the algorithm %+v", ok, res)
				}
				if !ok {
					remaining, retry, reset := algorithm.Denied(alg, s, next, &p, now, cost)
					if got := (algorithm.Result{Remaining: remaining, RetryAfter: retry, ResetAfter: reset}); got != res {
						t.Fatalf("Denied %+v, the algorithm %+v", got, res)
					}
					return
				}
				if next != want {
					t.Fatalf("Admit's state %+v, the algorithm's %+v", next, want)
				}
				remaining, reset, delay := algorithm.Admitted(alg, s, next, &p, now)
				if got := (algorithm.Result{Allowed: true, Remaining: remaining, ResetAfter: reset, Delay: delay}); got != res {
					t.Fatalf("Admitted %+v, the algorithm %+v", got, res)
				}
			})
		})
	}
}
