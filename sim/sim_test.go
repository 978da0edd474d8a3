package sim_test

import (
	"bytes"
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
