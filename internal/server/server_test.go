package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
)

// running is a started Server and its log.
type running struct {
	*Server
	log  *logbuf.Buffer
	base string // http://host:port
}

// start runs a Server on free ports with the config text (and redisURL,
// if set) until the test ends.
func start(t *testing.T, config, redisURL string) *running {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if !strings.Contains(config, "listeners:") {
		config = "listeners: {drain: 0s}\n" + config // tests that drain say so
	}
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	buf := &logbuf.Buffer{}
	s, err := New(Options{Config: path, RedisURL: redisURL, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return &running{Server: s, log: buf, base: "http://" + s.Addrs().HTTP}
}

var client = &http.Client{Timeout: 10 * time.Second}

// check posts one check and returns its result and the HTTP status.
func (r *running) check(t testing.TB, policy, key string) (CheckResult, int) {
	t.Helper()
	res, code, err := r.tryCheck(policy, key)
	if err != nil {
		t.Fatal(err)
	}
	return res, code
}

// tryCheck is check for a goroutine other than the test's.
func (r *running) tryCheck(policy, key string) (CheckResult, int, error) {
	body, _ := json.Marshal(CheckRequest{Checks: []Check{{Policy: policy, Key: key}}})
	resp, err := client.Post(r.base+"/v1/check", "application/json", bytes.NewReader(body))
	if err != nil {
		return CheckResult{}, 0, err
	}
	defer resp.Body.Close()
	var out CheckResponse
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return CheckResult{Error: string(data)}, resp.StatusCode, nil
	}
	if err := json.Unmarshal(data, &out); err != nil || len(out.Results) != 1 {
		return CheckResult{}, resp.StatusCode, fmt.Errorf("response %s: %v", data, err)
	}
	return out.Results[0], resp.StatusCode, nil
}

// rlsClient returns a client of r's Envoy rate limit service, over a
// connection of its own that closes with the test.
func (r *running) rlsClient(t testing.TB) rlspb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(r.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

// metrics returns the text of /metrics.
func (r *running) metrics(t testing.TB) string {
	t.Helper()
	resp, err := client.Get(r.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data)
}

// checks returns sluice_checks_total by result, summed over policies.
func (r *running) checks(t testing.TB) map[string]float64 {
	t.Helper()
	data := r.metrics(t)
	out := map[string]float64{}
	for _, line := range strings.Split(data, "\n") {
		if !strings.HasPrefix(line, "sluice_checks_total{") {
			continue
		}
		i := strings.Index(line, `result="`)
		result := line[i+8 : i+8+strings.Index(line[i+8:], `"`)]
		v, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		out[result] += v
	}
	return out
}

func total(m map[string]float64) (n float64) {
	for _, v := range m {
		n += v
	}
	return n
}

const redisPolicies = `
store:
  type: redis
  url: redis://127.0.0.1:1
policies:
  - name: five
    limit: fixed_window 5/1h
  - name: closed
    limit: 5/1h
    fail_mode: closed
  - name: open
    limit: 5/1h
    fail_mode: open
  - name: watch
    limit: 1/1h
    shadow: true
`

// An outage on the service's front door, with default settings: Redis
// refuses connections. Every check is answered at once by its policy's
// fail_mode (local by default: the key admits what it had left), counted
// once, the failure is logged and shown by /readyz, and Redis decides again
// within a second of coming back.
func TestOutageOnTheFrontDoor(t *testing.T) {
	redis := redistest.Standalone(t)
	proxy := faultproxy.Start(t, redis.Addr)
	r := start(t, redisPolicies, redis.URLVia(proxy.Addr))
	for range 2 {
		if res, _ := r.check(t, "five", "alice"); !res.Allowed || res.Local {
			t.Fatalf("healthy: %+v", res)
		}
	}
	before := r.checks(t)
	proxy.Down()
	admitted := 0
	for range 40 {
		start := time.Now()
		res, code := r.check(t, "five", "alice")
		if code != 200 || !res.Local {
			t.Fatalf("during the outage: %d %+v; want decided locally", code, res)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("a check took %v during the outage: it waited for the store", took)
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("the outage admitted %d of alice's checks; want 3, what she had left", admitted)
	}
	after := r.checks(t)
	if d := total(after) - total(before); d != 40 {
		t.Fatalf("40 checks moved sluice_checks_total by %v: %v -> %v", d, before, after)
	}
	if after["local_allowed"]-before["local_allowed"] != 3 || after["local_denied"]-before["local_denied"] != 37 {
		t.Fatalf("results: %v -> %v; want 3 local_allowed and 37 local_denied", before, after)
	}
	if res, code := r.check(t, "closed", "bob"); code != 503 || res.Allowed || strings.Contains(res.Error, proxy.Addr) {
		t.Fatalf("fail_mode closed: %d %+v; want 503 without the store's address", code, res)
	}
	if res, _ := r.check(t, "open", "bob"); !res.Allowed || !res.FailedOpen {
		t.Fatalf("fail_mode open: %+v", res)
	}
	if res, _ := r.check(t, "watch", "bob"); !res.Allowed || !res.Shadow {
		t.Fatalf("shadow: %+v", res)
	}
	resp, err := client.Get(r.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), "breaker") {
		t.Fatalf("/readyz during the outage: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(r.log.String(), "rate limit store failing") {
		t.Fatalf("no log line says the store is failing:\n%s", r.log)
	}
	proxy.Up()
	back := time.Now()
	for {
		res, code := r.check(t, "five", "carol")
		if code != 200 {
			t.Fatalf("after Redis came back: %d %+v", code, res)
		}
		if !res.Local {
			break
		}
		if time.Since(back) > 30*time.Second {
			t.Fatalf("still decided locally 30s after Redis came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(r.log.String(), "rate limit store recovered") {
		t.Fatalf("no log line says the store recovered:\n%s", r.log)
	}
}

// Each fault a store can have, on the service's front door: every check is
// answered within the timeout and a margin, by fail_mode local, and Redis
// decides again within a second once the fault ends.
func TestStoreFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("every store fault, each until it ends")
	}
	const cfg = "store: {type: redis, url: redis://127.0.0.1:1, timeout: 200ms}\npolicies:\n  - {name: p, limit: 1000/1h}\n"
	for _, tt := range []struct {
		name        string
		beforeStart bool // the fault is there when the service starts
		fault       func(*faultproxy.Proxy)
	}{
		{"down at start", true, func(p *faultproxy.Proxy) { p.Down() }},
		{"dies", false, func(p *faultproxy.Proxy) { p.Down() }},
		{"hangs", false, func(p *faultproxy.Proxy) { p.Stall(true) }},
		{"answers slowly", false, func(p *faultproxy.Proxy) { p.SetLatency(300 * time.Millisecond) }},
		{"resets connections", false, func(p *faultproxy.Proxy) { p.Refuse(true); p.Reset() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			redis := redistest.Standalone(t)
			proxy := faultproxy.Start(t, redis.Addr)
			if tt.beforeStart {
				tt.fault(proxy)
			}
			r := start(t, cfg, redis.URLVia(proxy.Addr))
			if !tt.beforeStart {
				if res, _ := r.check(t, "p", "k"); res.Local {
					t.Fatalf("healthy: %+v", res)
				}
				tt.fault(proxy)
			}
			// Every check is answered while the fault lasts, decided
			// locally: a hung or slow store's call ended at the timeout.
			for i := range 20 {
				res, code := r.check(t, "p", "k")
				if code != 200 || !res.Allowed || !res.Local {
					t.Fatalf("check %d: %d %+v, want allowed, decided locally", i, code, res)
				}
			}
			if !strings.Contains(r.log.String(), "rate limit store failing") {
				t.Fatalf("no log line says the store is failing:\n%s", r.log)
			}
			// Once it ends, the checks that go on failing probe the store
			// (after backoffs of at most 500 ms) and find it back.
			proxy.Up()
			back := time.Now()
			for {
				if res, _ := r.check(t, "p", "k"); !res.Local {
					break
				}
				if time.Since(back) > 30*time.Second {
					t.Fatalf("still decided locally 30s after the fault ended:\n%s", r.log)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if !strings.Contains(r.log.String(), "rate limit store recovered") {
				t.Fatalf("no log line says the store recovered:\n%s", r.log)
			}
		})
	}
}

// Checks refused because Redis is too far for the timeout are never
// charged: 20 concurrent checks on a sliding_log 5/15m, fail_mode closed,
// Redis 600 ms away and a 200 ms timeout are all refused, and once their
// calls have reached Redis the next check, with Redis near again, is
// allowed with nothing taken.
func TestRefusedChecksAreNotCharged(t *testing.T) {
	redis := redistest.Standalone(t)
	proxy := faultproxy.Start(t, redis.Addr)
	r := start(t, "store: {type: redis, url: redis://127.0.0.1:1, timeout: 200ms}\npolicies:\n  - {name: login, limit: sliding_log 5/15m, fail_mode: closed}\n", redis.URLVia(proxy.Addr))
	if res, _ := r.check(t, "login", "warm"); !res.Allowed {
		t.Fatalf("healthy: %+v", res)
	}
	proxy.SetLatency(300 * time.Millisecond)
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for range 20 {
		wg.Go(func() {
			if res, _ := r.check(t, "login", "alice"); res.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != 0 {
		t.Fatalf("%d of 20 checks allowed with Redis 600ms away and a 200ms timeout", n)
	}
	proxy.SetLatency(0)
	proxy.Drain() // every call sent has been written to Redis
	deadline := time.Now().Add(2 * time.Second)
	for {
		res, _ := r.check(t, "login", "alice")
		if res.Error == "" && !res.Local {
			if !res.Allowed || res.Remaining != 4 {
				t.Fatalf("after the refused checks reached Redis: %+v; want allowed with 4 remaining (none charged)", res)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis not deciding again: %+v", res)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Redis 52 ms away (25 ms each way), 64 callers, default settings: at
// most 1% of the checks are not decided by Redis.
func TestDistantRedisDecides(t *testing.T) {
	if testing.Short() {
		t.Skip("64 callers through 50 ms of latency")
	}
	redis := redistest.Standalone(t)
	proxy := faultproxy.Start(t, redis.Addr)
	r := start(t, "store: {type: redis, url: redis://127.0.0.1:1}\npolicies:\n  - {name: p, limit: 1000000/1h}\n", redis.URLVia(proxy.Addr))
	proxy.SetLatency(25 * time.Millisecond)
	before := r.checks(t)
	var wg sync.WaitGroup
	for c := range 64 {
		wg.Go(func() {
			for i := range 10 {
				r.check(t, "p", fmt.Sprintf("k%d-%d", c, i))
			}
		})
	}
	wg.Wait()
	after := r.checks(t)
	n := total(after) - total(before)
	notRedis := n - (after["allowed"] - before["allowed"]) - (after["denied"] - before["denied"])
	if n != 640 || notRedis > 6 {
		t.Fatalf("%v checks, %v not decided by Redis (%v -> %v); want 640 and at most 1%%", n, notRedis, before, after)
	}
}

// POST /v1/check takes exactly one JSON object, as application/json, with
// keys of valid UTF-8 up to 4,096 bytes of the client's own, and says what
// is wrong in the client's terms.
func TestStrictCheckInput(t *testing.T) {
	r := start(t, "policies: [{name: p, limit: 100/1h}]", "")
	post := func(contentType, body string) (int, string) {
		resp, err := client.Post(r.base+"/v1/check", contentType, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	key := func(k string) string { return `{"checks":[{"policy":"p","key":"` + k + `"}]}` }
	for _, tt := range []struct {
		name, contentType, body string
		status                  int
		mention                 string
	}{
		{"valid", "application/json", key("alice"), 200, `"allowed":true`},
		{"charset", "application/json; charset=utf-8", key("alice"), 200, `"allowed":true`},
		{"form", "application/x-www-form-urlencoded", key("alice"), 415, "application/json"},
		{"no type", "", key("alice"), 415, "application/json"},
		{"trailing object", "application/json", key("alice") + key("bob"), 400, "nothing after it"},
		{"trailing junk", "application/json", key("alice") + "x", 400, "nothing after it"},
		// Raw bytes that are not UTF-8, which encoding/json would turn
		// into U+FFFD, so that "u\xff" and "u\xfe" shared a counter.
		{"invalid utf-8", "application/json", key("u\xff"), 400, "UTF-8"},
		{"lone surrogate", "application/json", key(`u\ud800`), 400, "U+FFFD"},
		{"4096 bytes", "application/json", key(strings.Repeat("k", 4096)), 200, ""},
		{"4097 bytes", "application/json", key(strings.Repeat("k", 4097)), 400, "4097 bytes, at most 4096"},
		{"empty key", "application/json", key(""), 400, "key: invalid request identity: empty"},
	} {
		code, body := post(tt.contentType, tt.body)
		if code != tt.status || !strings.Contains(body, tt.mention) {
			t.Errorf("%s: %d %s; want %d mentioning %q", tt.name, code, body, tt.status, tt.mention)
		}
	}
}

// Envoy descriptors are counted by their config node, as
// envoyproxy/ratelimit names its statistics, and by the request's own
// values under detailed_metric, capped.
func TestEnvoyDescriptorMetrics(t *testing.T) {
	r := start(t, `domains:
  - domain: d
    descriptors:
      - key: plain
        rate_limit: {unit: hour, requests_per_unit: 5}
      - key: detailed
        detailed_metric: true
        rate_limit: {unit: hour, requests_per_unit: 5}
`, "")
	post := func(key, value string) {
		resp, err := client.Post(r.base+"/json", "application/json",
			strings.NewReader(`{"domain":"d","descriptors":[{"entries":[{"key":"`+key+`","value":"`+value+`"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	post("plain", "a")
	post("plain", "b")
	for i := range maxDetailedSeries + 5 {
		post("detailed", strconv.Itoa(i))
	}
	body := r.metrics(t)
	for _, want := range []string{
		`sluice_envoy_descriptor_checks_total{descriptor="d.plain",result="allowed"} 2`,
		`sluice_envoy_descriptor_checks_total{descriptor="d.detailed_7",result="allowed"} 1`,
		`sluice_envoy_descriptor_checks_total{descriptor="(overflow)",result="allowed"} 5`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// The metrics an operator watches beyond results: checks near their limit
// (at the configured ratio), store calls by operation and result, and the
// config's last load.
func TestOperatorMetrics(t *testing.T) {
	redistest.HourAhead()
	r := start(t, "metrics: {near_limit_ratio: 0.5}\npolicies: [{name: p, limit: fixed_window 4/1h}]", "")
	for range 4 {
		r.check(t, "p", "k")
	}
	body := r.metrics(t)
	for _, want := range []string{
		// 4/1h with half as the ratio: near once 2 or fewer are left, the 2nd, 3rd and 4th.
		`sluice_checks_near_limit_total{domain="",policy="p"} 3`,
		`sluice_checks_total{domain="",policy="p",result="allowed"} 4`,
		`sluice_config_last_reload_successful 1`,
		`sluice_config_last_reload_success_timestamp_seconds `,
		`sluice_build_info{`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// On Redis, what goes wrong beside the checks is exported: the clock's
// measurements, the files read again, the overrides followed.
func TestRedisSideErrorsExported(t *testing.T) {
	srv := redistest.Standalone(t)
	r := start(t, "policies: [{name: p, limit: 10/1h}]\n", srv.URL())
	m := r.metrics(t)
	for _, series := range []string{
		"sluice_redis_clock_errors_total ",
		"sluice_redis_file_errors_total ",
		`sluice_overrides_errors_total{reason="reload"} `,
		`sluice_overrides_errors_total{reason="subscribe"} `,
		`sluice_overrides_errors_total{reason="unparsed"} `,
	} {
		if !strings.Contains(m, "\n"+series) {
			t.Errorf("%s is not exported", strings.TrimSpace(series))
		}
	}
}
