// Package sim runs sluice's algorithms side by side on the same generated
// traffic, in simulated time, and measures what each admits: the boundary
// burst, exactness against the sliding log, shaping delay and state size.
// It drives the real memory store with explicit times, so millions of
// requests take seconds and every run with the same seed is identical.
package sim

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/memstore"
)

// Config is one simulation.
type Config struct {
	// Algorithms to compare; all of them when empty.
	Algorithms []sluice.Algorithm
	// Limit applies to every key; its Algorithm is ignored.
	Limit sluice.Limit
	// Traffic is the arrivals, in time order.
	Traffic Traffic
	// Bin is the width of the admitted-per-bin series. Default Period/10.
	Bin time.Duration
}

// Result is what one algorithm did with the traffic.
type Result struct {
	Algorithm          sluice.Algorithm
	Requests, Admitted int64
	// MaxInPeriod is the most cost one key had admitted in any interval of
	// length Period (for the leaky bucket, by when requests leave the
	// queue): the limit's Rate when exact.
	MaxInPeriod int64
	// Disagree is the fraction of requests decided differently from the
	// exact sliding log; NaN when the rate is too high for a log.
	Disagree float64
	// MeanDelay and MaxDelay are the shaping delays (leaky bucket).
	MeanDelay, MaxDelay time.Duration
	// StateBytes is the state one key needs: fixed for the O(1)
	// algorithms, 16 bytes per entry (one per instant with admissions) at
	// the log's fullest.
	StateBytes int64
	// Series is the cost admitted (leaving, for the leaky bucket) in each
	// Bin, over all keys.
	Series []int64
	// Window is, for each Bin, the most cost one key had admitted in any
	// interval of length Period ending in that bin: what the charts draw
	// against the limit's Rate. Its maximum is MaxInPeriod.
	Window []int64
}

// All is every algorithm, in the order tables show them, but Calendar:
// its periods are calendar units, so name it in Config.Algorithms with a
// limit of such a period.
var All = []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.TokenBucket, sluice.LeakyBucket, sluice.GCRA}

// epoch is time zero: a day boundary, so windows align with the traffic's
// own seconds.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// runner is one algorithm under simulation.
type runner struct {
	res   Result
	limit sluice.Limit
	store *memstore.Store
	// admits is every key's admissions (leaving times), in order: what
	// Window, MaxInPeriod and the sliding log's state are measured on.
	admits map[string]*admits
	delay  time.Duration // total shaping delay

	lastAllowed bool // the decision of the latest arrival
}

// Run simulates cfg and returns one Result per algorithm.
func Run(cfg Config) ([]Result, error) {
	algs := cfg.Algorithms
	if len(algs) == 0 {
		algs = All
	}
	if cfg.Bin <= 0 {
		cfg.Bin = max(cfg.Limit.Period/10, time.Millisecond)
	}
	var runners []*runner
	var reference *runner
	for _, a := range algs {
		l := cfg.Limit
		l.Algorithm = a
		if !a.HasBurst() {
			l.Burst = 0 // the burst is the buckets'
		}
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("sim: %v: %w", a, err)
		}
		r := newRunner(l)
		runners = append(runners, r)
		if a == sluice.SlidingLog {
			reference = r
		}
	}
	if reference == nil {
		l := cfg.Limit
		l.Algorithm, l.Burst = sluice.SlidingLog, 0
		if l.Validate() == nil {
			reference = newRunner(l) // decides, but is not reported
		}
	}
	all := runners
	if reference != nil && !slices.Contains(runners, reference) {
		all = append(all, reference)
	}
	ctx := context.Background()
	disagree := make([]int64, len(runners))
	for a := range cfg.Traffic {
		a.T = a.T.Truncate(time.Microsecond) // the stores' unit: measure what they saw
		now := epoch.Add(a.T)
		var ref bool
		for _, r := range all {
			d, err := r.store.Take(ctx, sluice.Request{Key: a.Key, Limit: r.limit, Cost: a.Cost, Now: now})
			if err != nil {
				return nil, fmt.Errorf("sim: at %v: %w", a.T, err)
			}
			r.record(a, d, cfg.Bin)
			if r == reference {
				ref = d.Allowed
			}
		}
		if reference != nil {
			for i, r := range runners {
				if r.lastAllowed != ref {
					disagree[i]++
				}
			}
		}
	}
	out := make([]Result, len(runners))
	for i, r := range runners {
		r.res.Disagree = math.NaN()
		if reference != nil && r.res.Requests > 0 {
			r.res.Disagree = float64(disagree[i]) / float64(r.res.Requests)
		}
		if r.res.Admitted > 0 {
			r.res.MeanDelay = r.delay / time.Duration(r.res.Admitted)
		}
		var entries int64
		r.res.Window, r.res.MaxInPeriod, entries = windowSeries(r.admits, len(r.res.Series), r.limit.Period, cfg.Bin)
		if r.limit.Algorithm != sluice.SlidingLog {
			r.res.StateBytes = 8 * int64(algorithm.Words(r.limit.Algorithm))
		} else {
			r.res.StateBytes = 16 * entries
		}
		out[i] = r.res
	}
	return out, nil
}

func newRunner(l sluice.Limit) *runner {
	return &runner{
		res:    Result{Algorithm: l.Algorithm},
		limit:  l,
		store:  memstore.New(memstore.Options{MaxKeys: 1 << 30}),
		admits: map[string]*admits{},
	}
}

// record accounts for one decision.
func (r *runner) record(a Arrival, d sluice.Decision, bin time.Duration) {
	r.res.Requests++
	r.lastAllowed = d.Allowed
	if !d.Allowed || a.Cost == 0 {
		return
	}
	r.res.Admitted += a.Cost
	r.delay += d.Delay
	r.res.MaxDelay = max(r.res.MaxDelay, d.Delay)
	leave := a.T + d.Delay
	i := int(leave / bin)
	for len(r.res.Series) <= i {
		r.res.Series = append(r.res.Series, 0)
	}
	r.res.Series[i] += a.Cost
	ad := r.admits[a.Key]
	if ad == nil {
		ad = &admits{}
		r.admits[a.Key] = ad
	}
	if n := len(ad.t); n > 0 && ad.t[n-1] == leave {
		ad.cost[n-1] += a.Cost // one instant is one entry, as the stores' logs keep it
	} else {
		ad.t, ad.cost = append(ad.t, leave), append(ad.cost, a.Cost)
	}
}

// admits is one key's admissions, oldest first, one entry per instant.
type admits struct {
	t    []time.Duration
	cost []int64
}

// windowSeries returns, for each of n bins, the most cost one key had
// admitted in (t − period, t] for any t in the bin; the most over all bins
// (MaxInPeriod); and the most entries one key had in such an interval
// (the sliding log's state). A key's count only rises at an admission, so
// its most in a bin is at the bin's start or at one of its admissions in
// the bin: a sweep over those per key, with the window's two ends moving
// forward only.
func windowSeries(keys map[string]*admits, n int, period, bin time.Duration) (out []int64, most, entries int64) {
	out = make([]int64, n)
	for _, ad := range keys {
		lo, hi, sum := 0, 0, int64(0)
		at := func(t time.Duration) int64 {
			for hi < len(ad.t) && ad.t[hi] <= t {
				sum += ad.cost[hi]
				hi++
			}
			for lo < hi && ad.t[lo] <= t-period {
				sum -= ad.cost[lo]
				lo++
			}
			return sum
		}
		first := int(ad.t[0] / bin)
		last := min(int((ad.t[len(ad.t)-1]+period)/bin), n-1)
		next := 0 // the next admission to evaluate at
		for b := first; b <= last; b++ {
			start, end := time.Duration(b)*bin, time.Duration(b+1)*bin
			m := at(start)
			for next < len(ad.t) && ad.t[next] < end {
				m = max(m, at(ad.t[next]))
				entries = max(entries, int64(hi-lo))
				next++
			}
			out[b] = max(out[b], m)
			most = max(most, m)
		}
	}
	return out, most, entries
}

// Format writes results as a table.
func Format(w io.Writer, limit sluice.Limit, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "algorithm\trequests\tadmitted\tmax in any period\tvs limit\tdisagree with log\tmean delay\tmax delay\tstate/key\t")
	for _, r := range results {
		dis := "–"
		if !math.IsNaN(r.Disagree) {
			dis = fmt.Sprintf("%.4f%%", 100*r.Disagree)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.2f×\t%s\t%v\t%v\t%d B\t\n", r.Algorithm, r.Requests, r.Admitted, r.MaxInPeriod,
			float64(r.MaxInPeriod)/float64(limit.Rate), dis, r.MeanDelay.Round(time.Microsecond), r.MaxDelay.Round(time.Microsecond), r.StateBytes)
	}
	tw.Flush()
}
