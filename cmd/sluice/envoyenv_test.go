package main

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// envoyproxy/ratelimit's Redis settings become sluice's Redis URL.
func TestEnvoyRedisURL(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{}, "unix:///var/run/nutcracker/ratelimit.sock"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}, "redis://redis:6379"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_AUTH": "pw", "REDIS_TLS": "true"}, "rediss://:pw@r:6379"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "a:1,b:2", "REDIS_TYPE": "cluster", "REDIS_AUTH": "u:p"}, "redis://u:p@a:1,b:2"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_TYPE": "SENTINEL"}, "redis-sentinel://s1:26379,s2:26379/mymaster"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "m,s1:26379", "REDIS_TYPE": "sentinel", "REDIS_AUTH": "rp", "REDIS_SENTINEL_AUTH": "sp"}, "redis-sentinel://:rp@s1:26379/m?sentinel_password=sp"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "m,s1:26379", "REDIS_TYPE": "sentinel", "REDIS_SENTINEL_AUTH": "su:sp"}, "redis-sentinel://s1:26379/m?sentinel_password=sp&sentinel_username=su"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_TLS": "true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}, "rediss://r:6379?tls_skip_hostname_verification=true"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}, "redis://r:6379"}, // read only with REDIS_TLS, as envoyproxy/ratelimit does
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_SENTINEL_AUTH": "sp"}, "redis://r:6379"},                    // not sentinel: named at start
	} {
		e, err := readEnvoyEnv(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
		if err != nil || e.redis != tt.want {
			t.Errorf("%v: %q, %v; want %q", tt.env, e.redis, err, tt.want)
		}
		named := slices.ContainsFunc(e.ineffective, func(s string) bool { return strings.HasPrefix(s, "REDIS_SENTINEL_AUTH") })
		if want := tt.env["REDIS_SENTINEL_AUTH"] != "" && !strings.EqualFold(tt.env["REDIS_TYPE"], "sentinel"); named != want {
			t.Errorf("%v: REDIS_SENTINEL_AUTH named at start as doing nothing: %v, want %v (%v)", tt.env, named, want, e.ineffective)
		}
	}
	if _, err := readEnvoyEnv(func(k string) (string, bool) {
		return map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "ring"}[k], k == "REDIS_SOCKET_TYPE" || k == "REDIS_TYPE"
	}); err == nil {
		t.Error("REDIS_TYPE=ring accepted")
	}
}

// The debug listener has no auth: DEBUG_PORT alone binds it to loopback.
func TestEnvoyDebugListenerIsLoopback(t *testing.T) {
	for env, want := range map[[2]string]string{
		{"DEBUG_PORT", "7000"}:    "127.0.0.1:7000",
		{"DEBUG_HOST", "0.0.0.0"}: "0.0.0.0:6070",
		{"", ""}:                  "127.0.0.1:6070",
	} {
		e, err := readEnvoyEnv(func(k string) (string, bool) { return env[1], k == env[0] })
		if err != nil || e.debug != want {
			t.Errorf("%s=%s: debug %q, %v; want %q", env[0], env[1], e.debug, err, want)
		}
	}
}

// A secret on the command line is warned of: the admin token, and a
// password in -redis; a -redis without one is not.
func TestSecretFlagsAreWarnedOf(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want bool
	}{
		{[]string{"-redis", "redis://:pw@h:6379"}, true},
		{[]string{"--redis=redis://u:pw@h:6379"}, true},
		{[]string{"-redis", "redis://h:6379"}, false},
		{[]string{"-redis", "redis-sentinel://s:26379/m?sentinel_password=pw"}, true},
		{[]string{"-redis=redis://u:pw@h:port"}, true},
		{[]string{"-upstream", "http://u:pw@h"}, false}, // another flag
	} {
		if got := urlPassword(append([]string{"sluice", "serve"}, tt.args...), "redis"); got != tt.want {
			t.Errorf("%q: %v; want %v", tt.args, got, tt.want)
		}
	}
}

// Every variable envoyproxy/ratelimit reads is read by -envoy-env: acted
// on, or named at start as having nothing to do in sluice or as not
// supported, so that none set is silently ignored.
func TestEveryEnvoyVariableIsAccountedFor(t *testing.T) {
	data, err := os.ReadFile("testdata/envoy-ratelimit-variables.txt")
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]bool{}
	// Set to what reaches every variable: a TCP Redis, over TLS.
	set := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_TLS": "true"}
	if _, err := readEnvoyEnv(func(k string) (string, bool) { read[k] = true; v, ok := set[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.HasPrefix(name, "#") {
			continue
		}
		if !read[name] {
			t.Errorf("%s, which envoyproxy/ratelimit reads, is not read", name)
		}
	}
	for name := range read {
		if !strings.Contains(string(data), "\n"+name+"\n") {
			t.Errorf("%s is read, and envoyproxy/ratelimit reads no such variable", name)
		}
	}
}

// QUOTA_MODE puts every descriptor in quota mode, and REDIS_TLS's files
// become the Redis URL's tls_* parameters, only with REDIS_TLS.
func TestEnvoyQuotaModeAndRedisTLS(t *testing.T) {
	env := map[string]string{"QUOTA_MODE": "true", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_TLS": "true",
		"REDIS_TLS_CACERT": "/etc/ca.pem", "REDIS_TLS_CLIENT_CERT": "/etc/c.pem", "REDIS_TLS_CLIENT_KEY": "/etc/c.key"}
	get := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	e, err := readEnvoyEnv(get)
	if err != nil || !e.envoy.QuotaMode {
		t.Fatalf("QUOTA_MODE=true: %+v, %v", e.envoy, err)
	}
	if want := "rediss://r:6379?tls_ca_file=%2Fetc%2Fca.pem&tls_cert_file=%2Fetc%2Fc.pem&tls_key_file=%2Fetc%2Fc.key"; e.redis != want {
		t.Fatalf("Redis URL %q; want %q", e.redis, want)
	}
	env["REDIS_TLS"] = "false"
	if e, _ := readEnvoyEnv(get); e.redis != "redis://r:6379" {
		t.Fatalf("without REDIS_TLS: %q; want redis://r:6379", e.redis)
	}
	env["REDIS_TLS"], env["REDIS_TYPE"], env["REDIS_URL"] = "true", "sentinel", "m,s:26379"
	if e, err := readEnvoyEnv(get); err != nil || e.redis != "redis-sentinel://s:26379/m?tls_ca_file=%2Fetc%2Fca.pem&tls_cert_file=%2Fetc%2Fc.pem&tls_key_file=%2Fetc%2Fc.key" {
		t.Fatalf("sentinel over TLS: %q, %v", e.redis, err)
	}
	delete(env, "REDIS_TLS_CACERT")
	delete(env, "REDIS_TLS_CLIENT_CERT")
	delete(env, "REDIS_TLS_CLIENT_KEY")
	if _, err := readEnvoyEnv(get); err == nil || !strings.Contains(err.Error(), "REDIS_TLS_CACERT") {
		t.Fatalf("sentinel over TLS without a CA: %v; want an error naming REDIS_TLS_CACERT, not a connection in the clear", err)
	}
	delete(env, "REDIS_TYPE")
	env["QUOTA_MODE"] = "sometimes"
	if _, err := readEnvoyEnv(get); err == nil || !strings.Contains(err.Error(), "QUOTA_MODE") {
		t.Fatalf("QUOTA_MODE=sometimes: %v; want an error naming it", err)
	}
}
