package bench

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// Workloads users have, beyond keys that stay in the store: each limiter
// gets the same keys in the same order, every decision is counted, allowed
// or not.
//
//   - zipf: Zipf(s=1.1) over 1M keys, under a limit that refills a key
//     in 1µs, so a key is full again whenever it is next hit unless it is
//     one of the hottest;
//   - churn: 4M keys in turn, each back to full long before its next turn:
//     every check is on a key the limiter may as well not know;
//   - returning: 10k keys in turn under the same limit: each is full
//     again when hit;
//   - hot-odd-interval: one key under a limit whose emission interval is
//     not a whole number of microseconds (999,999,937 per hour), every
//     check allowed;
//   - hot-7-per-ms: likewise under 7 per millisecond (142.857… µs), a
//     Rate small enough for the state to stay one word.
//
// go-limiter and x/time/rate in a map take the same limit's rate and
// burst (see limiters).
func BenchmarkWorkloads(b *testing.B) {
	refill := sluice.Limit{Rate: 1_000_000, Period: time.Second, Burst: 1}
	odd := sluice.Limit{Rate: 999_999_937, Period: time.Hour, Burst: 100_000_000}
	seven := sluice.Limit{Rate: 7, Period: time.Millisecond, Burst: 100_000_000}
	// Each workload's keys are made when it first runs and dropped after
	// it, so that one workload's millions of keys do not weigh on the
	// garbage collector during another's.
	workloads := []struct {
		name  string
		make  func() []string
		limit sluice.Limit
	}{
		{"zipf", func() []string { return zipfKeys(1_000_000, 1<<22) }, refill},
		{"churn", func() []string { return keys(4_000_000) }, refill},
		{"returning", func() []string { return keys(10_000) }, refill},
		{"hot-odd-interval", func() []string { return keys(1) }, odd},
		{"hot-7-per-ms", func() []string { return keys(1) }, seven},
	}
	for _, wl := range workloads {
		var w struct {
			keys  []string
			limit sluice.Limit
		}
		w.limit = wl.limit
		name := wl.name
		// Made by the first of its benchmarks that runs (-bench may run
		// none); the three run one after another.
		keys := func() []string {
			if w.keys == nil {
				w.keys = wl.make()
			}
			return w.keys
		}
		for _, lib := range limiters {
			b.Run(name+"/"+lib.name, func(b *testing.B) {
				take := lib.new(b, w.limit)
				parallel(b, keys(), func(key string) {
					if _, err := take(key); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
		w.keys = nil
		runtime.GC()
	}
}

// zipfKeys returns n draws of Zipf(s=1.1) over keys of universe, shuffled
// so that the hottest keys are not the first names.
func zipfKeys(universe, n int) []string {
	names := keys(universe)
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	z := newZipf(rng, 1.1, universe)
	out := make([]string, n)
	for i := range out {
		out[i] = names[z()]
	}
	return out
}

// newZipf returns a sampler of ranks 0..n-1 with P(k) ∝ 1/(k+1)^s, by
// inverse transform over the cumulative weights (math/rand/v2's Zipf
// needs s > 1 and v ≥ 1 and draws from an unbounded support; this one is
// bounded to n).
func newZipf(rng *rand.Rand, s float64, n int) func() int {
	cum := make([]float64, n)
	total := 0.0
	for k := range n {
		total += 1 / math.Pow(float64(k+1), s)
		cum[k] = total
	}
	return func() int {
		u := rng.Float64() * total
		lo, hi := 0, n-1
		for lo < hi {
			mid := (lo + hi) / 2
			if cum[mid] < u {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		return lo
	}
}
