//go:build e2e

package main_test

import (
	"context"
	byteorder "encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/freeport"
	"github.com/sluicehq/sluice/internal/logbuf"
)

// docBlock returns the first fenced block of lang in docs/gateways.md,
// with the page's addresses replaced by the test's: the configurations
// tested are the ones users copy.
func docBlock(t *testing.T, lang string, addrs map[string]string) string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "gateways.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```").FindSubmatch(page)
	if m == nil {
		t.Fatalf("docs/gateways.md has no %s block", lang)
	}
	block := string(m[1])
	for from, to := range addrs {
		block = strings.ReplaceAll(block, from, to)
	}
	return block
}

// gateway is a real gateway's process, started from its configuration
// on docs/gateways.md.
type gateway struct {
	name  string
	bin   string
	setup func(t *testing.T, dir string, addrs map[string]string) (args []string)
}

var gateways = []gateway{
	{"nginx", "nginx", func(t *testing.T, dir string, addrs map[string]string) []string {
		// What an nginx.conf has around its server blocks, in dir.
		conf := fmt.Sprintf("daemon off;\npid %[1]s/nginx.pid;\nerror_log %[1]s/error.log;\nevents {}\nhttp {\n"+
			"access_log off;\nclient_body_temp_path %[1]s/body;\nproxy_temp_path %[1]s/proxy;\nfastcgi_temp_path %[1]s/fastcgi;\n"+
			"uwsgi_temp_path %[1]s/uwsgi;\nscgi_temp_path %[1]s/scgi;\n%[2]s}\n", dir, docBlock(t, "nginx", addrs))
		os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644)
		return []string{"-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", filepath.Join(dir, "nginx.conf")}
	}},
	{"caddy", "caddy", func(t *testing.T, dir string, addrs map[string]string) []string {
		// No admin endpoint: tests run side by side.
		os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte("{\n\tadmin off\n}\n\n"+docBlock(t, "caddyfile", addrs)), 0o644)
		return []string{"run", "--adapter", "caddyfile", "--config", filepath.Join(dir, "Caddyfile")}
	}},
	{"haproxy", "haproxy", func(t *testing.T, dir string, addrs map[string]string) []string {
		os.WriteFile(filepath.Join(dir, "sluice.lua"), []byte(docBlock(t, "lua", addrs)), 0o644)
		os.WriteFile(filepath.Join(dir, "haproxy.cfg"), []byte(docBlock(t, "haproxy", addrs)), 0o644)
		return []string{"-db", "-f", filepath.Join(dir, "haproxy.cfg")}
	}},
}

// nginx, Caddy and HAProxy from Debian, each in front of a real upstream
// with its configuration from docs/gateways.md, asking `sluice serve` on
// a 3/1h per-client policy on /api/: two clients (from 127.0.0.2 and
// 127.0.0.3, each sending a forged X-Forwarded-For) each get 200, 200,
// 200, then 429 with Retry-After; /other is not limited; only what was
// allowed reaches the upstream, with the rate headers.
func TestGateways(t *testing.T) {
	for _, gw := range gateways {
		t.Run(gw.name, func(t *testing.T) {
			bin, err := exec.LookPath(gw.bin)
			if err != nil {
				if os.Getenv("SLUICE_REQUIRE_GATEWAYS") == "1" {
					t.Fatalf("%s is not on PATH (SLUICE_REQUIRE_GATEWAYS=1)", gw.bin)
				}
				t.Skipf("%s is not on PATH", gw.bin)
			}
			testGateway(t, gw, bin)
		})
	}
}

func testGateway(t *testing.T, gw gateway, bin string) {
	var mu sync.Mutex
	reached := map[string]int{}
	var rateHeader string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reached[r.URL.Path]++
		if h := r.Header.Get("X-Ratelimit-Limit"); h != "" && r.URL.Path == "/api/items/1" {
			rateHeader = h
		}
		mu.Unlock()
		io.WriteString(w, "up")
	}))
	defer up.Close()
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(file, []byte(`trusted_proxies: [127.0.0.1/32]
policies:
  - {name: api, limit: fixed_window 3/1h, key: client_ip, match: "/api/"}
`), 0o644)
	p := start(t, nil, "-config", file)
	listen := startGateway(t, gw, bin, p.http, strings.TrimPrefix(up.URL, "http://"))
	closedBefore := timeWaits(t, p.http)
	for _, from := range []string{"127.0.0.2", "127.0.0.3"} {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
			return d.DialContext(ctx, network, addr)
		}}}
		var codes []int
		for range 4 {
			req, _ := http.NewRequest("GET", "http://"+listen+"/api/items/1", nil)
			req.Header.Set("X-Forwarded-For", "203.0.113.7") // forged
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes = append(codes, resp.StatusCode)
			if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
				t.Fatalf("%s: a 429 without Retry-After: %v", from, resp.Header)
			}
		}
		if fmt.Sprint(codes) != "[200 200 200 429]" {
			t.Fatalf("client %s: %v; want [200 200 200 429]", from, codes)
		}
		for range 5 {
			resp, err := client.Get("http://" + listen + "/other")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("/other from %s: %d; want 200, not limited", from, resp.StatusCode)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if reached["/api/items/1"] != 6 || reached["/other"] != 10 {
		t.Fatalf("the upstream was reached %v; want the 6 allowed /api requests and the 10 /other", reached)
	}
	if rateHeader != "3" {
		t.Fatalf("%s passed X-RateLimit-Limit %q to the upstream with an allowed request; want 3", gw.name, rateHeader)
	}
	// The gateway keeps its connections to sluice: 18 checks closed none
	// of them (a closed one stays in TIME_WAIT on sluice's side for a
	// minute), where one per check costs a connection each, and one in
	// TIME_WAIT, at the gateway's full rate.
	if n := timeWaits(t, p.http) - closedBefore; n > 0 {
		t.Fatalf("%s closed %d connections to sluice for 18 checks; want none: keep-alive", gw.name, n)
	}
}

// startGateway starts gw (its binary bin) as docs/gateways.md configures
// it, in front of sluice's HTTP listener at sluiceAddr and the upstream at
// upstream, and returns the address it listens on once it does. It is
// stopped, workers and all, when t ends.
func startGateway(t *testing.T, gw gateway, bin, sluiceAddr, upstream string) string {
	t.Helper()
	listen := freeport.Addr(t)
	addrs := map[string]string{"127.0.0.1:8080": sluiceAddr, "127.0.0.1:3000": upstream, "127.0.0.1:8000": listen}
	dir := t.TempDir()
	cmd := exec.Command(bin, gw.setup(t, dir, addrs)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	out := &logbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// The gateway's workers go with it: a process group, killed whole.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", gw.name, out)
		}
	})
	waitFor(t, func() bool { // the gateway listens (its output is logged if it never does)
		c, err := net.Dial("tcp", listen)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return listen
}

// timeWaits counts the TCP connections on this host whose local end is
// addr, an IPv4 listener's address, that were closed from that side and
// wait out TIME_WAIT (/proc/net/tcp): connections the listener accepted.
// The port alone would also count another process's connections from
// another local address (127.0.0.2, ::1) that happen to use the same port
// number, as any test running beside this one may.
func timeWaits(t *testing.T, addr string) int {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		t.Fatalf("timeWaits of %q: want an IPv4 address and port", addr)
	}
	ip := ap.Addr().As4()
	// The kernel writes the address as the number its 4 bytes make in the
	// host's byte order, and the port as a number.
	local := fmt.Sprintf("%08X:%04X", byteorder.NativeEndian.Uint32(ip[:]), ap.Port())
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 4 && f[1] == local && f[3] == "06" { // TIME_WAIT
			n++
		}
	}
	return n
}

// timeWaits counts what TestGateways' keep-alive check needs: a
// connection its listener accepted and closed first, and not one that
// another local address (127.0.0.2) closed from the same port number.
func TestTimeWaitsCountsTheListenersClosedConnections(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	port := ln.Addr().(*net.TCPAddr).Port
	other, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	before, beside := timeWaits(t, addr), timeWaits(t, fmt.Sprintf("127.0.0.2:%d", port))

	// From 127.0.0.2 and the listener's port, closed first by its dialer.
	go func() {
		if c, err := other.Accept(); err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port}}
	c, err := d.Dial("tcp4", other.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// Accepted by the listener and closed first by it.
	go func() {
		if s, err := ln.Accept(); err == nil {
			s.Close()
		}
	}()
	c, err = net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, c) // until the listener's side has closed
	c.Close()

	waitFor(t, func() bool {
		return timeWaits(t, fmt.Sprintf("127.0.0.2:%d", port)) == beside+1 && timeWaits(t, addr) == before+1
	})
}
