package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/config"
)

// envoyEnv is what `sluice serve -envoy-env` takes from
// envoyproxy/ratelimit's environment, so that sluice can be started in its
// place: its runtime directory, listeners, Redis and answers.
type envoyEnv struct {
	config, redis            string // the runtime directory; a Redis URL
	http, grpc, debug        string // listen addresses
	logLevel, logFormat      string
	envoy                    config.Envoy
	unsupported, ineffective []string // variables set that sluice does not read, or reads and need not act on
}

// envoyUnsupported are envoyproxy/ratelimit's variables that sluice does
// not act on: statistics backends (sluice serves Prometheus on /metrics),
// memcache, xDS config, its own TLS, per-second Redis, tracing, and the
// few settings sluice has no counterpart for. Set, they are named in one
// log line at start, never silently ignored. Every variable of
// envoyproxy/ratelimit's settings is read, or listed here or in
// envoyIneffective (TestEveryEnvoyVariableIsAccountedFor).
var envoyUnsupported = []string{
	"USE_STATSD", "STATSD_HOST", "STATSD_PORT", "USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "EXTRA_TAGS",
	"STATS_FLUSH_INTERVAL", "DISABLE_STATS", "USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH",
	"PROMETHEUS_MAPPER_YAML", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "BACKEND_TYPE",
	"MEMCACHE_HOST_PORT", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_TLS",
	"MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
	"CONFIG_TYPE", "CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA",
	"CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
	"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
	"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
	"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN",
	"GRPC_UDS", "GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE",
	"REDIS_PERSECOND", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_AUTH",
	"REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
	"REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
	"REDIS_PERSECOND_TIMEOUT", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT",
	"CACHE_KEY_PREFIX", "EXPIRATION_JITTER_MAX_SECONDS", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "RESPONSE_DYNAMIC_METADATA",
	"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "FORCE_START_WITHOUT_INITIAL_CONFIG", "MERGE_DOMAIN_CONFIG",
	"TRACING_ENABLED", "TRACING_EXPORTER_PROTOCOL", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE",
	"TRACING_SERVICE_INSTANCE_ID", "TRACING_SAMPLING_RATE",
}

// envoyIneffective are read and accepted, but have nothing to do in sluice.
var envoyIneffective = map[string]string{
	"REDIS_POOL_SIZE":                      "sluice pipelines its calls on one client",
	"REDIS_POOL_ON_EMPTY_BEHAVIOR":         "sluice pipelines its calls on one client",
	"REDIS_CLUSTER_PIPELINE_PARALLELISM":   "sluice pipelines its calls on one client",
	"REDIS_TIMEOUT":                        "the policy file's store.timeout bounds each store call, and fail_mode decides past it",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "sluice probes a failing Redis itself (the breaker)",
	"REDIS_STARTUP_INITIAL_INTERVAL":       "sluice starts without Redis, deciding by fail_mode until it answers",
	"REDIS_STARTUP_MAX_INTERVAL":           "sluice starts without Redis, deciding by fail_mode until it answers",
	"REDIS_STARTUP_MAX_ELAPSED_TIME":       "sluice starts without Redis, deciding by fail_mode until it answers",
	"RUNTIME_IGNOREDOTFILES":               "sluice always ignores the directory's dot files",
	"LOCAL_CACHE_SIZE_IN_BYTES":            "sluice keeps no cache of over-limit keys: fail_mode local decides when Redis fails",
	"NEAR_LIMIT_RATIO":                     "the policy file's metrics.near_limit_ratio sets it",
	"RUNTIME_WATCH_ROOT":                   "sluice always watches the runtime directory",
}

// readEnvoyEnv reads the environment through get, with
// envoyproxy/ratelimit's defaults.
func readEnvoyEnv(get func(string) (string, bool)) (envoyEnv, error) {
	v := func(name, def string) string {
		if s, ok := get(name); ok && s != "" {
			return s
		}
		return def
	}
	truth := func(name string) (bool, error) {
		s := v(name, "false")
		b, err := strconv.ParseBool(s)
		if err != nil {
			return false, fmt.Errorf("%s=%q: want true or false", name, s)
		}
		return b, nil
	}
	var e envoyEnv
	e.config = filepath.Join(v("RUNTIME_ROOT", "/srv/runtime_data/current"), v("RUNTIME_SUBDIRECTORY", ""), v("RUNTIME_APPDIRECTORY", "config"))
	e.http = net.JoinHostPort(v("HOST", "0.0.0.0"), v("PORT", "8080"))
	e.grpc = net.JoinHostPort(v("GRPC_HOST", "0.0.0.0"), v("GRPC_PORT", "8081"))
	// pprof and the loaded config, without auth: loopback unless
	// DEBUG_HOST says otherwise (envoyproxy/ratelimit binds every
	// interface).
	e.debug = net.JoinHostPort(v("DEBUG_HOST", "127.0.0.1"), v("DEBUG_PORT", "6070"))
	e.logLevel = strings.ToLower(v("LOG_LEVEL", "warn"))
	e.logFormat = strings.ToLower(v("LOG_FORMAT", "text"))
	var err error
	if e.redis, err = envoyRedisURL(v); err != nil {
		return e, err
	}
	if e.envoy.ShadowMode, err = truth("SHADOW_MODE"); err != nil {
		return e, err
	}
	if e.envoy.QuotaMode, err = truth("QUOTA_MODE"); err != nil {
		return e, err
	}
	if e.envoy.ResponseHeaders, err = truth("LIMIT_RESPONSE_HEADERS_ENABLED"); err != nil {
		return e, err
	}
	e.envoy.LimitHeader = v("LIMIT_LIMIT_HEADER", "RateLimit-Limit")
	e.envoy.RemainingHeader = v("LIMIT_REMAINING_HEADER", "RateLimit-Remaining")
	e.envoy.ResetHeader = v("LIMIT_RESET_HEADER", "RateLimit-Reset")
	for _, name := range envoyUnsupported {
		if _, ok := get(name); ok {
			e.unsupported = append(e.unsupported, name)
		}
	}
	for name, why := range envoyIneffective {
		if _, ok := get(name); ok {
			e.ineffective = append(e.ineffective, name+" ("+why+")")
		}
	}
	if v("REDIS_SENTINEL_AUTH", "") != "" && !strings.EqualFold(v("REDIS_TYPE", "single"), "sentinel") {
		e.ineffective = append(e.ineffective, "REDIS_SENTINEL_AUTH (REDIS_TYPE is not sentinel)")
	}
	sort.Strings(e.ineffective)
	return e, nil
}

// envoyRedisURL builds a sluice Redis URL from REDIS_SOCKET_TYPE, REDIS_TYPE,
// REDIS_URL, REDIS_AUTH, REDIS_SENTINEL_AUTH and REDIS_TLS: REDIS_URL is
// host:port (or a socket path), hosts separated by commas for a cluster,
// and the master's name then the sentinels for sentinel; REDIS_AUTH (Redis's)
// and REDIS_SENTINEL_AUTH (the sentinels') are a password or
// user:password. With REDIS_TLS, REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT
// and REDIS_TLS_CLIENT_KEY name the files of the URL's tls_* parameters,
// and REDIS_TLS_SKIP_HOSTNAME_VERIFICATION sets its
// tls_skip_hostname_verification, as envoyproxy/ratelimit reads them only
// then.
func envoyRedisURL(v func(string, string) string) (string, error) {
	addrs := v("REDIS_URL", "/var/run/nutcracker/ratelimit.sock")
	sentinelAuth := v("REDIS_SENTINEL_AUTH", "") // sentinel's alone, as envoyproxy/ratelimit reads it
	var user *url.Userinfo
	if auth := v("REDIS_AUTH", ""); auth != "" {
		if u, p, ok := strings.Cut(auth, ":"); ok {
			user = url.UserPassword(u, p)
		} else {
			user = url.UserPassword("", auth)
		}
	}
	scheme, q := "redis", url.Values{}
	if tls, _ := strconv.ParseBool(v("REDIS_TLS", "false")); tls {
		scheme = "rediss"
		for param, name := range map[string]string{"tls_ca_file": "REDIS_TLS_CACERT", "tls_cert_file": "REDIS_TLS_CLIENT_CERT", "tls_key_file": "REDIS_TLS_CLIENT_KEY"} {
			if file := v(name, ""); file != "" {
				q.Set(param, file)
			}
		}
		switch skip, err := strconv.ParseBool(v("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false")); {
		case err != nil:
			return "", fmt.Errorf("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=%q: want true or false", v("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", ""))
		case skip:
			q.Set("tls_skip_hostname_verification", "true")
		}
	}
	u := &url.URL{Scheme: scheme, User: user, RawQuery: q.Encode()}
	switch socket := strings.ToLower(v("REDIS_SOCKET_TYPE", "unix")); socket {
	case "unix":
		u.Scheme, u.Path = "unix", addrs
		return u.String(), nil
	case "tcp":
	default:
		return "", fmt.Errorf("REDIS_SOCKET_TYPE=%q: want unix or tcp", socket)
	}
	switch typ := strings.ToLower(v("REDIS_TYPE", "single")); typ {
	case "single", "cluster":
		u.Host = addrs // a comma-separated list is a Cluster seed list to sluice
	case "sentinel":
		master, sentinels, ok := strings.Cut(addrs, ",")
		if !ok {
			return "", fmt.Errorf("REDIS_URL=%q: with REDIS_TYPE=sentinel, want the master's name then the sentinels, comma-separated", addrs)
		}
		if scheme == "rediss" && len(q) == 0 {
			// A sentinel URL turns TLS on by its tls_* parameters alone.
			return "", errors.New("REDIS_TLS with REDIS_TYPE=sentinel: set REDIS_TLS_CACERT, the CA that verifies Redis, so that sluice connects over TLS")
		}
		if sentinelAuth != "" {
			if user, pass, ok := strings.Cut(sentinelAuth, ":"); ok {
				q.Set("sentinel_username", user)
				q.Set("sentinel_password", pass)
			} else {
				q.Set("sentinel_password", sentinelAuth)
			}
			u.RawQuery = q.Encode()
		}
		u.Scheme, u.Host, u.Path = "redis-sentinel", sentinels, "/"+master
	default:
		return "", fmt.Errorf("REDIS_TYPE=%q: want single, sentinel or cluster", typ)
	}
	return u.String(), nil
}
