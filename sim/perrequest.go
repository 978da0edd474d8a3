package sim

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// PerRequest is Cloudflare's measure of an approximate counter ("How we
// built rate limiting capable of scaling to millions of domains", 2017):
// one stream of requests, every one counted; each decided by the limit
// under test and by the exact count of the source's requests in the last
// Period, this one included; the two compared request by request. Unlike
// Result.Disagree, which compares two independent runs whose states drift
// apart after their first difference, both decisions here see the same
// history.
type PerRequest struct {
	Limit    sluice.Limit
	Requests int64
	// WronglyAllowed and WronglyLimited count the requests the limit
	// allowed that the exact count would have limited, and the reverse.
	WronglyAllowed, WronglyLimited int64
	// MeanRateError is the mean over requests of |estimated − real| / real,
	// the estimate being the counter's (prev × weight + curr, or the fixed
	// window's count) and the real rate the exact count.
	MeanRateError float64
	// Sources, and those the exact count would have limited that the limit
	// never did (false negatives), and those the limit limited that the
	// exact count never would have (false positives).
	Sources, FalseNegative, FalsePositive int
}

// Disagree is the share of requests decided otherwise than the exact count.
func (p PerRequest) Disagree() float64 {
	return float64(p.WronglyAllowed+p.WronglyLimited) / float64(max(p.Requests, 1))
}

// source is one source's exact window and counter estimate.
type source struct {
	times         []int64 // µs of each request in the last Period, with costs
	costs         []int64
	sum           int64
	start         int64 // the counter's current window
	prev, curr    int64
	exactLimited  bool
	approxLimited bool
}

// MeasurePerRequest runs traffic through limit (a fixed window or a
// sliding window counter, counting every request or only admissions, as
// limit says) on the memory store, and through the exact count, and
// returns Cloudflare's measure.
func MeasurePerRequest(limit sluice.Limit, traffic Traffic) (PerRequest, error) {
	alg := limit.Algorithm.Resolved()
	if alg != sluice.FixedWindow && alg != sluice.SlidingWindow {
		return PerRequest{}, fmt.Errorf("sim: the per-request measure is for the window counters, not %v", alg)
	}
	if err := limit.Validate(); err != nil {
		return PerRequest{}, err
	}
	store := memstore.New(memstore.Options{})
	ctx := context.Background()
	period := limit.Period.Microseconds()
	out := PerRequest{Limit: limit}
	sources := map[string]*source{}
	var errSum float64
	for a := range traffic {
		t := a.T.Microseconds()
		s := sources[a.Key]
		if s == nil {
			s = &source{start: t - t%period}
			sources[a.Key] = s
		}
		// The exact count, this request included.
		for len(s.times) > 0 && s.times[0] <= t-period {
			s.sum -= s.costs[0]
			s.times, s.costs = s.times[1:], s.costs[1:]
		}
		s.times, s.costs = append(s.times, t), append(s.costs, a.Cost)
		s.sum += a.Cost
		exactAllowed := s.sum <= limit.Rate
		// The counter's estimate, every request counted (the real rate
		// counts them all).
		if w := t - t%period; w != s.start {
			if w == s.start+period {
				s.prev = s.curr
			} else {
				s.prev = 0
			}
			s.start, s.curr = w, 0
		}
		s.curr += a.Cost
		est := float64(s.curr)
		if alg == sluice.SlidingWindow {
			est += float64(s.prev) * float64(period-(t-s.start)) / float64(period)
		}
		errSum += math.Abs(est-float64(s.sum)) / float64(s.sum)
		d, err := store.Take(ctx, sluice.Request{Key: a.Key, Limit: limit, Cost: a.Cost, Now: epoch.Add(time.Duration(t) * time.Microsecond)})
		if err != nil {
			return out, fmt.Errorf("sim: at %v: %w", a.T, err)
		}
		out.Requests++
		switch {
		case d.Allowed && !exactAllowed:
			out.WronglyAllowed++
		case !d.Allowed && exactAllowed:
			out.WronglyLimited++
		}
		s.exactLimited = s.exactLimited || !exactAllowed
		s.approxLimited = s.approxLimited || !d.Allowed
	}
	out.Sources = len(sources)
	for _, s := range sources {
		switch {
		case s.exactLimited && !s.approxLimited:
			out.FalseNegative++
		case s.approxLimited && !s.exactLimited:
			out.FalsePositive++
		}
	}
	out.MeanRateError = errSum / float64(max(out.Requests, 1))
	return out, nil
}

// FormatPerRequest writes the per-request measures as a table.
func FormatPerRequest(w io.Writer, ps []PerRequest) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "limit\trequests\twrongly allowed\twrongly limited\tdisagree\tmean rate error\tsources\tfalse negative\tfalse positive")
	for _, p := range ps {
		fmt.Fprintf(tw, "%v\t%d\t%d\t%d\t%.4f%%\t%.2f%%\t%d\t%d\t%d\n", p.Limit, p.Requests, p.WronglyAllowed, p.WronglyLimited,
			100*p.Disagree(), 100*p.MeanRateError, p.Sources, p.FalseNegative, p.FalsePositive)
	}
	tw.Flush()
}

// Benign is traffic shaped like Cloudflare's: sources sources, each
// sending Poisson arrivals at a steady rate drawn between 1% and 10% of
// limit's rate, except a share over (0.001 is 0.1%) that burst at twice
// to four times the limit's rate for ten periods at a random time, for d.
// The same seed gives the same stream.
func Benign(limit sluice.Limit, sources int, over float64, d time.Duration, seed uint64) Traffic {
	keys := clientKeys(max(sources, 1))
	perSec := float64(limit.Rate) / limit.Period.Seconds()
	return func(yield func(Arrival) bool) {
		r := rand.New(rand.NewPCG(seed, 7))
		bursting := int(math.Round(over * float64(len(keys))))
		// The bursts: every arrival of every bursting source, sorted.
		var bursts []Arrival
		burst := 10 * limit.Period
		for i := range bursting {
			rate := perSec * (2 + 2*r.Float64())
			start := time.Duration(r.Float64() * float64(max(d-burst, 0)))
			for t := start; ; {
				t += time.Duration(r.ExpFloat64() / rate * float64(time.Second))
				if t >= start+burst || t >= d {
					break
				}
				bursts = append(bursts, Arrival{T: t, Key: keys[i], Cost: 1})
			}
		}
		slices.SortFunc(bursts, func(a, b Arrival) int { return int(a.T - b.T) })
		// The steady sources, as one Poisson stream of their summed rate,
		// each arrival drawn to a source in proportion to its rate.
		cum := make([]float64, 0, len(keys)-bursting)
		total := 0.0
		for range len(keys) - bursting {
			total += perSec * (0.01 + 0.09*r.Float64())
			cum = append(cum, total)
		}
		next := 0
		for t := time.Duration(0); len(cum) > 0; {
			t += time.Duration(r.ExpFloat64() / total * float64(time.Second))
			if t >= d {
				break
			}
			for next < len(bursts) && bursts[next].T <= t {
				if !yield(bursts[next]) {
					return
				}
				next++
			}
			i, _ := slices.BinarySearch(cum, r.Float64()*total)
			if !yield(Arrival{T: t, Key: keys[bursting+min(i, len(cum)-1)], Cost: 1}) {
				return
			}
		}
		for ; next < len(bursts); next++ {
			if !yield(bursts[next]) {
				return
			}
		}
	}
}
