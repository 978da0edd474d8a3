package proxy

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
)

// rawGet sends path exactly as written (no client-side cleaning or
// escaping) with the given Host and headers, and returns the status and
// body.
func rawGet(t testing.TB, addr, path, host string, header ...string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", path, host)
	for i := 0; i+1 < len(header); i += 2 {
		req += header[i] + ": " + header[i+1] + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func addrOf(t testing.TB, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// files writes the tree the path tests serve: one file under /api/ that
// policies guard, and files elsewhere that they do not.
func files(t testing.TB) string {
	dir := t.TempDir()
	for name, body := range map[string]string{"api/items/1": "SECRET-API", "items/1": "plain", "x/1": "plain", "pub/api/1": "plain"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Every encoded form of a guarded path is limited as the path itself:
// the upstream (net/http's file server, which decodes and resolves what
// it is sent) serves the file 5 times of 20 at most, or refuses the form.
func TestEncodedPathsAreLimited(t *testing.T) {
	redistest.HourAhead()
	root := files(t)
	for _, path := range []string{"/api/items/1", "/x/%2e%2e/api/items/1", "/api%2fitems/1", "/%2e/api/items/1",
		"/api/items/%2e/1", "/api//items/1", "/x/../api/items/1", "/%61pi/items/1", "/api/items/1%2f", "/api%5citems/1"} {
		srv := gatewayTo(t, `
policies:
  - {name: api, limit: fixed_window 5/1h, key: client_ip, match: "/api/"}
`, memstore.New(memstore.Options{}), http.FileServer(http.Dir(root)), Deps{})
		served := 0
		for range 20 {
			if _, body := rawGet(t, addrOf(t, srv.URL), path, "example.com"); body == "SECRET-API" {
				served++
			}
		}
		if served > 5 {
			t.Errorf("%s: served %d of 20 on a limit of 5", path, served)
		}
	}
}

// A trailing slash or an encoded dot does not step around an exact
// pattern: the upstream here serves every path, as an application that
// ignores trailing slashes does.
func TestExactPatternVariantsAreLimited(t *testing.T) {
	redistest.HourAhead()
	for _, path := range []string{"/api/items/1/", "/api/items/%2e/1", "/api/items/1/.", "/api/items/./1/"} {
		srv := gateway(t, `
policies:
  - {name: item, limit: fixed_window 5/1h, key: client_ip, match: "GET /api/items/{id}"}
`, memstore.New(memstore.Options{}))
		served := 0
		for range 20 {
			if code, _ := rawGet(t, addrOf(t, srv.URL), path, "example.com"); code == 200 {
				served++
			}
		}
		if served != 5 {
			t.Errorf("%s: served %d of 20 on a limit of 5", path, served)
		}
	}
}

// Hosts match as DNS has them: any case, with or without the trailing
// dot, share the policy and its counter; the upstream is sent the host
// lower-case.
func TestHostVariantsAreLimited(t *testing.T) {
	redistest.HourAhead()
	var sent []string
	srv := gatewayTo(t, `
policies:
  - {name: admin, limit: fixed_window 3/1h, key: client_ip, match: "admin.example.com/"}
`, memstore.New(memstore.Options{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent = append(sent, r.Host) }), Deps{})
	served := 0
	for _, host := range []string{"ADMIN.EXAMPLE.COM", "Admin.Example.Com", "admin.example.com.", "admin.example.com:80", "Admin.Example.Com.:8080"} {
		for range 10 {
			if code, _ := rawGet(t, addrOf(t, srv.URL), "/", host); code == 200 {
				served++
			}
		}
	}
	if served != 3 {
		t.Fatalf("served %d of 50 on a limit of 3", served)
	}
	for _, h := range sent {
		if h != strings.ToLower(h) || strings.Contains(h, ".:") || strings.HasSuffix(h, ".") {
			t.Errorf("the upstream was sent Host %q", h)
		}
	}
}

// A header a policy keys on, sent twice, is refused: the proxy would
// count one value while the upstream might read the other.
func TestDuplicateKeyHeaderRefused(t *testing.T) {
	redistest.HourAhead()
	srv := gateway(t, `
policies:
  - {name: api, limit: fixed_window 3/1h, key: "header:X-API-Key", match: "/"}
`, memstore.New(memstore.Options{}))
	served := 0
	for range 10 {
		code, _ := rawGet(t, addrOf(t, srv.URL), "/", "example.com", "X-API-Key", "a", "X-Api-Key", "b")
		switch code {
		case 200:
			served++
		case 400:
		default:
			t.Fatalf("status %d", code)
		}
	}
	if served != 0 {
		t.Fatalf("two X-API-Key headers: served %d", served)
	}
	if code, _ := rawGet(t, addrOf(t, srv.URL), "/", "example.com", "X-API-Key", "a"); code != 200 {
		t.Fatalf("one X-API-Key header: %d", code)
	}
}

// pathSegments are what generated paths are made of: the guarded names,
// dots and slashes in every encoding, and characters upstreams treat
// specially.
var pathSegments = []string{"api", "API", "%61pi", "items", "1", "x", "pub", ".", "..", "%2e", "%2E", "%2e%2e", ".%2e",
	"%2f", "%2F", "api%2fitems", "", "%00", "%5c", "\\", "items;x", "%252e", "%", "1%3f", "a b"}

func randomPath(rng *rand.Rand) string {
	n := 1 + rng.IntN(6)
	var b strings.Builder
	for range n {
		b.WriteString("/")
		b.WriteString(pathSegments[rng.IntN(len(pathSegments))])
	}
	if rng.IntN(4) == 0 {
		b.WriteString("/")
	}
	return b.String()
}

// checkServedIsLimited sends path through the proxy in front of an
// upstream serving files(): whatever the upstream resolves it to, if that
// is the guarded file, the api policy limited the request.
func checkServedIsLimited(t testing.TB, proxyAddr, path string) {
	t.Helper()
	if strings.ContainsAny(path, " ") {
		return // not a request line
	}
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return // refused by the server before the proxy
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if string(body) == "SECRET-API" && resp.Header.Get("X-RateLimit-Limit") == "" {
		t.Errorf("%s: the upstream served /api/items/1 and no policy limited it", path)
	}
}

const servedConfig = `
policies:
  - {name: api, limit: fixed_window 1000000000/1h, key: client_ip, match: "/api/"}
`

// FuzzPathMatchesUpstream: for any path, what net/http's file server
// resolves it to is guarded by the policy that guards that file.
func FuzzPathMatchesUpstream(f *testing.F) {
	for _, p := range []string{"/api/items/1", "/x/%2e%2e/api/items/1", "/api%2fitems/1", "/%2e/api/items/1", "/api/items/%2e/1",
		"/x/../api/items/1", "/%61pi/items/1", "/pub/%2e%2e/api/./items/1", "/api%5citems/1"} {
		f.Add(p)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		f.Add(randomPath(rng))
	}
	srv := gatewayTo(f, servedConfig, memstore.New(memstore.Options{}), http.FileServer(http.Dir(files(f))), Deps{})
	addr := addrOf(f, srv.URL)
	f.Fuzz(func(t *testing.T, path string) {
		if strings.ContainsAny(path, "\r\n\x00") {
			return
		}
		checkServedIsLimited(t, addr, path)
	})
}

// The same against python3's http.server, an upstream that decodes and
// resolves paths by rules of its own.
func TestPathMatchesPythonUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("a Python upstream")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not on PATH")
	}
	root := files(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(py, "-m", "http.server", "--bind", "127.0.0.1", "--directory", root, fmt.Sprint(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	upstream := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if c, err := net.Dial("tcp", upstream); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("python3 -m http.server did not listen within 30 s")
		}
		time.Sleep(20 * time.Millisecond) // polling for the listener, not timing
	}
	if _, body := rawGet(t, upstream, "/x/%2e%2e/api/items/1", "example.com"); body != "SECRET-API" {
		t.Fatalf("python's http.server does not resolve an encoded dot segment here (%q): the test proves nothing", body)
	}
	u, _ := url.Parse("http://" + upstream)
	srv := gatewayURL(t, servedConfig, memstore.New(memstore.Options{}), u, Deps{})
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1500 {
		checkServedIsLimited(t, addrOf(t, srv.URL), randomPath(rng))
	}
}

// Path parameters: policies match the path as servlet containers read it
// (";…" dropped from each segment before decoding), the upstream is sent
// the parameters, and a path whose readings disagree in more than a
// segment's text is refused.
func TestPathParameters(t *testing.T) {
	for _, c := range []struct{ path, fwd, match string }{
		{"/api;jsessionid=x/items/1", "/api;jsessionid=x/items/1", "/api/items/1"},
		{"/api/items/1;v=2", "/api/items/1;v=2", "/api/items/1"},
		{"/api/items;a;b/1/", "/api/items;a;b/1/", "/api/items/1"},
		{"/x;a/../api/items/1", "/api/items/1", "/api/items/1"},
		{"/%61pi;x=%20/items", "/api;x= /items", "/api/items"},
		{"/api/items;x=a%3bb", "/api/items;x=a;b", "/api/items"},
		{"/api/..;/admin", "", ""},
		{"/api/.;x/admin", "", ""},
		{"/api/%2e%2e;x/admin", "", ""},
		{"/;x/admin", "", ""},
		{"/api//;x/admin", "", ""},
		{"/api%3bx/items/1", "", ""},
		{"/api%3Bx;y/items/1", "", ""},
		{"/api;x%2fy/items", "", ""},
		{"/api;x%00/items", "", ""},
	} {
		p, err := canonicalPath(c.path)
		if c.fwd == "" {
			if err == nil {
				t.Errorf("%s: %q; want refused", c.path, p)
			}
			continue
		}
		if err != nil || p != c.fwd || matchPath(p) != c.match {
			t.Errorf("%s: sent %q, matched %q, %v; want sent %q, matched %q", c.path, p, matchPath(p), err, c.fwd, c.match)
		}
	}
}

// Through the proxy, "/api;jsessionid=x/items/1" is limited by the /api/
// policy, 3 of 10 reach the upstream, and they reach it with their
// parameter.
func TestPathParametersLimitedInProxy(t *testing.T) {
	redistest.HourAhead()
	var sent []string
	srv := gatewayTo(t, `
policies:
  - {name: api, limit: fixed_window 3/1h, key: client_ip, match: "/api/"}
`, memstore.New(memstore.Options{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent = append(sent, r.RequestURI) }), Deps{})
	served := 0
	for range 10 {
		switch code, _ := rawGet(t, addrOf(t, srv.URL), "/api;jsessionid=x/items/1", "example.com"); code {
		case 200:
			served++
		case 429:
		default:
			t.Fatalf("status %d", code)
		}
	}
	if served != 3 {
		t.Fatalf("served %d of 10 on a limit of 3", served)
	}
	for _, u := range sent {
		if u != "/api;jsessionid=x/items/1" {
			t.Fatalf("the upstream was sent %q; want the path as the client sent it", u)
		}
	}
	if code, _ := rawGet(t, addrOf(t, srv.URL), "/api/..;/admin", "example.com"); code != 400 {
		t.Fatalf("/api/..;/admin: %d; want 400", code)
	}
}

// A client that names the key header in Connection has the reverse proxy
// strip it before the upstream: the policies must not key on it either,
// or a key made up at each request would never be limited while the
// upstream serves a request without one.
func TestConnectionNamedKeyHeaderNotKeyed(t *testing.T) {
	redistest.HourAhead()
	var keys []string
	srv := gatewayTo(t, `
policies:
  - {name: anon, limit: fixed_window 3/1h, key: "header:X-API-Key", match: "/anon/"}
`, memstore.New(memstore.Options{}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.Header.Get("X-API-Key"))
	}), Deps{})
	served := 0
	for i := range 8 {
		req, _ := http.NewRequest("GET", srv.URL+"/anon/x", nil)
		req.Header.Set("Connection", "keep-alive, X-API-Key")
		req.Header.Set("X-API-Key", fmt.Sprint("made-up-", i))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case 200:
			served++
		case 429:
		default:
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	// Limited as the upstream sees them: without a key, by the client's
	// address (missing: client_ip).
	if served != 3 {
		t.Fatalf("served %d of 8 made-up keys named in Connection on a limit of 3", served)
	}
	for _, k := range keys {
		if k != "" {
			t.Fatalf("the upstream was sent the key %q", k)
		}
	}
}
