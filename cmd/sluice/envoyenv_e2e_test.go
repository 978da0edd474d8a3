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
	port := func() string { a := freeport.Addr(t); return a[strings.LastIndex(a, ":")+1:] }
	httpPort, grpcPort, debugPort := port(), port(), port()
	cmd := exec.Command(binary, "serve", "-envoy-env")
	cmd.Env = append(os.Environ(), "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT="+httpPort, "GRPC_HOST=127.0.0.1", "GRPC_PORT="+grpcPort, "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+debugPort,
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis.Addr, "USE_STATSD=false", "LOG_LEVEL=INFO", "LIMIT_RESPONSE_HEADERS_ENABLED=true")
	out := &logbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
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
