package proxy

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
)

// forwardAuth is /v1/forward-auth for yaml on a memory store.
func forwardAuth(t *testing.T, yaml string) *httptest.Server {
	t.Helper()
	return forwardAuthLogged(t, yaml, slog.New(slog.DiscardHandler))
}

// forwardAuthLogged is forwardAuth logging to log.
func forwardAuthLogged(t *testing.T, yaml string, log *slog.Logger) *httptest.Server {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(memstore.New(memstore.Options{}), guard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ForwardAuth(cfg, Deps{Guard: g}, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// ask sends a forward-auth request describing the original request by
// the headers given, and returns the answer.
func ask(t *testing.T, srv *httptest.Server, query string, header ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+"/v1/forward-auth"+query, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

const perClient = `
trusted_proxies: [127.0.0.1/32]
policies:
  - {name: api, limit: fixed_window 3/1h, key: client_ip, match: "/api/"}
`

// The gateway's floor through forward-auth: two clients behind it each get
// 200, 200, 200 then 429 with Retry-After and the rate headers; /other is
// not limited; nginx's header names work as Caddy's and Traefik's do.
func TestForwardAuthPerClient(t *testing.T) {
	srv := forwardAuth(t, perClient)
	for _, client := range []string{"192.0.2.1", "192.0.2.2"} {
		var codes []int
		for i := range 4 {
			names := [2]string{"X-Forwarded-Method", "X-Forwarded-Uri"}
			if i%2 == 1 {
				names = [2]string{"X-Original-Method", "X-Original-URI"}
			}
			resp := ask(t, srv, "", names[0], "GET", names[1], "/api/items/1?x=1", "X-Forwarded-For", client)
			codes = append(codes, resp.StatusCode)
			if resp.Header.Get("X-RateLimit-Limit") != "3" || resp.Header.Get("RateLimit-Policy") == "" {
				t.Fatalf("%s, request %d: no rate headers: %v", client, i, resp.Header)
			}
			if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
				t.Fatalf("%s: 429 without Retry-After", client)
			}
		}
		if want := []int{200, 200, 200, 429}; !slices.Equal(codes, want) {
			t.Fatalf("%s: %v; want %v", client, codes, want)
		}
	}
	for range 5 {
		if resp := ask(t, srv, "", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/other", "X-Forwarded-For", "192.0.2.1"); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("/other: %d %v; want 200, not limited", resp.StatusCode, resp.Header)
		}
	}
	if resp := ask(t, srv, "?deny_status=403", "X-Original-Method", "GET", "X-Original-URI", "/api/x", "X-Forwarded-For", "192.0.2.1"); resp.StatusCode != 403 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("deny_status=403: %d %v", resp.StatusCode, resp.Header)
	}
}

// A refusal through forward-auth carries the middleware's problem body,
// naming the policy and the retry delay, whatever status the gateway
// asked for: Traefik and Caddy pass it on to the client as it is.
func TestForwardAuthDenialBody(t *testing.T) {
	srv := forwardAuth(t, perClient)
	get := func(query string) (*http.Response, map[string]any) {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/forward-auth"+query, nil)
		req.Header.Set("X-Forwarded-Method", "GET")
		req.Header.Set("X-Forwarded-Uri", "/api/x")
		req.Header.Set("X-Forwarded-For", "192.0.2.9")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var doc map[string]any
		if resp.StatusCode != http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
				t.Fatalf("%d: body: %v", resp.StatusCode, err)
			}
		}
		return resp, doc
	}
	for range 3 {
		if resp, _ := get(""); resp.StatusCode != http.StatusOK {
			t.Fatalf("within the limit: %d", resp.StatusCode)
		}
	}
	for _, status := range []int{http.StatusTooManyRequests, http.StatusForbidden} {
		resp, doc := get("?deny_status=" + strconv.Itoa(status))
		if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("deny_status=%d: %d %v", status, resp.StatusCode, resp.Header)
		}
		secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || secs < 1 {
			t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
		}
		want := map[string]any{
			"type": "about:blank", "title": http.StatusText(status), "status": float64(status),
			"detail":      fmt.Sprintf("rate limit %q exceeded; retry in %d s", "api", secs),
			"policy":      "api",
			"retry_after": float64(secs),
		}
		if !reflect.DeepEqual(doc, want) {
			t.Fatalf("deny_status=%d: body %v; want %v", status, doc, want)
		}
	}
}

// Without the gateway in trusted_proxies, a forged X-Forwarded-For changes
// nothing: every request is the gateway's own address, and the log says
// that every client behind it shares one counter.
func TestForwardAuthForgedForwardedFor(t *testing.T) {
	redistest.HourAhead()
	logged := &logbuf.Buffer{}
	srv := forwardAuthLogged(t, `
policies:
  - {name: api, limit: fixed_window 3/1h, key: client_ip, match: "/api/"}
`, slog.New(slog.NewTextHandler(logged, nil)))
	allowed := 0
	for i := range 6 {
		resp := ask(t, srv, "", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/api/x", "X-Forwarded-For", "198.51.100."+string(rune('1'+i)))
		if resp.StatusCode == 200 {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("6 requests with forged addresses: %d allowed; want 3, one client", allowed)
	}
	if !strings.Contains(logged.String(), "not in trusted_proxies") || strings.Count(logged.String(), "not in trusted_proxies") > 1 {
		t.Fatalf("want one sampled warning of the ignored header:\n%s", logged.String())
	}
}

// A description that is missing or malformed is a 400 and charges nothing;
// the same path well described is then allowed 3 times.
func TestForwardAuthBadInput(t *testing.T) {
	srv := forwardAuth(t, perClient)
	for name, h := range map[string][]string{
		"nothing":        {},
		"no method":      {"X-Forwarded-Uri", "/api/x"},
		"no uri":         {"X-Forwarded-Method", "GET"},
		"absolute uri":   {"X-Forwarded-Method", "GET", "X-Forwarded-Uri", "http://evil/api/x"},
		"not a path":     {"X-Forwarded-Method", "GET", "X-Forwarded-Uri", "api/x"},
		"long uri":       {"X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/api/" + strings.Repeat("a", maxURI)},
		"method":         {"X-Forwarded-Method", "GE T", "X-Forwarded-Uri", "/api/x"},
		"deny status":    {"X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/api/x"},
		"encoded slash":  {"X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/api%2fx"},
		"control in uri": {"X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/api/\tx"},
	} {
		query := ""
		if name == "deny status" {
			query = "?deny_status=500"
		}
		if resp := ask(t, srv, query, append(h, "X-Forwarded-For", "192.0.2.9")...); resp.StatusCode != 400 {
			t.Errorf("%s: %d; want 400", name, resp.StatusCode)
		}
	}
	for i := range 3 {
		if resp := ask(t, srv, "", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/api/x", "X-Forwarded-For", "192.0.2.9"); resp.StatusCode != 200 {
			t.Fatalf("request %d after the refused ones: %d; want 200 (nothing charged)", i, resp.StatusCode)
		}
	}
}

// The config's forward_auth.deny_status is the default, and a request's
// ?deny_status= overrides it.
func TestForwardAuthDenyStatusDefault(t *testing.T) {
	srv := forwardAuth(t, "forward_auth: {deny_status: 403}\n"+perClient)
	var codes []int
	for _, q := range []string{"", "", "", "", "?deny_status=429"} {
		codes = append(codes, ask(t, srv, q, "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/api/x", "X-Forwarded-For", "192.0.2.5").StatusCode)
	}
	if want := []int{200, 200, 200, 403, 429}; !slices.Equal(codes, want) {
		t.Fatalf("%v; want %v", codes, want)
	}
	if _, err := config.Parse("x.yaml", []byte("forward_auth: {deny_status: 500}\n"+perClient)); err == nil || !strings.Contains(err.Error(), "deny_status") {
		t.Fatalf("deny_status 500: %v; want refused", err)
	}
}
