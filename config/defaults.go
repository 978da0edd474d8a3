package config

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// defaults is every default of the policy file, in one place: a file is
// decoded over these values, so a field left out keeps its default here.
var defaults = struct {
	store       storeYAML
	listeners   listenersYAML
	envoy       envoyYAML
	metrics     metricsYAML
	ui          uiYAML
	forwardAuth forwardAuthYAML
	reserve     reserveYAML
	policy      policyYAML
}{
	// The service's open reservations: 32MiB holds some 50,000 on keys
	// of a few dozen bytes (1,600 on one key), 3,800 on keys of 4KiB (120
	// on one). A policy may have half: a flood on one leaves the others
	// room.
	reserve: reserveYAML{MaxBytes: 32 << 20, MaxBytesPerPolicy: 16 << 20, MaxBytesPerKey: 1 << 20},
	// A refusal is a 429; nginx's auth_request needs 403 (docs/gateways.md).
	// The original request is read from either pair of headers, a check
	// carrying both refused (request_headers names the gateway's).
	forwardAuth: forwardAuthYAML{DenyStatus: 429},
	// The status page keeps the 32 most denied keys of each policy.
	ui: uiYAML{TopKeys: 32},
	// envoyproxy/ratelimit's NEAR_LIMIT_RATIO.
	metrics: metricsYAML{NearLimitRatio: 0.8},
	// As envoyproxy/ratelimit: no rate headers unless asked for, and then
	// under its names.
	envoy: envoyYAML{LimitHeader: "RateLimit-Limit", RemainingHeader: "RateLimit-Remaining", ResetHeader: "RateLimit-Reset"},
	listeners: listenersYAML{
		// A slow-header client (slowloris) is cut after this.
		ReadHeaderTimeout: 5 * time.Second,
		// A check's body is a few hundred bytes: a slow-body client is
		// cut after this.
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
		// The proxy carries uploads and streamed answers: longer, still
		// bounded.
		ProxyTimeout: 5 * time.Minute,
		// Keep-alive connections are reused for this long between
		// requests: idle ones cannot pile up. Longer than the gateways
		// and load balancers in front keep theirs (nginx and AWS ALB
		// 60s, Traefik 90s, Caddy 2m): a connection closed here as the
		// gateway sends on it fails that request (a 502 for a POST,
		// which the gateway cannot send again).
		IdleTimeout: 3 * time.Minute,
		// Below the keep-alive timeouts upstreams ship with (Gunicorn
		// 2s; Node.js, uvicorn, Apache 5s): an upstream that closes an
		// idle connection as the proxy sends on it fails that request
		// (a 502 for a POST, which cannot be sent again). Reconnecting
		// after a second's quiet costs a connection a second at most.
		UpstreamIdleTimeout: time.Second,
		MaxHeaderBytes:      64 << 10,
		// Per listener; Go raises the file descriptor limit to the hard
		// limit at start, usually far above.
		MaxConnections: 4096,
		// gRPC calls at once per connection, the least HTTP/2 recommends:
		// each holds a goroutine, and Go keeps a goroutine's descriptor
		// for good once it has made one. Clients open more connections
		// (Envoy) or queue (grpc-go) past it.
		MaxStreams: 100,
		// A load balancer that polls /readyz every second sees the 503
		// before the listeners close.
		Drain: 2 * time.Second,
	},
	store: storeYAML{
		Type: "memory",
		// A ceiling for "the store is down", far above a healthy store's
		// slowest call on a saturated host (see sluice.DefaultTimeout).
		Timeout: sluice.DefaultTimeout,
		// Decide in memory while the store fails: neither open nor shut.
		FailMode: sluice.FailLocal,
		// The memory store's bounds: 4M keys of up to 16 bytes fit in
		// the bytes, so the bytes bind only for longer keys.
		MaxKeys:  4_000_000,
		MaxBytes: memstore.DefaultMaxBytes,
		// One sluice process unless told otherwise.
		Instances: 1,
		// local-sync: what an instance may overshoot by is its share of a
		// key per interval; 100ms keeps that small for per-second limits.
		SyncInterval: 100 * time.Millisecond,
		// shard: membership changes are noticed within a second.
		MemberInterval: time.Second,
		// shard: the members' own listener, beside the gRPC listener's
		// 8081 and admin's 8082; on loopback, as every listener.
		PeerListen: "127.0.0.1:8083",
	},
	policy: policyYAML{
		Key:      "client_ip",
		Cost:     costYAML{Estimate: 1},
		FailMode: sluice.FailLocal,
	},
}
