//go:build e2e

package main_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lie is a request a client sends through a gateway to be limited as
// something it is not (or, honest, to be limited by nothing), and how
// many of 10 may reach the upstream.
type lie struct {
	name   string
	method string
	target string   // the request line's target, sent as written
	header []string // name, value, ...; a name may repeat
	// newSource sends each request from a new address: the client has
	// many, and only a key shared by all of them holds it.
	newSource bool
	// as is the path the request is to an upstream that reads its target
	// as a URL and its path as a servlet container does (readAs); at
	// least want and at most served of 10 reach the upstream as that path.
	as           string
	want, served int
}

// readAs is the path an upstream reads in target: the URL's path, without
// fragment and query (Werkzeug, gunicorn, Node's url.parse), and without
// each segment's parameters (Tomcat, Jetty, Undertow, Spring).
func readAs(target string) string {
	target, _, _ = strings.Cut(target, "#")
	target, _, _ = strings.Cut(target, "?")
	segs := strings.Split(target, "/")
	for i, seg := range segs {
		segs[i], _, _ = strings.Cut(seg, ";")
	}
	return strings.Join(segs, "/")
}

// The lies of each finding, each on a 3/1h policy of lyingConfig of its
// own client or key.
var (
	// The pair of headers the gateway does not set, naming another path
	// or method.
	pairLies = []lie{
		{name: "forwarded-uri", method: "GET", target: "/api/items/1", header: []string{"X-Forwarded-Uri", "/public", "X-Forwarded-Method", "GET"}, as: "/api/items/1", served: 3},
		{name: "forwarded-method", method: "POST", target: "/login", header: []string{"X-Forwarded-Method", "GET"}, as: "/login", served: 3},
		{name: "original-uri", method: "GET", target: "/api/items/1", header: []string{"X-Original-URI", "/public", "X-Original-Method", "GET"}, as: "/api/items/1", served: 3},
		// And the host, which a host pattern could match.
		{name: "forwarded-host", method: "GET", target: "/api/items/1", header: []string{"X-Forwarded-Host", "other.example"}, as: "/api/items/1", served: 3},
	}
	// A fragment, which nginx passes on as it came.
	fragmentLies = []lie{{name: "fragment", method: "POST", target: "/login#x", as: "/login", served: 3}}
	// A servlet container's path parameter.
	parameterLies = []lie{{name: "path-parameter", method: "GET", target: "/api;jsessionid=x/items/1", as: "/api/items/1", served: 3}}
	// The real key first, a new decoy second, from a new address each
	// time: the upstream reads the first.
	repeatedKeyLies = []lie{{name: "repeated-key", method: "GET", target: "/keyed/1", header: []string{"X-API-Key", "real", "X-API-Key", "decoy"}, newSource: true, as: "/keyed/1", served: 3}}
	// A request no policy's match names, under a config with a policy
	// without match: no limit applies, 5 of 5 pass.
	unmatchedLies = []lie{{name: "unmatched", method: "GET", target: "/home", as: "/home", served: 10, want: 10}}
)

// lyingConfig has the 3/1h policies of the lies, and one without match,
// meant for POST /v1/check, that no gateway request may be limited by.
const lyingConfig = `trusted_proxies: [127.0.0.1/32]
policies:
  - {name: api, limit: fixed_window 3/1h, key: client_ip, match: "/api/"}
  - {name: login, limit: fixed_window 3/1h, key: client_ip, match: "POST /login"}
  - {name: keyed, limit: fixed_window 3/1h, key: "header:X-API-Key", match: "/keyed/"}
`

// checksPolicy is a policy without match, for POST /v1/check callers.
const checksPolicy = "  - {name: checks, limit: fixed_window 1/1h, key: client_ip}\n"

// gatewayPair is the forward_auth.request_headers that names the pair
// each gateway's configuration on docs/gateways.md sets.
var gatewayPair = map[string]string{"nginx": "x-original", "caddy": "x-forwarded", "haproxy": "x-forwarded"}

// Each test below runs nginx, Caddy and HAProxy from Debian, configured
// exactly as docs/gateways.md says, in front of `sluice serve` on
// lyingConfig and an upstream, and has a client lie about its request:
// no more than its limit reaches the upstream as what it is.

// A client names another path or method in the pair of headers its
// gateway does not set; with forward_auth.request_headers and without.
func TestGatewaysReadOnlyTheGatewaysPair(t *testing.T) {
	holdsAgainst(t, pairLies, lyingConfig, true)
	holdsAgainstOn(t, []gateway{nginxUncleared}, pairLies, lyingConfig, false)
}

// nginxUncleared is nginx as docs/gateways.md configures it but for the
// lines that clear the pair it does not set: the client's X-Forwarded-*
// reach sluice, which refuses the check.
var nginxUncleared = gateway{"nginx-uncleared", "nginx", func(t *testing.T, dir string, addrs map[string]string) []string {
	args := gateways[0].setup(t, dir, addrs)
	file := filepath.Join(dir, "nginx.conf")
	conf, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(string(conf), "\n") {
		if !strings.Contains(line, `proxy_set_header X-Forwarded-Method ""`) && !strings.Contains(line, `proxy_set_header X-Forwarded-Uri ""`) {
			kept = append(kept, line)
		}
	}
	if len(kept) != strings.Count(string(conf), "\n")+1-2 {
		t.Fatal("docs/gateways.md's nginx configuration does not clear X-Forwarded-Method and X-Forwarded-Uri")
	}
	os.WriteFile(file, []byte(strings.Join(kept, "\n")), 0o644)
	return args
}}

// A client sends a fragment in its request line.
func TestGatewaysDropFragments(t *testing.T) {
	holdsAgainst(t, fragmentLies, lyingConfig, false)
}

// A client adds a path parameter that servlet containers drop.
func TestGatewaysReadPathParametersAsServlets(t *testing.T) {
	holdsAgainst(t, parameterLies, lyingConfig, false)
}

// A client sends its key header twice, the real key first.
func TestGatewaysRepeatedKeyHeader(t *testing.T) {
	holdsAgainst(t, repeatedKeyLies, lyingConfig, false)
}

// A request sluice cannot decide (its store down, the policy's fail_mode
// closed: sluice answers 503) is refused by the gateway, never let
// through: HAProxy's script answers 503, nginx 500, Caddy passes the 503.
func TestGatewaysRefuseWhatSluiceCannotDecide(t *testing.T) {
	holdsAgainst(t, []lie{{name: "store-down", method: "GET", target: "/closed", as: "/closed"}}, `trusted_proxies: [127.0.0.1/32]
store: {type: redis, url: "redis://127.0.0.1:1", timeout: 100ms}
policies:
  - {name: closed, limit: 3/1h, key: client_ip, match: "/closed", fail_mode: closed}
`, false)
}

// A policy without match limits no request through a gateway.
func TestGatewaysPolicyWithoutMatch(t *testing.T) {
	holdsAgainst(t, unmatchedLies, lyingConfig+checksPolicy, false)
}

// holdsAgainst runs ls through each gateway in front of sluice on config,
// and with pairs, again with the gateway's forward_auth.request_headers.
func holdsAgainst(t *testing.T, ls []lie, config string, pairs bool) {
	holdsAgainstOn(t, gateways, ls, config, pairs)
}

// holdsAgainstOn is holdsAgainst on gws.
func holdsAgainstOn(t *testing.T, gws []gateway, ls []lie, config string, pairs bool) {
	for _, gw := range gws {
		modes := []string{""}
		if pairs {
			modes = append(modes, gatewayPair[gw.name])
		}
		for _, pair := range modes {
			t.Run(gw.name+"/request_headers="+pair, func(t *testing.T) {
				bin, err := exec.LookPath(gw.bin)
				if err != nil {
					if os.Getenv("SLUICE_REQUIRE_GATEWAYS") == "1" {
						t.Fatalf("%s is not on PATH (SLUICE_REQUIRE_GATEWAYS=1)", gw.bin)
					}
					t.Skipf("%s is not on PATH", gw.bin)
				}
				cfg := config
				if pair != "" {
					cfg = "forward_auth: {request_headers: " + pair + "}\n" + config
				}
				testLyingClients(t, gw, bin, cfg, ls)
			})
		}
	}
}

// testLyingClients sends each of ls 10 times through gw in front of
// sluice on config and counts what reached the upstream as what.
func testLyingClients(t *testing.T, gw gateway, bin, config string, ls []lie) {
	var mu sync.Mutex
	reached := map[string][]string{} // by X-Lie: the targets the upstream was sent
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reached[r.Header.Get("X-Lie")] = append(reached[r.Header.Get("X-Lie")], r.RequestURI)
		mu.Unlock()
		io.WriteString(w, "up")
	}))
	defer up.Close()
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(file, []byte(config), 0o644)
	p := start(t, nil, "-config", file)
	listen := startGateway(t, gw, bin, p.http, strings.TrimPrefix(up.URL, "http://"))

	for i, l := range ls {
		var codes []int
		for j := range 10 {
			source := fmt.Sprintf("127.0.%d.1", 10+i) // a client of its own
			if l.newSource {
				source = fmt.Sprintf("127.0.%d.%d", 10+i, 1+j)
			}
			header := append([]string{"X-Lie", l.name}, l.header...)
			if l.newSource {
				header[len(header)-1] += fmt.Sprint(j) // a new decoy each time
			}
			codes = append(codes, rawRequest(t, source, listen, l.method, l.target, header...))
		}
		mu.Lock()
		sent := reached[l.name]
		mu.Unlock()
		served := 0
		for _, target := range sent {
			if readAs(target) == l.as {
				served++
			}
		}
		t.Logf("%s %s %s: answers %v, %d sent on as %s", l.name, l.method, l.target, codes, served, l.as)
		if served > l.served || served < l.want {
			t.Errorf("%s: %s %s: the upstream was sent %s %d times of 10 (%q), answers %v; want %d to %d",
				gw.name, l.method, l.target, l.as, served, sent, codes, l.want, l.served)
		}
	}
}

// rawRequest sends one request to addr from the local address source,
// its request line and headers exactly as given (a header may repeat),
// and returns the answer's status; 0 when the gateway closed the
// connection without one.
func rawRequest(t *testing.T, source, addr, method, target string, header ...string) int {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, addr)
	if method == "POST" {
		req += "Content-Length: 0\r\n"
	}
	for i := 0; i+1 < len(header); i += 2 {
		req += header[i] + ": " + header[i+1] + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
