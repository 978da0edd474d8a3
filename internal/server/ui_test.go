package server

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
)

// startUI starts a server with the admin listener (token s3cret) and the
// config lines given, and returns it and the admin listener's base URL.
func startUI(t testing.TB, policies string) (*running, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(path, []byte("listeners: {drain: 0s}\nadmin: {token: s3cret}\n"+policies), 0o644)
	buf := &logbuf.Buffer{}
	s, err := New(Options{Config: path, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(t.Context()) })
	return &running{Server: s, log: buf, base: "http://" + s.Addrs().HTTP}, "http://" + s.Addrs().Admin
}

// browser is an HTTP client with cookies that does not follow redirects.
func browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func fetch(t testing.TB, c *http.Client, method, u string, form url.Values) (int, string, http.Header) {
	t.Helper()
	var resp *http.Response
	var err error
	if method == "POST" {
		resp, err = c.PostForm(u, form)
	} else {
		resp, err = c.Get(u)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// The page as a user meets it: without the cookie nothing but the login;
// a wrong token refused; the right one once, then the overview with the
// policies; denied keys appear, escaped; the inspector peeks and, with the
// confirmation and the session's CSRF token, resets; logout ends it.
func TestStatusPage(t *testing.T) {
	redistest.HourAhead()
	r, admin := startUI(t, "policies: [{name: auth, limit: fixed_window 2/1h}, {name: orders, limit: 100/1m}]\n")
	b := browser()
	for _, path := range []string{"/ui/", "/ui/policy/auth", "/ui/sim", "/ui/static/style.css"} {
		code, body, h := fetch(t, b, "GET", admin+path, nil)
		if strings.Contains(body, "auth") || strings.Contains(body, "orders") {
			t.Fatalf("%s without a session shows a policy name", path)
		}
		if path == "/ui/static/style.css" {
			continue
		}
		if code != http.StatusSeeOther || h.Get("Location") != "/ui/login" {
			t.Fatalf("%s without a session: %d %q", path, code, h.Get("Location"))
		}
	}
	if _, body, _ := fetch(t, b, "GET", admin+"/ui/login", nil); strings.Contains(body, "orders") || strings.Contains(body, "auth") {
		t.Fatal("the login page shows a policy name")
	}
	if code, _, _ := fetch(t, b, "POST", admin+"/ui/login", url.Values{"token": {"guess"}}); code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", code)
	}
	code, _, h := fetch(t, b, "POST", admin+"/ui/login", url.Values{"token": {"s3cret"}})
	if code != http.StatusSeeOther || h.Get("Location") != "/ui/" || !strings.Contains(h.Get("Set-Cookie"), "HttpOnly") || !strings.Contains(h.Get("Set-Cookie"), "SameSite=Strict") {
		t.Fatalf("login: %d %v", code, h)
	}
	// Traffic: a key that is also markup.
	evil := "<script>alert(1)</script>"
	for range 4 {
		r.check(t, "auth", evil)
	}
	_, body, _ := fetch(t, b, "GET", admin+"/ui/", nil)
	for _, want := range []string{`href="/ui/policy/auth"`, "fixed_window 2/h", `href="/ui/policy/orders"`, "<svg"} {
		if !strings.Contains(body, want) {
			t.Fatalf("the overview lacks %q:\n%s", want, body)
		}
	}
	_, body, _ = fetch(t, b, "GET", admin+"/ui/policy/auth", nil)
	if strings.Contains(body, evil) || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") || !strings.Contains(body, "2–2") {
		t.Fatalf("the denied key is missing or not escaped:\n%s", body)
	}
	if code, _, _ := fetch(t, b, "GET", admin+"/ui/policy/nope", nil); code != http.StatusNotFound {
		t.Fatalf("an unknown policy: %d", code)
	}
	_, body, _ = fetch(t, b, "GET", admin+"/ui/policy/auth?key="+url.QueryEscape(evil), nil)
	m := csrfField.FindStringSubmatch(body)
	if m == nil || !strings.Contains(body, "<td>false</td>") {
		t.Fatalf("the inspector: %s", body)
	}
	if code, _, _ := fetch(t, b, "POST", admin+"/ui/reset", url.Values{"policy": {"auth"}, "key": {evil}, "confirm": {"yes"}}); code != http.StatusForbidden {
		t.Fatalf("a reset without the CSRF token: %d", code)
	}
	if code, _, _ := fetch(t, b, "POST", admin+"/ui/reset", url.Values{"csrf": {m[1]}, "policy": {"auth"}, "key": {evil}, "confirm": {"yes"}}); code != http.StatusSeeOther {
		t.Fatalf("reset: %d", code)
	}
	if res, _ := r.check(t, "auth", evil); !res.Allowed {
		t.Fatal("the key is still limited after its reset")
	}
	if !strings.Contains(r.log.String(), "ui: key reset") {
		t.Fatal("the reset is not in the log")
	}
	// The simulator: its traffic is one of three, and a bad limit is said.
	_, body, _ = fetch(t, b, "GET", admin+"/ui/sim?traffic="+url.QueryEscape(evil), nil)
	if strings.Contains(body, evil) || !strings.Contains(body, "want one of boundary, bursty or zipf") {
		t.Fatalf("the simulator with an unknown traffic: %s", body)
	}
	_, body, _ = fetch(t, b, "GET", admin+"/ui/sim?traffic=bursty&limit=ten", nil)
	if !strings.Contains(body, "ten") || strings.Contains(body, "<svg") {
		t.Fatalf("the simulator with a bad limit: %s", body)
	}
	_, body, _ = fetch(t, b, "GET", admin+"/ui/sim?traffic=boundary&limit=10/1s&algorithms=fixed_window", nil)
	if !strings.Contains(body, "<svg") || !strings.Contains(body, "fixed_window") {
		t.Fatalf("the simulator: %s", body)
	}
	fetch(t, b, "POST", admin+"/ui/logout", url.Values{"csrf": {m[1]}})
	if code, _, _ := fetch(t, b, "GET", admin+"/ui/", nil); code != http.StatusSeeOther {
		t.Fatalf("after logout: %d", code)
	}
}

// The overview with 100 policies and 10k distinct denied keys lists
// every policy. How long it takes is BenchmarkOverviewWithManyPolicies'.
func TestOverviewWithManyPolicies(t *testing.T) {
	b, admin := manyPolicies(t)
	if code, body, _ := fetch(t, b, "GET", admin+"/ui/", nil); code != 200 || strings.Count(body, `href="/ui/policy/p`) != 100 {
		t.Fatalf("overview: %d, %d policies listed; want 200 and 100", code, strings.Count(body, `href="/ui/policy/p`))
	}
}

// BenchmarkOverviewWithManyPolicies renders the overview of 100 policies
// and 10k distinct denied keys, over HTTP with a session:
//
//	go test -run '^$' -bench OverviewWithManyPolicies -benchtime 20x ./internal/server
func BenchmarkOverviewWithManyPolicies(b *testing.B) {
	c, admin := manyPolicies(b)
	for b.Loop() {
		if code, _, _ := fetch(b, c, "GET", admin+"/ui/", nil); code != 200 {
			b.Fatalf("overview: %d", code)
		}
	}
}

// manyPolicies starts a server of 100 policies that has denied 10k
// distinct keys, and returns a browser logged in to its status page and
// the page's base URL.
func manyPolicies(t testing.TB) (*http.Client, string) {
	t.Helper()
	redistest.HourAhead()
	var p strings.Builder
	p.WriteString("policies:\n")
	for i := range 100 {
		fmt.Fprintf(&p, "  - {name: p%d, limit: fixed_window 1/1h}\n", i)
	}
	r, admin := startUI(t, p.String())
	for i := range 10_000 {
		r.Server.decide(t.Context(), subject{name: fmt.Sprintf("p%d", i%100)}, fmt.Sprintf("p%d\x00k%d", i%100, i), r.Server.state().cfg.Policies[i%100].Limits, 2, false, 0)
	}
	b := browser()
	fetch(t, b, "POST", admin+"/ui/login", url.Values{"token": {"s3cret"}})
	return b, admin
}

// Wrong tokens are throttled per address: after adminFailures of them in a
// minute, even the right one is refused until the oldest is a minute old, and each
// refusal is logged.
func TestStatusPageLoginThrottled(t *testing.T) {
	redistest.HourAhead()
	r, admin := startUI(t, "policies:\n  - {name: auth, limit: fixed_window 2/h}\n")
	b := browser()
	for i := range adminFailures {
		if code, _, _ := fetch(t, b, "POST", admin+"/ui/login", url.Values{"token": {fmt.Sprint("guess", i)}}); code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d", i, code)
		}
	}
	code, body, h := fetch(t, b, "POST", admin+"/ui/login", url.Values{"token": {"s3cret"}})
	if code != http.StatusTooManyRequests || h.Get("Set-Cookie") != "" || strings.Contains(body, "auth") {
		t.Fatalf("the right token after %d wrong ones: %d %v", adminFailures, code, h)
	}
	if n := strings.Count(r.log.String(), "ui: refused: wrong admin token"); n != adminFailures {
		t.Fatalf("%d wrong tokens logged; want %d", n, adminFailures)
	}
}

// ui.top_keys: 0 keeps no keys: the policy's page says so and shows none.
func TestStatusPageKeysOff(t *testing.T) {
	redistest.HourAhead()
	r, admin := startUI(t, "ui: {top_keys: 0}\npolicies:\n  - {name: auth, limit: fixed_window 1/h}\n")
	for range 3 {
		r.check(t, "auth", "alice@example.com")
	}
	b := browser()
	fetch(t, b, "POST", admin+"/ui/login", url.Values{"token": {"s3cret"}})
	_, body, _ := fetch(t, b, "GET", admin+"/ui/policy/auth", nil)
	if strings.Contains(body, "alice@example.com") || !strings.Contains(body, "top_keys") {
		t.Fatalf("with top_keys 0: %s", body)
	}
}

// A check another front door decided (the proxy's) counts as the
// server's own: in sluice_checks_total under its policy, and on the status
// page with its denied client among the top keys.
func TestCountCheckFromAnotherFrontDoor(t *testing.T) {
	redistest.HourAhead()
	r, admin := startUI(t, "policies: [{name: edge, limit: fixed_window 2/1h}]\n")
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Hour}
	for i, o := range []guard.Outcome{guard.Allowed, guard.Allowed, guard.Denied, guard.Denied} {
		d := sluice.Decision{Allowed: o == guard.Allowed, Limit: limit, Remaining: int64(max(1-i, 0))}
		r.CountCheck("edge", o, "203.0.113.9", &d, time.Now())
	}
	m := r.metrics(t)
	for _, want := range []string{
		`sluice_checks_total{domain="",policy="edge",result="allowed"} 2`,
		`sluice_checks_total{domain="",policy="edge",result="denied"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Fatalf("no %s in /metrics", want)
		}
	}
	b := browser()
	fetch(t, b, "POST", admin+"/ui/login", url.Values{"token": {"s3cret"}})
	if _, body, _ := fetch(t, b, "GET", admin+"/ui/policy/edge", nil); !strings.Contains(body, "203.0.113.9") {
		t.Fatalf("the denied client is not on the policy's page:\n%s", body)
	}
}

// A policy charged by its answer shows what it estimated and what it
// charged on its page, and in /metrics: what the proxy's settlements
// counted (CountSettled), as an operator tunes cost.estimate by them.
func TestStatusPageShowsEstimatesAndCharges(t *testing.T) {
	r, admin := startUI(t, "policies: [{name: tokens, limit: 100000/1m, cost: {estimate: 500, from: \"json:usage.total_tokens\"}}]\n")
	r.CountSettled("tokens", 500, 3000, false)
	r.CountSettled("tokens", 500, 2000, false)
	r.CountSettled("tokens", 500, 500, true)
	m := r.metrics(t)
	for _, want := range []string{`sluice_cost_estimated_total{policy="tokens"} 1500`, `sluice_cost_charged_total{policy="tokens"} 5500`, `sluice_cost_unread_total{policy="tokens"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("no %s in /metrics", want)
		}
	}
	b := browser()
	fetch(t, b, "POST", admin+"/ui/login", url.Values{"token": {"s3cret"}})
	_, body, _ := fetch(t, b, "GET", admin+"/ui/policy/tokens", nil)
	if !strings.Contains(body, `<table id="settled">`) || !strings.Contains(body, "<td>3</td><td>1500</td><td>5500</td><td>1</td>") {
		t.Fatalf("the policy's page lacks its settlements:\n%s", body)
	}
}
