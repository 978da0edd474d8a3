package main_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/freeport"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Started with envoyproxy/ratelimit's environment and runtime directory,
// sluice answers its probe, its /json and its gRPC service on its ports,
// and names in its log the variables it does not support.
func TestServeEnvoyEnv(t *testing.T) {
	redis := redistest.Own(t) // envoyproxy/ratelimit's variables name no key prefix
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	os.MkdirAll(dir, 0o755)
	for _, f := range []string{"basic.yaml", "another.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "internal", "server", "testdata", "envoy", "config", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), data, 0o644)
	}
	envoy := serveEnvoyEnv(t, root, "RUNTIME_WATCH_ROOT=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis.Addr,
		"USE_STATSD=false", "LOG_LEVEL=INFO", "LIMIT_RESPONSE_HEADERS_ENABLED=true")
	out, base, grpcPort, debugPort := envoy.out, envoy.base, envoy.grpc, envoy.debug
	resp, err := http.Post(base+"/json", "application/json", strings.NewReader(`{"domain":"basic","descriptors":[{"entries":[{"key":"key1","value":"z"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"limitRemaining":49`) {
		t.Fatalf("/json: %d %s", resp.StatusCode, body)
	}
	conn, err := grpc.NewClient("127.0.0.1:"+grpcPort, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "another",
		Descriptors: []*extrl.RateLimitDescriptor{{Entries: []*extrl.RateLimitDescriptor_Entry{{Key: "key3", Value: "v"}}}}})
	if err != nil || r.Statuses[0].LimitRemaining != 9 || len(r.ResponseHeadersToAdd) != 3 || r.ResponseHeadersToAdd[0].Key != "RateLimit-Limit" {
		t.Fatalf("gRPC: %v, %v", r, err)
	}
	if resp, err := http.Get("http://127.0.0.1:" + debugPort + "/rlconfig"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("debug listener: %v %v", resp, err)
	}
	if !strings.Contains(out.String(), "USE_STATSD") || !strings.Contains(out.String(), "RUNTIME_WATCH_ROOT") {
		t.Fatalf("the log does not name the variables sluice does not act on:\n%s", out)
	}
}

// With envoyproxy/ratelimit's REDIS_TLS and its certificate variables,
// sluice reaches a redis-server that asks for a client certificate
// (tls-auth-clients yes) and decides there; QUOTA_MODE puts every
// descriptor in quota mode.
func TestServeEnvoyEnvRedisTLS(t *testing.T) {
	certs := redistest.NewCerts(t)
	redis := redistest.StandaloneTLS(t, certs)
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "q.yaml"), []byte("domain: q\ndescriptors:\n  - {key: a, rate_limit: {unit: day, requests_per_unit: 1}}\n  - {key: b, rate_limit: {unit: day, requests_per_unit: 1}}\n"), 0o644)
	envoy := serveEnvoyEnv(t, root, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis.Addr, "REDIS_TLS=true", "REDIS_TLS_CACERT="+certs.CA,
		"REDIS_TLS_CLIENT_CERT="+certs.ClientCert, "REDIS_TLS_CLIENT_KEY="+certs.ClientKey, "QUOTA_MODE=true", "LOG_LEVEL=INFO")
	out, grpcPort := envoy.out, envoy.grpc
	conn, err := grpc.NewClient("127.0.0.1:"+grpcPort, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rl := rlspb.NewRateLimitServiceClient(conn)
	ask := func(a, b string) rlspb.RateLimitResponse_Code {
		r, err := rl.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "q", Descriptors: []*extrl.RateLimitDescriptor{
			{Entries: []*extrl.RateLimitDescriptor_Entry{{Key: "a", Value: a}}}, {Entries: []*extrl.RateLimitDescriptor_Entry{{Key: "b", Value: b}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r.OverallCode
	}
	// a=1 is used up by the first; with b fresh, quota mode lets the
	// second through; with both used up, the third is over.
	for i, c := range []struct {
		a, b string
		want rlspb.RateLimitResponse_Code
	}{{"1", "1", rlspb.RateLimitResponse_OK}, {"1", "2", rlspb.RateLimitResponse_OK}, {"1", "2", rlspb.RateLimitResponse_OVER_LIMIT}} {
		if got := ask(c.a, c.b); got != c.want {
			t.Fatalf("request %d (a=%s, b=%s): %v, want %v\n%s", i+1, c.a, c.b, got, c.want, out)
		}
	}
	if n := redis.Do("DBSIZE"); n == "0" || strings.Contains(out.String(), "rate limit store failing") {
		t.Fatalf("not decided on Redis (DBSIZE %s):\n%s", n, out)
	}
}

// envoyServe is a sluice serve -envoy-env: its log, its HTTP base URL,
// its gRPC and debug ports.
type envoyServe struct {
	out               *logbuf.Buffer
	base, grpc, debug string
}

// serveEnvoyEnv runs sluice serve -envoy-env on root's ratelimit runtime
// directory, its listeners on free loopback ports, with env beside, until
// t ends; it returns once /healthcheck answers OK.
func serveEnvoyEnv(t *testing.T, root string, env ...string) envoyServe {
	t.Helper()
	needBinary(t)
	port := func() string { a := freeport.Addr(t); return a[strings.LastIndex(a, ":")+1:] }
	httpPort, grpcPort, debugPort := port(), port(), port()
	cmd := exec.Command(binary, "serve", "-envoy-env")
	cmd.Env = append(append(os.Environ(), "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "HOST=127.0.0.1", "PORT="+httpPort,
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+grpcPort, "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+debugPort), env...)
	out := &logbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	base := "http://127.0.0.1:" + httpPort
	waitFor(t, func() bool {
		resp, err := http.Get(base + "/healthcheck")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && string(body) == "OK"
	})
	return envoyServe{out: out, base: base, grpc: grpcPort, debug: debugPort}
}
