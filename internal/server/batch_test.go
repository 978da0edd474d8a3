package server

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/redistest"
)

// postChecks posts checks to /v1/check and returns the status and body.
func (r *running) postChecks(t *testing.T, checks ...Check) (int, []byte) {
	t.Helper()
	body, _ := json.Marshal(CheckRequest{Checks: checks})
	resp, err := client.Post(r.base+"/v1/check", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// A request of several checks refused whole charges none of them: one
// bad check (400) is found before any is decided, and when one fails
// closed (503) what the others took is given back. Its caller learns
// none of their results and retries them all.
func TestRefusedCheckRequestChargesNone(t *testing.T) {
	redis := redistest.Standalone(t)
	proxy := faultproxy.Start(t, redis.Addr)
	r := start(t, `policies:
  - {name: a, limit: 3/1h}
  - {name: log, limit: sliding_log 3/1h}
  - {name: closed, limit: 3/1h, fail_mode: closed}
`, redis.URLVia(proxy.Addr))
	cost := func(n int64) *int64 { return &n }
	remaining := func(policy string) (int64, bool) {
		t.Helper()
		res, code := r.check(t, policy, "k") // takes one
		if code != 200 || !res.Allowed {
			t.Fatalf("check %s/k: %d %+v", policy, code, res)
		}
		return res.Remaining + 1, res.Local
	}

	for _, bad := range []Check{
		{Policy: "nosuch", Key: "k"},
		{Policy: "a", Key: "k", Cost: cost(4)}, // past the capacity
		{Policy: "a", Key: ""},
	} {
		code, body := r.postChecks(t, Check{Policy: "a", Key: "k"}, Check{Policy: "log", Key: "k", Reserve: true}, bad)
		if code != 400 {
			t.Fatalf("checks with a bad one (%+v): %d %s, want 400", bad, code, body)
		}
	}
	if n, _ := remaining("a"); n != 3 {
		t.Fatalf("a/k has %d left after three refused requests, want 3: they charged it", n)
	}
	if n, _ := remaining("log"); n != 3 {
		t.Fatalf("log/k has %d left after three refused requests, want 3: they charged it", n)
	}

	// Redis down: a and log decide in memory, closed fails closed.
	proxy.Down()
	code, body := r.postChecks(t, Check{Policy: "a", Key: "k", Cost: cost(2)}, Check{Policy: "log", Key: "k", Cost: cost(2)}, Check{Policy: "closed", Key: "k"})
	if code != 503 {
		t.Fatalf("checks with one failing closed: %d %s, want 503", code, body)
	}
	if n, local := remaining("a"); n != 2 || !local {
		t.Fatalf("a/k during the outage: %d left (local %v), want the 2 it had: the refused request charged it", n, local)
	}
	if n, local := remaining("log"); n != 2 || !local {
		t.Fatalf("log/k during the outage: %d left (local %v), want the 2 it had", n, local)
	}
}

// An Envoy request refused as invalid for one descriptor (its entries
// make a key past the longest) takes nothing from the others: every
// key is checked before any descriptor is decided.
func TestEnvoyInvalidRequestTakesNothing(t *testing.T) {
	r := start(t, `domains:
  - domain: d
    descriptors:
      - {key: ip, rate_limit: {unit: hour, requests_per_unit: 3}}
      - key: a
        descriptors:
          - key: b
            descriptors:
              - key: c
                descriptors:
                  - key: e
                    descriptors:
                      - {key: f, rate_limit: {unit: hour, requests_per_unit: 3}}
`, "")
	rl := r.rlsClient(t)
	ip := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "ip", Value: "192.0.2.1"}}}
	long := strings.Repeat("x", 4000)
	deep := &ratelimitv3.RateLimitDescriptor{}
	for _, k := range []string{"a", "b", "c", "e", "f"} {
		deep.Entries = append(deep.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: long})
	}
	for range 3 {
		_, err := rl.ShouldRateLimit(t.Context(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{ip, deep}})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("a descriptor whose key is past %d bytes: %v, want InvalidArgument", sluice.MaxKeyLen, err)
		}
	}
	resp, err := rl.ShouldRateLimit(t.Context(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{ip}})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.Statuses[0]; resp.OverallCode != rlspb.RateLimitResponse_OK || st.LimitRemaining != 2 {
		t.Fatalf("ip after three refused requests: %v, %d left; want OK with 2 (none charged)", resp.OverallCode, st.LimitRemaining)
	}
}
