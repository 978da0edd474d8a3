package algorithm_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
)

// The extremes of a valid Limit must neither overflow nor lose exactness:
// every Result still keeps its promises.
func TestExtremeLimits(t *testing.T) {
	year := int64(365 * 24 * time.Hour / time.Microsecond)
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC).UnixMicro()
	limits := []sluice.Limit{
		{Rate: 1e9, Period: 365 * 24 * time.Hour},
		{Rate: 1e9, Period: time.Millisecond},
		{Rate: 1, Period: 365 * 24 * time.Hour},
		{Rate: sluice.MaxRate, Period: time.Millisecond, Burst: sluice.MaxRate},
		{Rate: 1, Period: sluice.MaxSpan},
		{Rate: 3, Period: 100 * 365 * 24 * time.Hour / 4},
	}
	for _, l := range limits {
		for _, alg := range allAlgorithms {
			l.Algorithm = alg
			if l.Validate() != nil {
				continue // the sliding log's rate cap
			}
			p := algorithm.ParamsOf(l)
			m := &machine{alg: alg, p: p}
			capacity := l.Capacity()
			steps := []struct{ dt, cost int64 }{
				{0, capacity}, {0, 1}, {1, 1}, {p.Period / 2, capacity / 2}, {p.Period - 1, 1},
				{year, capacity}, {3 * year, 1}, {0, 0},
			}
			t0 := now
			for i, s := range steps {
				t0 += s.dt
				cost := min(s.cost, capacity)
				before := m.clone()
				r := m.take(t0, cost)
				if err := checkResult(before, t0, cost, r); err != nil {
					t.Errorf("%v step %d: %v", l, i, err)
				}
			}
		}
	}
}

func TestFirstBurstIsExactlyTheCapacity(t *testing.T) {
	for _, alg := range allAlgorithms {
		l := sluice.Limit{Algorithm: alg, Rate: 1e9, Period: 365 * 24 * time.Hour}
		if alg == sluice.SlidingLog {
			l.Rate = sluice.MaxSlidingLogRate
		}
		m := &machine{alg: alg, p: algorithm.ParamsOf(l)}
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
		if r := m.take(now, l.Rate); !r.Allowed || r.Remaining != 0 {
			t.Errorf("%v: the full capacity at once: %+v", alg, r)
		}
		if r := m.take(now, 1); r.Allowed {
			t.Errorf("%v: one more at the same instant was allowed", alg)
		}
	}
}
