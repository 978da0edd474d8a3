package server

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice"
)

// TestSeriesCountEveryCheckOnce hammers the series a check counts in from
// many goroutines, each series first used by several at once: every series
// is resolved once, and the vector holds every increment, none lost to a
// series resolved twice or to a map being replaced beside a read.
func TestSeriesCountEveryCheckOnce(t *testing.T) {
	m := newMetrics()
	const workers, each, subjects = 16, 2000, 40
	var resolved [subjects]atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				n := (i + w) % subjects
				sub := subject{name: "p" + strconv.Itoa(n)}
				m.checksOf.get(checkLabels{sub, sluice.Denied}, func() prometheus.Counter {
					resolved[n].Add(1)
					return m.checks.WithLabelValues(sub.name, "", sluice.Denied.String())
				}).Inc()
			}
		})
	}
	wg.Wait()
	total := 0.0
	for n := range subjects {
		if got := resolved[n].Load(); got != 1 {
			t.Errorf("series p%d resolved %d times; want once", n, got)
		}
		var c dto.Metric
		if err := m.checks.WithLabelValues("p"+strconv.Itoa(n), "", "denied").Write(&c); err != nil {
			t.Fatal(err)
		}
		total += c.GetCounter().GetValue()
	}
	if total != workers*each {
		t.Fatalf("the vector counted %v checks; want %d", total, workers*each)
	}
}

// TestSeriesFollowTheLabels: the series found for a check, a descriptor
// and a store call are the vectors' own for their labels, so what the
// cache counts is what /metrics shows, whichever was first resolved.
func TestSeriesFollowTheLabels(t *testing.T) {
	m := newMetrics()
	m.check(subject{name: "edge", domain: true}, sluice.Allowed)
	m.check(subject{name: "edge", domain: true}, sluice.Allowed)
	m.check(subject{name: "edge"}, sluice.Allowed) // a policy of the same name
	m.descriptor("edge.remote_address", "allowed")
	m.storeCall("take", 0, nil)
	m.storeCall("take", 0, errors.New("boom"))
	m.storeCall("take", 0, errors.New("boom"))
	for _, c := range []struct {
		vec    prometheus.Collector
		labels []string
		want   float64
	}{
		{m.checks, []string{"", "edge", "allowed"}, 2},
		{m.checks, []string{"edge", "", "allowed"}, 1},
		{m.descriptors, []string{"edge.remote_address", "allowed"}, 1},
		{m.storeCalls, []string{"take", "ok"}, 1},
		{m.storeCalls, []string{"take", "error"}, 2},
	} {
		var d dto.Metric
		if err := c.vec.(*prometheus.CounterVec).WithLabelValues(c.labels...).Write(&d); err != nil {
			t.Fatal(err)
		}
		if got := d.GetCounter().GetValue(); got != c.want {
			t.Errorf("%v: %v; want %v", c.labels, got, c.want)
		}
	}
}
