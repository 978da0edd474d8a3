package httplimit_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

func ok(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }

func server(t *testing.T, opts httplimit.Options) *httptest.Server {
	t.Helper()
	m, err := httplimit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", ok)
	srv := httptest.NewServer(m.Handler(mux))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string, headers ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func resolver(t *testing.T, trusted ...string) *clientip.Resolver {
	r, err := clientip.RightmostUntrusted("X-Forwarded-For", trusted, clientip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A client that is not a trusted proxy cannot change its key by writing
// X-Forwarded-For.
func TestSpoofedForwardedForDoesNotChangeTheKey(t *testing.T) {
	ip := resolver(t, "10.0.0.0/8").Or(must(clientip.RemoteAddr(clientip.Options{})))
	srv := server(t, httplimit.Options{Store: memstore.New(memstore.Options{}), Policies: []httplimit.Policy{
		{Name: "ip", Limit: sluice.PerMinute(5), Key: httplimit.ClientIP(ip)},
	}})
	allowed := 0
	for i := range 50 {
		if get(t, srv.URL, "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i)).StatusCode == 200 {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("%d allowed with rotating spoofed X-Forwarded-For; want 5", allowed)
	}
}

func must(r *clientip.Resolver, err error) *clientip.Resolver {
	if err != nil {
		panic(err)
	}
	return r
}

// 1,000 clients behind one NAT address, seen through a trusted proxy, share
// one key; the same clients with distinct API keys do not.
func TestNATSharesOneKeyAPIKeysDoNot(t *testing.T) {
	store := memstore.New(memstore.Options{})
	srv := server(t, httplimit.Options{Store: store, Policies: []httplimit.Policy{
		{Name: "per-ip", Pattern: "/ip/", Limit: sluice.Limit{Rate: 100, Period: time.Hour}, Key: httplimit.ClientIP(resolver(t, "127.0.0.1"))},
		{Name: "per-key", Pattern: "/key/", Limit: sluice.PerMinute(5), Key: httplimit.APIKey("X-API-Key")},
	}})
	var ipAllowed, keyAllowed int
	for i := range 1000 {
		if get(t, srv.URL+"/ip/", "X-Forwarded-For", "203.0.113.1").StatusCode == 200 {
			ipAllowed++
		}
		if get(t, srv.URL+"/key/", "X-Forwarded-For", "203.0.113.1", "X-API-Key", fmt.Sprint("key-", i)).StatusCode == 200 {
			keyAllowed++
		}
	}
	if ipAllowed != 100 || keyAllowed != 1000 {
		t.Fatalf("behind one NAT: %d allowed by IP (want 100), %d by distinct API keys (want 1000)", ipAllowed, keyAllowed)
	}
}

func TestRoutesAreLimitedIndependently(t *testing.T) {
	srv := server(t, httplimit.Options{Store: memstore.New(memstore.Options{}), Policies: []httplimit.Policy{
		{Name: "search", Pattern: "GET /search", Limit: sluice.PerMinute(2), Key: httplimit.ClientIP(must(clientip.RemoteAddr(clientip.Options{})))},
		{Name: "items", Pattern: "GET /items/{id}", Limit: sluice.PerMinute(4), Key: httplimit.ClientIP(must(clientip.RemoteAddr(clientip.Options{})))},
	}})
	count := func(path string) (n int) {
		for range 10 {
			if get(t, srv.URL+path).StatusCode == 200 {
				n++
			}
		}
		return n
	}
	if s, i := count("/search"), count("/items/7"); s != 2 || i != 4 {
		t.Fatalf("search %d (want 2), items %d (want 4)", s, i)
	}
	if n := count("/other"); n != 10 {
		t.Fatalf("an unmatched route was limited: %d of 10", n)
	}
	if resp := get(t, srv.URL+"/items/8"); resp.StatusCode != 429 {
		t.Fatalf("items/8 shares the route's per-IP limit: got %d", resp.StatusCode)
	}
}

func TestShadowNeverBlocksButCounts(t *testing.T) {
	var shadowDenied atomic.Int64
	srv := server(t, httplimit.Options{
		Store: memstore.New(memstore.Options{}),
		Policies: []httplimit.Policy{
			{Name: "trial", Limit: sluice.PerMinute(3), Key: httplimit.ClientIP(must(clientip.RemoteAddr(clientip.Options{}))), Shadow: true},
		},
		OnResult: func(_ *http.Request, res *httplimit.Result) {
			if res.ShadowDenied {
				shadowDenied.Add(1)
			}
		},
	})
	for i := range 10 {
		if resp := get(t, srv.URL); resp.StatusCode != 200 {
			t.Fatalf("request %d blocked by a shadow policy: %d", i, resp.StatusCode)
		}
	}
	if n := shadowDenied.Load(); n != 7 {
		t.Fatalf("shadow denials recorded: %d, want 7", n)
	}
}

// A store that cannot be reached (Redis on a closed port): fail-open lets
// requests through, fail-closed answers 503 with Retry-After, and
// fail-local (the default) enforces the limit in memory.
func TestFailModes(t *testing.T) {
	down, err := redisstore.Open("redis://127.0.0.1:1", redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	key := httplimit.ClientIP(must(clientip.RemoteAddr(clientip.Options{})))
	srv := server(t, httplimit.Options{Store: down, Policies: []httplimit.Policy{
		{Name: "open", Pattern: "/open", Limit: sluice.PerMinute(1), Key: key, FailMode: sluice.FailOpen},
		{Name: "closed", Pattern: "/closed", Limit: sluice.PerMinute(1), Key: key, FailMode: sluice.FailClosed},
		{Name: "local", Pattern: "/local", Limit: sluice.PerMinute(2), Key: key},
	}})
	for i := range 3 {
		want := 200
		if i == 2 {
			want = 429
		}
		if resp := get(t, srv.URL+"/local"); resp.StatusCode != want {
			t.Fatalf("fail-local, request %d: %d, want %d", i+1, resp.StatusCode, want)
		}
		if resp := get(t, srv.URL+"/open"); resp.StatusCode != 200 {
			t.Fatalf("fail-open: %d", resp.StatusCode)
		}
		resp := get(t, srv.URL+"/closed")
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("fail-closed: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
}

// A denial carries every header, in the documented formats, and a problem
// body; an allowed response carries the rate headers.
func TestDenialResponse(t *testing.T) {
	srv := server(t, httplimit.Options{Store: memstore.New(memstore.Options{}), Policies: []httplimit.Policy{
		{Name: "minute", Limit: sluice.Limit{Rate: 2, Period: time.Minute}, Key: httplimit.APIKey("X-API-Key")},
		{Name: "hour", Limit: sluice.Limit{Rate: 100, Period: time.Hour}, Key: httplimit.APIKey("X-API-Key")},
	}})
	resp := get(t, srv.URL, "X-API-Key", "k")
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "2" || resp.Header.Get("X-RateLimit-Remaining") != "1" {
		t.Fatalf("allowed response headers: %d %v", resp.StatusCode, resp.Header)
	}
	get(t, srv.URL, "X-API-Key", "k")
	start := time.Now()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("X-API-Key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := resp.Header
	retry, _ := strconv.Atoi(h.Get("Retry-After"))
	reset, _ := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	switch {
	case resp.StatusCode != 429:
		t.Fatalf("status %d", resp.StatusCode)
	case retry < 1 || retry > 30:
		t.Errorf("Retry-After %q: want 1..30 seconds (two of 2/min: the next in 30s)", h.Get("Retry-After"))
	case h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Remaining") != "0":
		t.Errorf("X-RateLimit-Limit %q Remaining %q", h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"))
	case reset < start.Unix() || reset > start.Unix()+61:
		t.Errorf("X-RateLimit-Reset %d is not a Unix time within the minute", reset)
	case h.Get("RateLimit-Policy") != `"minute";q=2;w=60, "hour";q=100;w=3600`:
		t.Errorf("RateLimit-Policy %q", h.Get("RateLimit-Policy"))
	case h.Get("RateLimit") != `"minute";r=0;t=60, "hour";r=98;t=72`:
		t.Errorf("RateLimit %q", h.Get("RateLimit"))
	case h.Get("Content-Type") != "application/problem+json":
		t.Errorf("Content-Type %q", h.Get("Content-Type"))
	}
	var p struct {
		Status     int
		Title      string
		Policy     string
		RetryAfter int `json:"retry_after"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || p.Status != 429 || p.Policy != "minute" || p.RetryAfter != retry {
		t.Errorf("problem body %+v, %v", p, err)
	}
}

func TestResetDelta(t *testing.T) {
	srv := server(t, httplimit.Options{Store: memstore.New(memstore.Options{}), ResetFormat: httplimit.ResetDelta, Policies: []httplimit.Policy{
		{Name: "p", Limit: sluice.PerMinute(1), Key: httplimit.Route()},
	}})
	if got := get(t, srv.URL).Header.Get("X-RateLimit-Reset"); got != "60" {
		t.Fatalf("delta reset %q, want 60", got)
	}
}

func TestBadPolicies(t *testing.T) {
	store := memstore.New(memstore.Options{})
	key := httplimit.Route()
	for name, p := range map[string]httplimit.Policy{
		"bad name":    {Name: "a b", Limit: sluice.PerSecond(1), Key: key},
		"bad limit":   {Name: "a", Limit: sluice.Limit{Rate: 0, Period: time.Second}, Key: key},
		"no key":      {Name: "a", Limit: sluice.PerSecond(1)},
		"bad pattern": {Name: "a", Pattern: "GET /x/{", Limit: sluice.PerSecond(1), Key: key},
		"cost":        {Name: "a", Limit: sluice.PerSecond(1), Key: key, Cost: 5},
	} {
		if _, err := httplimit.New(httplimit.Options{Store: store, Policies: []httplimit.Policy{p}}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// An identity past the key limit is a 400, never a way around the limit.
func TestOversizedIdentityIsRefused(t *testing.T) {
	srv := server(t, httplimit.Options{Store: memstore.New(memstore.Options{}), Policies: []httplimit.Policy{
		{Name: "k", Limit: sluice.PerMinute(1), Key: httplimit.APIKey("X-API-Key")},
	}})
	huge := strings.Repeat("k", sluice.MaxIdentityLen+1)
	for range 3 {
		if code := get(t, srv.URL, "X-API-Key", huge).StatusCode; code != 400 {
			t.Fatalf("oversized API key: %d, want 400", code)
		}
	}
	// The limit is the client's identity's own length, whatever the
	// policy's name adds to the key.
	for range 2 {
		if code := get(t, srv.URL, "X-API-Key", huge[1:]).StatusCode; code != 200 && code != 429 {
			t.Fatalf("an API key of exactly %d bytes: %d", sluice.MaxIdentityLen, code)
		}
	}
}

// Limits chosen per request (an override, a plan) are the ones the
// headers report: X-RateLimit-Limit and RateLimit-Policy's quota and
// window.
func TestHeadersReportTheChosenLimits(t *testing.T) {
	vip := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 7, Period: time.Minute}
	srv := server(t, httplimit.Options{Store: memstore.New(memstore.Options{}), Policies: []httplimit.Policy{{
		Name: "api", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Hour}, Key: httplimit.APIKey("X-Key"),
		Limits: func(_ *http.Request, identity string) []sluice.Limit {
			if identity == "vip" {
				return []sluice.Limit{vip}
			}
			return nil
		},
	}}})
	for _, tc := range []struct{ key, limit, policy string }{
		{"vip", "7", `"api";q=7;w=60`},
		{"someone", "3", `"api";q=3;w=3600`},
	} {
		resp := get(t, srv.URL+"/", "X-Key", tc.key)
		if got := resp.Header.Get("X-RateLimit-Limit"); got != tc.limit {
			t.Errorf("%s: X-RateLimit-Limit %q, want %q", tc.key, got, tc.limit)
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != tc.policy {
			t.Errorf("%s: RateLimit-Policy %q, want %q", tc.key, got, tc.policy)
		}
	}
}

// A response's header map may outlive its request (a logger keeps it, a
// recorder holds it): the rate header values set in it stay what they
// were set to while later requests set theirs, across every buffer the
// middleware fills and replaces.
func TestHeaderValuesOutliveTheirRequest(t *testing.T) {
	const rate = 5000
	// The store's clock stands still, so no window turns over mid-test.
	at := time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC)
	store := memstore.New(memstore.Options{Clock: func() time.Time { return at }})
	m, err := httplimit.New(httplimit.Options{Store: store, Policies: []httplimit.Policy{
		{Name: "api", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: rate, Period: time.Hour}, Key: httplimit.APIKey("X-Key")},
		{Name: "tenant", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2 * rate, Period: time.Hour}, Key: httplimit.APIKey("X-Key"),
			Limits: func(_ *http.Request, identity string) []sluice.Limit {
				if identity == "k1" {
					return []sluice.Limit{{Algorithm: sluice.FixedWindow, Rate: 3 * rate, Period: time.Hour}}
				}
				return nil
			}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(ok))
	type sent struct {
		h    http.Header
		key  string
		used int
	}
	var all []sent
	used := map[string]int{}
	for i := range 2000 {
		key := fmt.Sprintf("k%d", i%7)
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, w.Code)
		}
		used[key]++
		all = append(all, sent{w.Header(), key, used[key]})
	}
	for i, s := range all {
		tenant := 2 * rate
		if s.key == "k1" {
			tenant = 3 * rate
		}
		want := map[string]string{
			"X-Ratelimit-Remaining": strconv.Itoa(rate - s.used), // api is the closest
			"Ratelimit":             fmt.Sprintf(`"api";r=%d;t=`, rate-s.used),
			"Ratelimit-Policy":      fmt.Sprintf(`"api";q=%d;w=3600, "tenant";q=%d;w=3600`, rate, tenant),
		}
		for k, v := range want {
			if got := s.h.Get(k); !strings.HasPrefix(got, v) {
				t.Fatalf("request %d (%s, use %d): %s = %q, want %q", i, s.key, s.used, k, got, v)
			}
		}
		if got := s.h.Get("Ratelimit"); !strings.Contains(got, fmt.Sprintf(`"tenant";r=%d;t=`, tenant-s.used)) {
			t.Fatalf("request %d (%s, use %d): RateLimit = %q", i, s.key, s.used, got)
		}
	}
}
