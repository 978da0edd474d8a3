package server

import (
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/buildinfo"
)

// metrics are the service's Prometheus collectors, on their own registry.
// Label values are bounded by the config (policy and domain names), never
// the caller's keys.
type metrics struct {
	reg          *prometheus.Registry
	checks       *prometheus.CounterVec
	nearLimit    *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	storeLatency *prometheus.HistogramVec
	storeCalls   *prometheus.CounterVec
	reloads      *prometheus.CounterVec
	lastReload   prometheus.Gauge
	reloadOK     prometheus.Gauge
	descriptors  *prometheus.CounterVec
	refused      *prometheus.CounterVec
	estimated    *prometheus.CounterVec
	charged      *prometheus.CounterVec
	unread       *prometheus.CounterVec
	unknownPlan  *prometheus.CounterVec
	// upstreamFailed is sluice proxy's requests its upstream failed.
	upstreamFailed *prometheus.CounterVec
	adminRefused   *prometheus.CounterVec // by refusedAdmin's reasons
	// reservationsRefused is reservations refused at a bound, by bound.
	reservationsRefused *prometheus.CounterVec
	detailed            seriesCap

	// The series a check counts in, each found by its labels once.
	checksOf      series[checkLabels, prometheus.Counter]
	nearLimitOf   series[subject, prometheus.Counter]
	latencyOf     series[subject, prometheus.Observer]
	descriptorsOf series[[2]string, prometheus.Counter] // descriptor, result
	storeCallsOf  series[storeLabels, storeSeries]
}

// checkLabels are a check's series in sluice_checks_total.
type checkLabels struct {
	sub subject
	o   guard.Outcome
}

// storeLabels are a store call's series: its operation and whether it
// failed.
type storeLabels struct {
	operation string
	failed    bool
}

// storeSeries are a store call's latency and count.
type storeSeries struct {
	latency prometheus.Observer
	calls   prometheus.Counter
}

// series holds a vector's series by their labels, each resolved once:
// WithLabelValues hashes every label value and takes the vector's lock at
// each call, where a check reads a map that is replaced, never written,
// when a series is first used. The labels are bounded as the vector's
// are (by the config, or by seriesCap), and no series is ever deleted, so
// one found stays the vector's.
type series[K comparable, V any] struct {
	mu sync.Mutex // serializes adding
	m  atomic.Pointer[map[K]V]
}

// get returns k's series, resolving it once.
func (c *series[K, V]) get(k K, resolve func() V) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[K]V
	if m := c.m.Load(); m != nil {
		old = *m
	}
	if v, ok := old[k]; ok {
		return v
	}
	m := make(map[K]V, len(old)+1)
	maps.Copy(m, old)
	v := resolve()
	m[k] = v
	c.m.Store(&m)
	return v
}

// check counts a check of sub with outcome o.
func (m *metrics) check(sub subject, o guard.Outcome) {
	m.checksOf.get(checkLabels{sub, o}, func() prometheus.Counter {
		policy, domain := sub.labels()
		return m.checks.WithLabelValues(policy, domain, o.String())
	}).Inc()
}

// nearLimitFor is sub's near-limit counter.
func (m *metrics) nearLimitFor(sub subject) prometheus.Counter {
	return m.nearLimitOf.get(sub, func() prometheus.Counter {
		policy, domain := sub.labels()
		return m.nearLimit.WithLabelValues(policy, domain)
	})
}

// latencyFor is sub's check latency histogram.
func (m *metrics) latencyFor(sub subject) prometheus.Observer {
	return m.latencyOf.get(sub, func() prometheus.Observer {
		policy, domain := sub.labels()
		return m.latency.WithLabelValues(policy, domain)
	})
}

// descriptor counts an Envoy descriptor decided under name with result.
func (m *metrics) descriptor(name, result string) {
	m.descriptorsOf.get([2]string{name, result}, func() prometheus.Counter {
		return m.descriptors.WithLabelValues(name, result)
	}).Inc()
}

// seriesCap bounds the series that requests' own values name (detailed_metric):
// past maxDetailedSeries distinct names, the rest share one.
type seriesCap struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

const maxDetailedSeries = 1000

// name returns name while there is room for it, else "(overflow)".
func (c *seriesCap) name(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[name]; ok {
		return name
	}
	if c.seen == nil {
		c.seen = map[string]struct{}{}
	}
	if len(c.seen) >= maxDetailedSeries {
		return "(overflow)"
	}
	c.seen[name] = struct{}{}
	return name
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_checks_total",
			Help: "Checks by policy or Envoy domain (the other label empty) and result: allowed, denied, shadow_denied, local_allowed, local_denied, failed_open, failed_closed, invalid, unknown_domain.",
		}, []string{"policy", "domain", "result"}),
		nearLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_checks_near_limit_total",
			Help: "Checks allowed with at most 1 - metrics.near_limit_ratio of their closest limit left, by policy or domain.",
		}, []string{"policy", "domain"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_check_duration_seconds",
			Help:    "Time to decide one check, by policy or domain; with tracing on, exemplars carry the trace id.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 2, 18),
		}, []string{"policy", "domain"}),
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_store_duration_seconds",
			Help:    "Time of one store call, by operation: take (a check, or a peek), reset, sync (local-sync's pushes).",
			Buckets: prometheus.ExponentialBuckets(0.00001, 2, 18),
		}, []string{"operation"}),
		storeCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_store_calls_total",
			Help: "Store calls by operation (take, reset, sync) and result (ok, error); calls the breaker spared are not made.",
		}, []string{"operation", "result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_success_timestamp_seconds",
			Help: "When the config in use was loaded (at start, or by the last successful reload), in Unix seconds.",
		}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_successful",
			Help: "1 when the last load or reload of the config succeeded, 0 when it was refused (the previous config serving).",
		}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_envoy_descriptor_checks_total",
			Help: "Envoy descriptors decided, by the config node that limited them (envoyproxy/ratelimit's key: domain.key_value...; the request's own values under detailed_metric or value_to_metric, at most 1000 such series, then \"(overflow)\") and result (returned: its hits given back, is_negative_hits).",
		}, []string{"descriptor", "result"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_grpc_refused_total",
			Help: "gRPC calls and connections the listener cut, by reason: receive_timeout (a call whose request did not arrive within listeners.read_timeout), too_many_resets (a connection that reset streams faster than the rapid-reset guard allows, sent a GOAWAY).",
		}, []string{"reason"}),
		estimated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cost_estimated_total",
			Help: "Cost taken before the answer by the policies that charge by their answer (cost.from, charge_status), by policy: compare with sluice_cost_charged_total to tune cost.estimate.",
		}, []string{"policy"}),
		charged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cost_charged_total",
			Help: "Cost charged once the answer settled it, by policy: what the answers reported (the estimate where they did not say, 0 for a status charge_status does not charge).",
		}, []string{"policy"}),
		unread: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cost_unread_total",
			Help: "Answers whose cost could not be read (missing, not a whole number, negative, past 2^53), so their estimate stood, by policy.",
		}, []string{"policy"}),
		unknownPlan: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_plan_unknown_total",
			Help: "Checks and requests that named a plan their policy does not have (a check's plan, the proxy's plan_from header), decided by the key's override or else the policy's own limits, by policy.",
		}, []string{"policy"}),
		upstreamFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_proxy_upstream_failures_total",
			Help: "Requests sluice proxy forwarded that its upstream failed, by reason: unreachable (answered 502), timeout (no headers within listeners.proxy_timeout: 504), cut (the answer ended mid-body, and so did the client's).",
		}, []string{"reason"}),
		adminRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_admin_refused_total",
			Help: "Requests to the admin API and the status page refused for their token, by reason: wrong_token (none, or not the admin token), locked_out (from an address past its wrong tokens for the minute).",
		}, []string{"reason"}),
		reservationsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_reservations_refused_total",
			Help: "Reservations (POST /v1/check with reserve) refused, charging nothing, because they would pass a reservations bound, by bound: max_bytes_per_key (429), max_bytes_per_policy or max_bytes (503).",
		}, []string{"bound"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total",
			Help: "Config reloads by result: success or failure.",
		}, []string{"result"}),
	}
	build := buildinfo.Read()
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_build_info", Help: "1, labelled with the build: module version, VCS revision, whether the tree was modified, Go version.",
	}, []string{"version", "revision", "modified", "goversion"})
	info.WithLabelValues(build.Version, build.Revision, strconv.FormatBool(build.Modified), build.Go).Set(1)
	m.lastReload.SetToCurrentTime()
	m.reloadOK.Set(1)
	m.reg.MustRegister(info, m.checks, m.nearLimit, m.latency, m.storeLatency, m.storeCalls, m.reloads, m.lastReload, m.reloadOK, m.descriptors, m.refused, m.estimated, m.charged, m.unread, m.unknownPlan, m.upstreamFailed, m.adminRefused, m.reservationsRefused,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// storeCall counts one store call of operation.
func (m *metrics) storeCall(operation string, took time.Duration, err error) {
	s := m.storeCallsOf.get(storeLabels{operation, err != nil}, func() storeSeries {
		result := "ok"
		if err != nil {
			result = "error"
		}
		return storeSeries{m.storeLatency.WithLabelValues(operation), m.storeCalls.WithLabelValues(operation, result)}
	})
	s.latency.Observe(took.Seconds())
	s.calls.Inc()
}
