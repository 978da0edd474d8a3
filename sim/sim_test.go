package sim_test

import (
	"bytes"
	"image/png"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sim"
)

func byAlg(rs []sim.Result) map[sluice.Algorithm]sim.Result {
	m := map[sluice.Algorithm]sim.Result{}
	for _, r := range rs {
		m[r.Algorithm] = r
	}
	return m
}

// The seed's boundary burst, counted by hand: 10 just before an edge and 10
// just after, on a 10/1s limit.
func TestBoundaryAttack(t *testing.T) {
	limit := sluice.Limit{Rate: 10, Period: time.Second}
	rs, err := sim.Run(sim.Config{Limit: limit, Traffic: sim.BoundaryAttack(10, time.Second, 1)})
	if err != nil {
		t.Fatal(err)
	}
	m := byAlg(rs)
	if r := m[sluice.FixedWindow]; r.Admitted != 20 || r.MaxInPeriod != 20 {
		t.Errorf("fixed window: admitted %d, at most %d in a second; want 20 and 20", r.Admitted, r.MaxInPeriod)
	}
	if r := m[sluice.SlidingLog]; r.Admitted != 10 || r.MaxInPeriod != 10 || r.Disagree != 0 {
		t.Errorf("sliding log: %+v; want 10 admitted, at most 10, no disagreement with itself", r)
	}
	for _, a := range []sluice.Algorithm{sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA} {
		if r := m[a]; r.MaxInPeriod > 10 {
			t.Errorf("%v admitted %d within a second", a, r.MaxInPeriod)
		}
	}
	if r := m[sluice.FixedWindow]; r.Disagree != 0.5 {
		t.Errorf("fixed window disagrees with the log on %v of requests; want half (the 10 after the edge)", r.Disagree)
	}
}

// The leaky bucket spreads a burst: 10 at once leave one every 100ms.
func TestLeakyBucketSmooths(t *testing.T) {
	limit := sluice.Limit{Rate: 10, Period: time.Second, Burst: 10}
	rs, _ := sim.Run(sim.Config{Algorithms: []sluice.Algorithm{sluice.LeakyBucket}, Limit: limit,
		Traffic: sim.BoundaryAttack(5, time.Second, 1), Bin: 100 * time.Millisecond})
	r := rs[0]
	if r.Admitted != 10 || r.MaxDelay < 800*time.Millisecond || r.MaxDelay > 900*time.Millisecond {
		t.Fatalf("%+v: want 10 admitted, the last leaving 0.8–0.9s late", r)
	}
	for i, n := range r.Series {
		if n > 2 {
			t.Fatalf("bin %d: %d left in 100ms; shaped output is at most 1 per 100ms (2 at a bin edge)", i, n)
		}
	}
}

func TestDeterministic(t *testing.T) {
	run := func() string {
		rs, err := sim.Run(sim.Config{Limit: sluice.Limit{Rate: 20, Period: time.Second},
			Traffic: sim.Zipf(20_000, 2_000, 1_000, 1.2, 7)})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		sim.Format(&b, sluice.Limit{Rate: 20, Period: time.Second}, rs)
		return b.String()
	}
	a, b := run(), run()
	if a != b {
		t.Fatalf("same seed, different tables:\n%s\n%s", a, b)
	}
	if !strings.Contains(a, "sliding_window") {
		t.Fatalf("table: %s", a)
	}
}

func TestGeneratorsAreOrderedAndBounded(t *testing.T) {
	for name, tr := range map[string]sim.Traffic{
		"steady":  sim.Steady(100, 2*time.Second, 3),
		"poisson": sim.Poisson(100, 2*time.Second, 3, 1),
		"onoff":   sim.OnOff(500, 200*time.Millisecond, 800*time.Millisecond, 2*time.Second, 3, 1),
		"zipf":    sim.Zipf(500, 100, 50, 1.1, 1),
	} {
		var last time.Duration
		n := 0
		for a := range tr {
			if a.T < last || a.Cost != 1 || a.Key == "" {
				t.Fatalf("%s: arrival %d %+v after %v", name, n, a, last)
			}
			last = a.T
			n++
		}
		if n < 100 {
			t.Errorf("%s: only %d arrivals", name, n)
		}
	}
}

func TestTrace(t *testing.T) {
	var err error
	var got []sim.Arrival
	for a := range sim.Trace(strings.NewReader("# t,key,cost\n0,a\n0.5,b,3\n1.5s,a\n"), &err) {
		got = append(got, a)
	}
	if err != nil || len(got) != 3 || got[1].Cost != 3 || got[2].T != 1500*time.Millisecond {
		t.Fatalf("%+v, %v", got, err)
	}
	for _, bad := range []string{"1,a\n0,b\n", "x,a\n", "1\n", "1,a,-2\n"} {
		err = nil
		for range sim.Trace(strings.NewReader(bad), &err) {
		}
		if err == nil || !strings.Contains(err.Error(), "line") {
			t.Errorf("%q: %v; want an error naming the line", bad, err)
		}
	}
}

// The sub-window model with one sub-window is the sliding window counter,
// and its log the exact log: on the same traffic it disagrees with the log
// exactly as often as Run's sliding window does with Run's log.
func TestSubWindowsOneIsTheSlidingWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 100,000 requests three ways")
	}
	limit := sluice.Limit{Rate: 10, Period: time.Second}
	traffic := func() sim.Traffic { return sim.Zipf(100_000, 500, 300, 1.1, 7) }
	rs, err := sim.Run(sim.Config{Algorithms: []sluice.Algorithm{sluice.SlidingWindow}, Limit: limit, Traffic: traffic()})
	if err != nil {
		t.Fatal(err)
	}
	acc, err := sim.SubWindows(limit, traffic(), []int{1, 4, 1000})
	if err != nil {
		t.Fatal(err)
	}
	if acc[1].Disagree != rs[0].Disagree {
		t.Fatalf("one sub-window disagrees with the log on %.6f of requests; the sliding window counter on %.6f", acc[1].Disagree, rs[0].Disagree)
	}
	if rs[0].Disagree == 0 {
		t.Fatal("no disagreement at all: the traffic does not test anything")
	}
	if acc[1].MaxBytes != 24 || acc[2].MaxBytes != 48 {
		t.Fatalf("state: %+v", acc)
	}
	if acc[0].MeanBytes <= 0 || acc[0].MaxBytes != 160 {
		t.Fatalf("the log's state: %+v; want some mean and 10 entries at most", acc[0])
	}
}

// By hand: 10 requests late in a window (at 900ms) and one at 1.5s. The log
// still holds the 10 and denies it. The counter weighs the previous window
// by what the sliding window still covers, 50%, as if the 10 were spread
// evenly: 5 < 10, and it admits. Four sub-windows of 250ms keep the 10 in
// the sub-window [750ms, 1s), wholly inside the window, and deny.
func TestSubWindowsByHand(t *testing.T) {
	limit := sluice.Limit{Rate: 10, Period: time.Second}
	traffic := func(yield func(sim.Arrival) bool) {
		for range 10 {
			if !yield(sim.Arrival{T: 900 * time.Millisecond, Key: "k", Cost: 1}) {
				return
			}
		}
		yield(sim.Arrival{T: 1500 * time.Millisecond, Key: "k", Cost: 1})
	}
	acc, err := sim.SubWindows(limit, traffic, []int{1, 4})
	if err != nil {
		t.Fatal(err)
	}
	if acc[1].Disagree != 1.0/11 || acc[2].Disagree != 0 {
		t.Fatalf("disagreement: one window %v (want 1/11), four %v (want 0)", acc[1].Disagree, acc[2].Disagree)
	}
	if _, err := sim.SubWindows(limit, traffic, []int{3}); err == nil {
		t.Fatal("3 sub-windows of 1s accepted: 333,333.3µs each")
	}
}

// Result.Window peaks at MaxInPeriod, and on the boundary attack shows
// the fixed window's 2× in the bins after the edge.
func TestWindowSeries(t *testing.T) {
	limit := sluice.Limit{Rate: 10, Period: time.Second, Burst: 10}
	for i, traffic := range []func() sim.Traffic{
		func() sim.Traffic { return sim.BoundaryAttack(10, time.Second, 3) },
		func() sim.Traffic { return sim.Zipf(20_000, 2_000, 200, 1.2, 3) },
		func() sim.Traffic {
			return sim.OnOff(60, 500*time.Millisecond, 1500*time.Millisecond, 10*time.Second, 3, 1)
		},
	} {
		rs, err := sim.Run(sim.Config{Limit: limit, Traffic: traffic(), Bin: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if len(r.Window) != len(r.Series) || slices.Max(r.Window) != r.MaxInPeriod {
				t.Errorf("%v: window peaks at %d over %d bins; MaxInPeriod %d over %d", r.Algorithm, slices.Max(r.Window), len(r.Window), r.MaxInPeriod, len(r.Series))
			}
			if i == 0 && r.Algorithm == sluice.FixedWindow && r.Window[10] != 20 {
				t.Errorf("fixed window: %d admitted in the second ending just after the edge; want 20", r.Window[10])
			}
		}
	}
}

// The chart has a panel and a table row per algorithm, in a sans-serif
// face, and its last bin is not an empty partial one.
func TestChart(t *testing.T) {
	limit := sluice.Limit{Rate: 10, Period: time.Second, Burst: 10}
	rs, err := sim.Run(sim.Config{Limit: limit, Traffic: sim.BoundaryAttack(10, time.Second, 3), Bin: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := sim.Chart(&b, "svg", "boundary", limit, 100*time.Millisecond, rs); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	for _, want := range []string{"sans-serif", "2.00×", "max in any period"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
	if strings.Contains(svg, "Serif") {
		t.Error("the chart has a serif face")
	}
	for _, r := range rs {
		if !strings.Contains(svg, ">"+r.Algorithm.String()+"<") {
			t.Errorf("no panel for %v", r.Algorithm)
		}
		if r.Window[len(r.Window)-1] == 0 {
			t.Errorf("%v: the last bin is empty", r.Algorithm)
		}
	}
	if err := sim.Chart(&b, "gif", "", limit, time.Second, rs); err == nil {
		t.Error("a chart as gif: no error")
	}
	b.Reset()
	if err := sim.Chart(&b, "png", "boundary", limit, 100*time.Millisecond, rs); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatalf("the png chart does not decode: %v", err)
	}
	// 9 inches wide at vgimg's 96 dots an inch; taller with more panels.
	if size := img.Bounds().Size(); size.X != 864 || size.Y < 6*100 {
		t.Errorf("the png chart is %v; want 864 wide and over 100 a panel", size)
	}
}

// sluice serve links the simulator for its status page, so nothing the
// chart needs may do work when a program starts: gonum's plot package
// parses twelve fonts in its init, and go-latex (which gonum's text
// drawing links) four more; together 4-6 MB of every process's memory.
func TestChartCostsNothingAtStart(t *testing.T) {
	if testing.Short() {
		t.Skip("lists sluice's dependencies with go list")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/sluicehq/sluice/cmd/sluice").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "gonum.org/v1/plot") || strings.HasPrefix(pkg, "codeberg.org/go-latex/") {
			t.Errorf("sluice links %s: its init parses fonts at every start", pkg)
		}
	}
}
