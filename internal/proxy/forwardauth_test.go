package proxy

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
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

// allowedOf asks n times, each with the headers given, and returns how
// many were allowed (200), failing on any status but 200, 429 and 400.
func allowedOf(t *testing.T, srv *httptest.Server, n int, header ...string) int {
	t.Helper()
	allowed := 0
	for range n {
		switch resp := ask(t, srv, "", header...); resp.StatusCode {
		case 200:
			allowed++
		case 429, 400:
		default:
			t.Fatalf("%v: status %d", header, resp.StatusCode)
		}
	}
	return allowed
}

const apiAndLogin = `
trusted_proxies: [127.0.0.1/32]
policies:
  - {name: api, limit: fixed_window 3/1h, key: client_ip, match: "/api/"}
  - {name: login, limit: fixed_window 3/1h, key: client_ip, match: "POST /login"}
`

// A client behind nginx (which sets X-Original-Method and X-Original-URI
// and passes the client's own headers) adds the other pair, naming what
// it would like to be limited as: the check is refused, never decided as
// the client's pair says, and a gateway's header sent twice is refused.
// Each client is allowed at most its 3.
func TestForwardAuthClientsPairRefused(t *testing.T) {
	redistest.HourAhead()
	srv := forwardAuth(t, apiAndLogin)
	for name, h := range map[string][]string{
		"forwarded uri":     {"X-Original-Method", "GET", "X-Original-URI", "/api/items/1", "X-Forwarded-Uri", "/public"},
		"forwarded method":  {"X-Original-Method", "POST", "X-Original-URI", "/login", "X-Forwarded-Method", "GET"},
		"both forwarded":    {"X-Original-Method", "POST", "X-Original-URI", "/login", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/public"},
		"original uri":      {"X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/api/items/1", "X-Original-URI", "/public"},
		"mixed":             {"X-Forwarded-Method", "GET", "X-Original-URI", "/api/items/1"},
		"repeated uri":      {"X-Original-Method", "GET", "X-Original-URI", "/api/items/1", "X-Original-URI", "/public"},
		"repeated fwd uri":  {"X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/public", "X-Forwarded-Uri", "/api/items/1"},
		"repeated method":   {"X-Original-Method", "GET", "X-Original-Method", "POST", "X-Original-URI", "/login"},
		"repeated fwd host": {"X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/api/items/1", "X-Forwarded-Host", "a", "X-Forwarded-Host", "b"},
	} {
		t.Run(name, func(t *testing.T) {
			if resp := ask(t, srv, "", h...); resp.StatusCode != 400 {
				t.Fatalf("%d; want 400", resp.StatusCode)
			}
		})
	}
	// One client tries every lie 10 times, then asks honestly: nothing
	// was charged, so its 3 remain.
	client := []string{"X-Forwarded-For", "192.0.2.40"}
	lies := 0
	for _, h := range [][]string{
		{"X-Original-Method", "GET", "X-Original-URI", "/api/items/1", "X-Forwarded-Uri", "/public"},
		{"X-Original-Method", "POST", "X-Original-URI", "/login", "X-Forwarded-Method", "GET"},
	} {
		lies += allowedOf(t, srv, 10, append(h, client...)...)
	}
	if lies != 0 {
		t.Fatalf("a client naming its own original request was allowed %d times; want 0", lies)
	}
	if n := allowedOf(t, srv, 10, append([]string{"X-Original-Method", "POST", "X-Original-URI", "/login"}, client...)...); n != 3 {
		t.Fatalf("POST /login described honestly: %d allowed of 10; want 3", n)
	}
}

// With forward_auth.request_headers naming the gateway's pair, only that
// pair is read: the other pair, a client's, changes nothing.
func TestForwardAuthRequestHeadersReadsOnlyTheGatewaysPair(t *testing.T) {
	redistest.HourAhead()
	for _, c := range []struct {
		config string
		header []string
	}{
		{config.RequestHeadersOriginal, []string{"X-Original-Method", "GET", "X-Original-URI", "/api/items/1", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/public"}},
		{config.RequestHeadersForwarded, []string{"X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/api/items/1", "X-Original-Method", "GET", "X-Original-URI", "/public"}},
	} {
		t.Run(c.config, func(t *testing.T) {
			srv := forwardAuth(t, "forward_auth: {request_headers: "+c.config+"}\n"+apiAndLogin)
			if n := allowedOf(t, srv, 10, append(c.header, "X-Forwarded-For", "192.0.2.41")...); n != 3 {
				t.Fatalf("%d allowed of 10; want 3", n)
			}
			other := c.header[4:] // the other pair alone
			if resp := ask(t, srv, "", other...); resp.StatusCode != 400 {
				t.Fatalf("the other pair alone: %d; want 400, no original request", resp.StatusCode)
			}
		})
	}
	if _, err := config.Parse("x.yaml", []byte("forward_auth: {request_headers: x-client}\n"+apiAndLogin)); err == nil || !strings.Contains(err.Error(), "forward_auth.request_headers") {
		t.Fatalf("request_headers x-client: %v; want refused at its field", err)
	}
}

// nginx passes a fragment as the client sent it ("POST /login#x"); the
// upstreams that parse the target as a URL serve /login, so it is
// limited as /login.
func TestForwardAuthFragmentDropped(t *testing.T) {
	redistest.HourAhead()
	srv := forwardAuth(t, apiAndLogin)
	if n := allowedOf(t, srv, 10, "X-Original-Method", "POST", "X-Original-URI", "/login#x", "X-Forwarded-For", "192.0.2.42"); n != 3 {
		t.Fatalf("POST /login#x: %d allowed of 10; want 3", n)
	}
	if n := allowedOf(t, srv, 10, "X-Original-Method", "GET", "X-Original-URI", "/api/items/1?q=1#/x/../public", "X-Forwarded-For", "192.0.2.43"); n != 3 {
		t.Fatalf("GET /api/items/1?q=1#...: %d allowed of 10; want 3", n)
	}
}

// Path parameters are read as servlet containers read them:
// "/api;jsessionid=x/items/1" is /api/items/1 to Tomcat, and limited as
// it; a form the readings disagree on is refused.
func TestForwardAuthPathParameters(t *testing.T) {
	redistest.HourAhead()
	srv := forwardAuth(t, apiAndLogin)
	if n := allowedOf(t, srv, 10, "X-Original-Method", "GET", "X-Original-URI", "/api;jsessionid=x/items/1", "X-Forwarded-For", "192.0.2.44"); n != 3 {
		t.Fatalf("/api;jsessionid=x/items/1: %d allowed of 10; want 3", n)
	}
	if n := allowedOf(t, srv, 10, "X-Original-Method", "POST", "X-Original-URI", "/login;a=b", "X-Forwarded-For", "192.0.2.45"); n != 3 {
		t.Fatalf("POST /login;a=b: %d allowed of 10; want 3", n)
	}
	if resp := ask(t, srv, "", "X-Original-Method", "GET", "X-Original-URI", "/api/..;/admin"); resp.StatusCode != 400 {
		t.Fatalf("/api/..;/admin: %d; want 400", resp.StatusCode)
	}
}

// Forward-auth cannot hold a concurrency limit (the gateway never says
// when a request ends): it says so at start, applies the policy's limits
// alone, and leaves a policy of concurrency alone out. The config's
// Warnings, which `sluice config validate` prints, say it too.
func TestForwardAuthConcurrencyWarned(t *testing.T) {
	redistest.HourAhead()
	const yaml = `
trusted_proxies: [127.0.0.1/32]
policies:
  - {name: api, limit: fixed_window 3/1h, concurrency: 1, key: client_ip, match: "/api/"}
  - {name: uploads, concurrency: 2, key: client_ip, match: "/upload"}
`
	logged := &logbuf.Buffer{}
	srv := forwardAuthLogged(t, yaml, slog.New(slog.NewTextHandler(logged, nil)))
	for _, p := range []string{"api", "uploads"} {
		if !strings.Contains(logged.String(), "forward-auth cannot hold concurrency") || !strings.Contains(logged.String(), "policy="+p) {
			t.Fatalf("no warning of policy %s's concurrency at start:\n%s", p, logged)
		}
	}
	if n := allowedOf(t, srv, 5, "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/api/x", "X-Forwarded-For", "192.0.2.46"); n != 3 {
		t.Fatalf("/api/x: %d allowed of 5; want 3, the policy's limit", n)
	}
	if resp := ask(t, srv, "", "X-Forwarded-Method", "POST", "X-Forwarded-Uri", "/upload", "X-Forwarded-For", "192.0.2.46"); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "" {
		t.Fatalf("/upload: %d %v; want 200, no policy applied", resp.StatusCode, resp.Header)
	}
	cfg, err := config.Parse("x.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if ws := cfg.Warnings(); len(ws) != 2 || !strings.Contains(ws[0], `policy "api"`) || !strings.Contains(ws[1], "does not apply this policy") {
		t.Fatalf("Warnings: %q", ws)
	}
}

// A policy without match is checked by name only: forward-auth and the
// proxy apply it to no request (match: "/" applies one to every request).
func TestPolicyWithoutMatchNotAppliedToGateways(t *testing.T) {
	redistest.HourAhead()
	const yaml = `
trusted_proxies: [127.0.0.1/32]
policies:
  - {name: api, limit: fixed_window 3/1h, key: client_ip, match: "/api/"}
  - {name: checks, limit: fixed_window 1/1h, key: client_ip}
`
	srv := forwardAuth(t, yaml)
	for i := range 5 {
		if resp := ask(t, srv, "", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/home", "X-Forwarded-For", "192.0.2.47"); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("forward-auth /home, request %d: %d %v; want 200, no policy applied", i, resp.StatusCode, resp.Header)
		}
	}
	px := gateway(t, yaml, memstore.New(memstore.Options{}))
	for i := range 5 {
		if resp := get(t, px.URL+"/home"); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("proxy /home, request %d: %d %v; want 200, no policy applied", i, resp.StatusCode, resp.Header)
		}
	}
	// Said so: match "/".
	all := strings.Replace(yaml, "key: client_ip}", `key: client_ip, match: "/"}`, 1)
	srv = forwardAuth(t, all)
	if n := allowedOf(t, srv, 5, "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/home", "X-Forwarded-For", "192.0.2.47"); n != 1 {
		t.Fatalf("match \"/\": /home allowed %d of 5; want 1", n)
	}
	// A proxy with no policy it can apply says so at start.
	cfg, err := config.Parse("x.yaml", []byte("policies: [{name: checks, limit: 1/1h}]"))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := guard.New(memstore.New(memstore.Options{}), guard.Options{})
	if _, err := New(cfg, Deps{Guard: g}, &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "match") {
		t.Fatalf("a proxy of match-less policies: %v; want an error naming match", err)
	}
}
