package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total",
			Help: "Config reloads by result: success or failure.",
		}, []string{"result"}),
	}
	m.reg.MustRegister(m.checks, m.latency, m.storeLatency, m.storeErrors, m.reloads,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
