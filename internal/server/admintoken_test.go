package server

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/rotated"
)

// rewrite replaces the config file of r and reloads it.
func rewrite(t *testing.T, r *running, yaml string) {
	t.Helper()
	if err := os.WriteFile(r.opts.Config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
}

// A session belongs to the token it was made with: rotating the token
// ends it, and removing the token closes the admin listener, after which
// nothing (an empty token least of all) logs in; setting one again opens it.
func TestAdminSessionsBelongToTheToken(t *testing.T) {
	r, admin := startUI(t, "policies: [{name: p, limit: 10/1h}]\n")
	b := browser()
	if code, _, _ := fetch(t, b, "POST", admin+"/ui/login", url.Values{"token": {"s3cret"}}); code != http.StatusSeeOther {
		t.Fatalf("login: %d", code)
	}
	if code, _, _ := fetch(t, b, "GET", admin+"/ui/", nil); code != 200 {
		t.Fatalf("the status page with a session: %d", code)
	}
	rewrite(t, r, "listeners: {drain: 0s}\nadmin: {token: n3w}\npolicies: [{name: p, limit: 10/1h}]\n")
	if code, _, h := fetch(t, b, "GET", admin+"/ui/", nil); code != http.StatusSeeOther || h.Get("Location") != "/ui/login" {
		t.Fatalf("the old session after the token changed: %d %s; want a redirect to the login", code, h.Get("Location"))
	}
	if code, _ := bearer(t, admin, "s3cret"); code != http.StatusUnauthorized {
		t.Fatalf("the old token on the admin API: %d", code)
	}
	if code, _ := bearer(t, admin, "n3w"); code != 200 {
		t.Fatalf("the new token on the admin API: %d", code)
	}
	fetch(t, b, "POST", admin+"/ui/login", url.Values{"token": {"n3w"}})

	rewrite(t, r, "listeners: {drain: 0s}\npolicies: [{name: p, limit: 10/1h}]\n")
	if c, err := net.Dial("tcp", strings.TrimPrefix(admin, "http://")); err == nil {
		c.Close()
		t.Fatal("the admin listener still accepts connections with no token")
	}
	if r.Addrs().Admin != "" {
		t.Fatalf("Addrs().Admin = %q with no token", r.Addrs().Admin)
	}
	if !strings.Contains(r.log.String(), "admin token was removed") {
		t.Fatalf("no log line for the closing:\n%s", r.log.String())
	}

	rewrite(t, r, "listeners: {drain: 0s}\nadmin: {token: again}\npolicies: [{name: p, limit: 10/1h}]\n")
	admin = "http://" + r.Addrs().Admin
	if code, _ := bearer(t, admin, "again"); code != 200 {
		t.Fatalf("the admin API after a token is set again: %d", code)
	}
	if code, _, _ := fetch(t, browser(), "POST", admin+"/ui/login", url.Values{"token": {""}}); code != http.StatusUnauthorized {
		t.Fatalf("an empty token logs in: %d", code)
	}
}

// The handler itself refuses every credential while no token is set,
// the empty one included (the moment between a reload and the close).
func TestAdminHandlerWithoutToken(t *testing.T) {
	r, _ := startUI(t, "policies: [{name: p, limit: 10/1h}]\n")
	h := r.adminHandler()
	rewrite(t, r, "listeners: {drain: 0s}\npolicies: [{name: p, limit: 10/1h}]\n")
	get := httptest.NewRequest("GET", "/admin/config", nil)
	get.Header.Set("Authorization", "Bearer ")
	login := httptest.NewRequest("POST", "/ui/login", strings.NewReader("token="))
	login.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, req := range []*http.Request{get, login} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusNotFound {
			t.Errorf("%s %s with no token set: %d; want 404", req.Method, req.URL.Path, w.Code)
		}
	}
}

// The browser's favicon requests, and any request without a credential,
// never count as wrong tokens: after 50 page views the right token works.
func TestFaviconDoesNotLockOut(t *testing.T) {
	_, admin := startUI(t, "policies: [{name: p, limit: 10/1h}]\n")
	for range 50 {
		resp, err := http.Get(admin + "/favicon.ico")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("/favicon.ico: %d", resp.StatusCode)
		}
		resp, err = http.Get(admin + "/admin/config")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("/admin/config without a token: %d", resp.StatusCode)
		}
	}
	if code, _ := bearer(t, admin, "s3cret"); code != 200 {
		t.Fatalf("the right token after 100 requests without one: %d", code)
	}
	for range adminFailures {
		bearer(t, admin, "wrong")
	}
	if code, _ := bearer(t, admin, "s3cret"); code != http.StatusTooManyRequests {
		t.Fatalf("after %d wrong tokens: %d; want 429", adminFailures, code)
	}
}

func bearer(t *testing.T, admin, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", admin+"/admin/config", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, ""
}

// The debug listener warns when it is reachable beyond this host, and
// never serves the command line (which may hold secrets).
func TestDebugListener(t *testing.T) {
	buf := &logbuf.Buffer{}
	s, err := New(Options{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DebugAddr: "0.0.0.0:0",
		Logger: slog.New(slog.NewTextHandler(buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(t.Context()) })
	if !strings.Contains(buf.String(), "debug listener") {
		t.Fatalf("no warning for a debug listener on every interface:\n%s", buf.String())
	}
	_, port, _ := net.SplitHostPort(s.Addrs().Debug)
	resp, err := http.Get("http://127.0.0.1:" + port + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/debug/pprof/cmdline: %d; want 404", resp.StatusCode)
	}
}

// /readyz on the public listener says the store is unreachable without
// its address or error text; the admin listener's /admin/readyz has both.
func TestReadyzHidesDetails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens here now
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(path, []byte("listeners: {drain: 0s}\nadmin: {token: s3cret}\nstore: {timeout: 200ms}\npolicies: [{name: p, limit: 10/1h}]\n"), 0o644)
	s, err := New(Options{Config: path, RedisURL: "redis://" + addr, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(t.Context()) })
	resp, err := http.Get("http://" + s.Addrs().HTTP + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_, port, _ := net.SplitHostPort(addr)
	if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(body), port) || strings.Contains(string(body), "refused") {
		t.Fatalf("public /readyz: %d %q; want 503 without the address or the error", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("GET", "http://"+s.Addrs().Admin+"/admin/readyz", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), port) {
		t.Fatalf("/admin/readyz: %d %q; want 503 with the details", resp.StatusCode, body)
	}
}

// A token given as a file (-admin-token-file, a mounted Secret) is read
// again at each authentication: once rotated, the new token works and the
// old one no longer does, and a session made with the old one ends, with
// no restart. A file removed or emptied meanwhile keeps the last token,
// with one warning and one line when it can be read again.
func TestAdminTokenFileRotated(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	write := func(token string) {
		t.Helper()
		if err := os.WriteFile(file+".new", []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".new", file); err != nil { // as a mounted Secret is swapped
			t.Fatal(err)
		}
	}
	write("first\n")
	buf := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(buf, nil))
	tokens, err := rotated.Open(file, "admin token file", rotated.Text, log)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(path, []byte("listeners: {drain: 0s}\nadmin: {token: from-the-config}\npolicies: [{name: p, limit: 10/1h}]\n"), 0o644)
	s, err := New(Options{Config: path, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", AdminTokenFile: tokens, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(t.Context()) })
	admin := "http://" + s.Addrs().Admin
	for token, want := range map[string]int{"first": 200, "from-the-config": 401} {
		if code, _ := bearer(t, admin, token); code != want {
			t.Fatalf("token %q before the rotation: %d; want %d", token, code, want)
		}
	}
	b := browser()
	if code, _, _ := fetch(t, b, "POST", admin+"/ui/login", url.Values{"token": {"first"}}); code != http.StatusSeeOther {
		t.Fatalf("login: %d", code)
	}

	write("second\n")
	for token, want := range map[string]int{"second": 200, "first": 401} {
		if code, _ := bearer(t, admin, token); code != want {
			t.Fatalf("token %q after the rotation: %d; want %d", token, code, want)
		}
	}
	if code, _, h := fetch(t, b, "GET", admin+"/ui/", nil); code != http.StatusSeeOther || h.Get("Location") != "/ui/login" {
		t.Fatalf("the session of the old token after the rotation: %d %s; want a redirect to the login", code, h.Get("Location"))
	}

	write("")
	if code, _ := bearer(t, admin, "second"); code != 200 {
		t.Fatalf("the last token, the file emptied: %d", code)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if code, _ := bearer(t, admin, "second"); code != 200 {
		t.Fatalf("the last token, the file removed: %d", code)
	}
	write("third")
	if code, _ := bearer(t, admin, "third"); code != 200 {
		t.Fatalf("the token written again: %d", code)
	}
	// Counted too: at least the two requests that read it emptied and gone.
	resp, err := http.Get("http://" + s.Addrs().HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var failed float64
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "sluice_admin_token_file_errors_total "); ok {
			failed, _ = strconv.ParseFloat(v, 64)
		}
	}
	if failed < 2 {
		t.Fatalf("sluice_admin_token_file_errors_total = %v; want at least 2", failed)
	}
	if log := buf.String(); strings.Count(log, "admin token file could not be read again") != 1 || strings.Count(log, "admin token file read again") != 1 {
		t.Fatalf("want one warning of the unreadable file and one line of its end; logged:\n%s", log)
	}
	if strings.Contains(buf.String(), "second") || strings.Contains(buf.String(), "third") {
		t.Fatalf("a token was logged:\n%s", buf.String())
	}
}
