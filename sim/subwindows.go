package sim

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice"
)

// Accuracy is how closely one way of counting follows the exact sliding log
// on some traffic, and the state it keeps for that.
type Accuracy struct {
	// Name is "sliding_log", "sliding_window", or "N sub-windows".
	Name string
	// SubWindows is N for the counters; 0 for the log.
	SubWindows int
	// Disagree is the fraction of requests decided differently from the
	// exact sliding log.
	Disagree float64
	// MeanBytes is the state per key holding any, averaged over keys and
	// over time (sampled every 100 Periods and at the end); MaxBytes the
	// most one key held.
	MeanBytes float64
	MaxBytes  int64
}

// SubWindows measures what the sliding window counter would gain from
// more, smaller windows: for each n it runs a counter of n sub-windows of
// Period/n (n = 1 is sluice's sliding window counter, decision for
// decision) against the exact sliding log on traffic, and reports the
// disagreement and state of each, the log's first. The counters of n > 1
// are a model for this measurement, not an algorithm sluice ships: see
// docs/algorithms.md for why. Each n must divide the Period in µs.
func SubWindows(limit sluice.Limit, traffic Traffic, ns []int) ([]Accuracy, error) {
	if err := limit.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	period := int64(limit.Period / time.Microsecond)
	out := []Accuracy{{Name: sluice.SlidingLog.String()}}
	for _, n := range ns {
		if n < 1 || period%int64(n) != 0 {
			return nil, fmt.Errorf("sim: %d sub-windows do not divide the period of %v into whole microseconds", n, limit.Period)
		}
		name := sluice.SlidingWindow.String()
		if n > 1 {
			name = fmt.Sprintf("%d sub-windows", n)
		}
		// The window start and N+1 counts, 8 bytes each: the sliding
		// window counter's three words when N is 1.
		b := 8 * int64(n+2)
		out = append(out, Accuracy{Name: name, SubWindows: n, MeanBytes: float64(b), MaxBytes: b})
	}
	keys := map[string]*subKey{}
	disagree := make([]int64, len(ns))
	var requests, samples, last int64
	var meanSum float64
	nextSample := int64(0)
	for a := range traffic {
		now := int64(a.T / time.Microsecond)
		if a.Cost > limit.Capacity() {
			return nil, fmt.Errorf("sim: cost %d at %v: %w", a.Cost, a.T, sluice.ErrCostExceedsBurst)
		}
		for now >= nextSample {
			if m, ok := meanLogBytes(keys, nextSample, period); ok {
				meanSum += m
				samples++
			}
			nextSample += 100 * period
		}
		k := keys[a.Key]
		if k == nil {
			k = &subKey{counters: make([]subCounter, len(ns))}
			for i, n := range ns {
				k.counters[i] = newSubCounter(n)
			}
			keys[a.Key] = k
		}
		exact := k.log.take(now, a.Cost, limit.Rate, period)
		last = now
		out[0].MaxBytes = max(out[0].MaxBytes, 16*int64(len(k.log.t)))
		for i := range ns {
			if k.counters[i].take(now, a.Cost, limit.Rate, period) != exact {
				disagree[i]++
			}
		}
		requests++
	}
	if requests == 0 {
		return nil, errors.New("sim: no traffic")
	}
	if m, ok := meanLogBytes(keys, last, period); ok {
		meanSum += m
		samples++
	}
	if samples > 0 {
		out[0].MeanBytes = meanSum / float64(samples)
	}
	for i := range ns {
		out[i+1].Disagree = float64(disagree[i]) / float64(requests)
	}
	return out, nil
}

// subKey is one key under SubWindows: its exact log and its counters.
type subKey struct {
	log      logModel
	counters []subCounter
}

// meanLogBytes returns the mean state of the keys whose log holds an
// entry in the window ending at now.
func meanLogBytes(keys map[string]*subKey, now, period int64) (float64, bool) {
	var entries, held int64
	for _, k := range keys {
		l := &k.log
		l.prune(now, period)
		if len(l.t) > 0 {
			entries += int64(len(l.t))
			held++
		}
	}
	if held == 0 {
		return 0, false
	}
	return 16 * float64(entries) / float64(held), true
}

// logModel is the exact sliding log of one key: its admissions in the
// last Period, entries at one instant merged, as the stores keep it.
type logModel struct {
	t, cost []int64
	sum     int64
}

func (l *logModel) prune(now, period int64) {
	drop := 0
	for drop < len(l.t) && l.t[drop] <= now-period {
		l.sum -= l.cost[drop]
		drop++
	}
	l.t, l.cost = l.t[drop:], l.cost[drop:]
}

func (l *logModel) take(now, cost, rate, period int64) bool {
	l.prune(now, period)
	if l.sum+cost > rate {
		return false
	}
	if n := len(l.t); n > 0 && l.t[n-1] == now {
		l.cost[n-1] += cost
	} else {
		l.t, l.cost = append(l.t, now), append(l.cost, cost)
	}
	l.sum += cost
	return true
}

// subCounter counts one key in n epoch-aligned sub-windows of Period/n and
// admits when the last n, plus the part of the one before still inside the
// sliding window (weighted as if its requests were spread evenly), leave
// room:
//
//	Σ counts of sub-windows k−n+1..k + count(k−n) × (w − e)/w + cost ≤ Rate
//
// with w = Period/n and e the time elapsed in sub-window k, in integers.
// For n = 1 this is algorithm.SlidingWindow's rule exactly.
type subCounter struct {
	k      int64   // the newest sub-window's index (its start / w)
	counts []int64 // n+1 counts, sub-window j at j mod (n+1)
	sum    int64   // the counts of sub-windows k−n+1..k
}

func newSubCounter(n int) subCounter { return subCounter{k: -1 << 62, counts: make([]int64, n+1)} }

func (c *subCounter) take(now, cost, rate, period int64) bool {
	n := int64(len(c.counts) - 1)
	w := period / n
	// Time going back stays in the newest sub-window, as the algorithm does.
	if k := now / w; k > c.k+n {
		clear(c.counts)
		c.k, c.sum = k, 0
	} else {
		for ; c.k < k; c.k++ {
			// Sub-window k−n+1 becomes the partly covered one; the slot of
			// k+1 held k−n, which has left the window.
			c.sum -= c.counts[c.slot(c.k-n+1)]
			c.counts[c.slot(c.k+1)] = 0
		}
	}
	e := max(now-c.k*w, 0)
	old := c.counts[c.slot(c.k-n)]
	room := rate - c.sum - cost
	if room < 0 || old*(w-e) > room*w {
		return false
	}
	c.counts[c.slot(c.k)] += cost
	c.sum += cost
	return true
}

// slot returns where sub-window j's count is kept (j may be negative).
func (c *subCounter) slot(j int64) int64 {
	m := int64(len(c.counts))
	return (j%m + m) % m
}

// FormatAccuracy writes results of SubWindows as a table.
func FormatAccuracy(w io.Writer, results []Accuracy) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "counting\tdisagree with log\tstate/key (mean)\tstate/key (max)\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%.4f%%\t%.0f B\t%d B\t\n", r.Name, 100*r.Disagree, r.MeanBytes, r.MaxBytes)
	}
	tw.Flush()
}
