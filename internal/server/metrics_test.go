package server

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/guard"
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
				m.checksOf.get(checkLabels{sub, guard.Denied}, func() prometheus.Counter {
					resolved[n].Add(1)
					return m.checks.WithLabelValues(sub.name, "", guard.Denied.String())
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
	m.check(subject{name: "edge", domain: true}, guard.Allowed)
	m.check(subject{name: "edge", domain: true}, guard.Allowed)
	m.check(subject{name: "edge"}, guard.Allowed) // a policy of the same name
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

// TestSeriesAcrossReload: a reload that renames a policy and a domain,
// with checks under way from 8 goroutines, counts every check once under
// the name that decided it: the series found before the reload stay the
// old names', the new names' are found on their first check, and no
// check is lost or counted twice.
func TestSeriesAcrossReload(t *testing.T) {
	const before = "policies: [{name: old, limit: 1000000/1h, key: client_ip}]\ndomains: [{domain: edge, descriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1000000}}]}]\n"
	r := start(t, before, "")
	rls := r.rlsClient(t)
	// envoy reports whether a check of domain was allowed by its limit: a
	// domain the config does not hold is answered OK without one.
	envoy := func(domain string) bool {
		resp, err := rls.ShouldRateLimit(t.Context(), &rlspb.RateLimitRequest{Domain: domain,
			Descriptors: []*extrl.RateLimitDescriptor{{Entries: []*extrl.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		return err == nil && resp.OverallCode == rlspb.RateLimitResponse_OK && resp.Statuses[0].CurrentLimit != nil
	}
	var native, rpc [2]atomic.Int64 // allowed before and after the reload
	var reloaded atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				after := reloaded.Load()
				era := map[bool]int{false: 0, true: 1}[after]
				if w%2 == 0 {
					policy := map[bool]string{false: "old", true: "new"}[after]
					if res, code, err := r.tryCheck(policy, "k"+strconv.Itoa(i)); err == nil && code == 200 && res.Allowed {
						native[era].Add(1)
					}
				} else if envoy(map[bool]string{false: "edge", true: "edge2"}[after]) {
					rpc[era].Add(1)
				}
			}
		})
	}
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(halt) // before the server stops, when the test fails early
	// Each series is found before the reload, and each goroutine has
	// checked at least once.
	await := func(era int) {
		t.Helper()
		guard := time.Now().Add(30 * time.Second) // a guard against hanging: the event decides
		for native[era].Load() < 40 || rpc[era].Load() < 40 {
			if time.Now().After(guard) {
				t.Fatalf("checks allowed: %d native, %d Envoy; want 40 each", native[era].Load(), rpc[era].Load())
			}
			runtime.Gosched()
		}
	}
	await(0)
	after := strings.NewReplacer("name: old", "name: new", "domain: edge", "domain: edge2").Replace(before)
	if err := os.WriteFile(r.opts.Config, []byte("listeners: {drain: 0s}\n"+after), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	reloaded.Store(true)
	await(1)
	halt()
	text := r.metrics(t)
	series := func(labels string) float64 {
		for line := range strings.Lines(text) {
			if rest, ok := strings.CutPrefix(line, "sluice_checks_total{"+labels+"} "); ok {
				v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				return v
			}
		}
		return 0
	}
	// A check that read the old name just before the reload may be decided
	// under the new config: it is refused (the name is gone) and counted
	// nowhere, or counted under its own name. None is counted twice, or
	// under the other name.
	for _, c := range []struct {
		labels string
		want   int64
	}{
		{`domain="",policy="old",result="allowed"`, native[0].Load()},
		{`domain="",policy="new",result="allowed"`, native[1].Load()},
		{`domain="edge",policy="",result="allowed"`, rpc[0].Load()},
		{`domain="edge2",policy="",result="allowed"`, rpc[1].Load()},
	} {
		if got := series(c.labels); got != float64(c.want) {
			t.Errorf("sluice_checks_total{%s} = %v; the checks allowed under it: %d", c.labels, got, c.want)
		}
	}
}
