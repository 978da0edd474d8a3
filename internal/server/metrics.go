package server

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/internal/buildinfo"
)

// metrics are the service's Prometheus collectors, on their own registry.
// Label values are bounded by the config (policy and domain names), never
// the caller's keys.
type metrics struct {
	reg          *prometheus.Registry
	checks       *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	storeLatency prometheus.Histogram
	storeErrors  prometheus.Counter
	reloads      *prometheus.CounterVec
	descriptors  *prometheus.CounterVec
	detailed     seriesCap
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
			Help: "Checks by policy (or Envoy domain) and result: allowed, denied, shadow_denied, failed_open, error.",
		}, []string{"policy", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_check_duration_seconds",
			Help:    "Time to decide one check, by policy.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 2, 18),
		}, []string{"policy"}),
		storeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_store_duration_seconds",
			Help:    "Time of one store call.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 2, 18),
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_store_errors_total",
			Help: "Store calls that failed.",
		}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_envoy_descriptor_checks_total",
			Help: "Envoy descriptors decided, by the config node that limited them (envoyproxy/ratelimit's key: domain.key_value...; the request's own values under detailed_metric or value_to_metric, at most 1000 such series, then \"(overflow)\") and result.",
		}, []string{"descriptor", "result"}),
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
	m.reg.MustRegister(info, m.checks, m.latency, m.storeLatency, m.storeErrors, m.reloads, m.descriptors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
