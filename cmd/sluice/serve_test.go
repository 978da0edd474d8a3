package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/api/sluicev1"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The sluice binary as a user runs it: serve, proxy, check, sim and
// version, one process at a time.

// The newcomer's path: no flags, the embedded config, the memory store,
// checks over JSON, Envoy RLS gRPC, /json and `sluice check`.
func TestServeDefault(t *testing.T) {
	p := start(t, nil)
	// The banner follows the listeners, which may answer before it is out.
	waitFor(t, func() bool { return strings.Contains(p.out.String(), "Try it:") })
	allowed := 0
	for range 25 {
		if _, r := postCheck(t, p.http, "default", "alice"); r.Allowed {
			allowed++
		}
	}
	if allowed != 20 {
		t.Errorf("default policy (burst 20) allowed %d of 25 at once", allowed)
	}
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rl := rlspb.NewRateLimitServiceClient(conn)
	req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*extrl.RateLimitDescriptor{{
		Entries: []*extrl.RateLimitDescriptor_Entry{{Key: "generic_key", Value: "slow_backend"}},
	}}, HitsAddend: 30}
	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		resp, err := rl.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != want {
			t.Fatalf("RLS call %d: %v, want %v", i, resp.OverallCode, want)
		}
		st := resp.Statuses[0]
		if st.CurrentLimit.GetRequestsPerUnit() != 60 || st.CurrentLimit.GetUnit() != rlspb.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("current_limit %v", st.CurrentLimit)
		}
		if want == rlspb.RateLimitResponse_OK && st.LimitRemaining != uint32(60-30*(i+1)) {
			t.Fatalf("limit_remaining %d after %d×30", st.LimitRemaining, i+1)
		}
	}
	// An unknown domain is OK with no limit, as envoyproxy/ratelimit answers.
	if resp, err := rl.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "nope", Descriptors: req.Descriptors}); err != nil ||
		resp.OverallCode != rlspb.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("unknown domain: %v, %v", resp, err)
	}
	// The native gRPC check service.
	nc := sluicev1.NewCheckServiceClient(conn)
	nresp, err := nc.Check(context.Background(), &sluicev1.CheckRequest{Checks: []*sluicev1.Check{{Policy: "api", Key: "grpc-user"}}})
	if err != nil || !nresp.Allowed || len(nresp.Results[0].Limits) != 2 || nresp.Results[0].Decision.Remaining != 9 {
		t.Errorf("native check: %v, %v", nresp, err)
	}
	if _, err := nc.Check(context.Background(), &sluicev1.CheckRequest{Checks: []*sluicev1.Check{{Policy: "nope", Key: "k"}}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("native check of an unknown policy: %v", err)
	}
	// A reservation over gRPC: 3 reserved, settled to 1, then refused a
	// second time; one of another key changes nothing.
	three := int64(3)
	rresp, err := nc.Check(context.Background(), &sluicev1.CheckRequest{Checks: []*sluicev1.Check{{Policy: "api", Key: "grpc-reserver", Cost: &three, Reserve: true}}})
	// Read on the hour's limit: the second's moves on with the clock.
	if err != nil || rresp.Results[0].Reservation == "" || rresp.Results[0].ReservationExpires == nil || rresp.Results[0].Limits[1].Remaining != 997 {
		t.Fatalf("native reserve: %v, %v", rresp, err)
	}
	id := rresp.Results[0].Reservation
	if _, err := nc.Settle(context.Background(), &sluicev1.SettleRequest{Reservation: id, Policy: "api", Key: "someone-else", Cost: 1}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("settle of another key's reservation: %v", err)
	}
	if s, err := nc.Settle(context.Background(), &sluicev1.SettleRequest{Reservation: id, Policy: "api", Key: "grpc-reserver", Cost: 1}); err != nil || s.Charged != 1 || s.Estimate != 3 {
		t.Errorf("native settle: %v, %v", s, err)
	}
	if _, err := nc.Cancel(context.Background(), &sluicev1.SettleRequest{Reservation: id, Policy: "api", Key: "grpc-reserver"}); status.Code(err) != codes.NotFound {
		t.Errorf("cancel of a settled reservation: %v", err)
	}
	zero := int64(0)
	if peek, err := nc.Check(context.Background(), &sluicev1.CheckRequest{Checks: []*sluicev1.Check{{Policy: "api", Key: "grpc-reserver", Cost: &zero}}}); err != nil || peek.Results[0].Limits[1].Remaining != 999 {
		t.Errorf("after settling 3 to 1: %v, %v; want 999 of the hour's left", peek, err)
	}
	out, err := exec.Command(binary, "check", "-addr", p.http, "-policy", "login", "-key", "10.0.0.1").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"remaining": 4`) {
		t.Errorf("sluice check: %v\n%s", err, out)
	}
	resp, err := http.Post("http://"+p.http+"/json", "application/json", strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"generic_key","value":"slow_backend"}]}]}`))
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("/json over the limit: %v, %v", resp.Status, err)
	}
}

func TestBadInput(t *testing.T) {
	p := start(t, nil)
	for name, body := range map[string]string{
		"malformed":      `{"checks":[`,
		"unknown policy": `{"checks":[{"policy":"nope","key":"k"}]}`,
		"no key":         `{"checks":[{"policy":"default"}]}`,
		"negative cost":  `{"checks":[{"policy":"default","key":"k","cost":-1}]}`,
		"unknown field":  `{"checks":[{"policy":"default","key":"k","colour":1}]}`,
		"huge key":       `{"checks":[{"policy":"default","key":"` + strings.Repeat("k", 1<<20) + `"}]}`,
		"no checks":      `{"checks":[]}`,
	} {
		resp, err := http.Post("http://"+p.http+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s", name, resp.StatusCode, b)
		}
	}
	var many strings.Builder
	many.WriteString(`{"domain":"edge","descriptors":[`)
	for i := range 10_000 {
		if i > 0 {
			many.WriteByte(',')
		}
		many.WriteString(`{"entries":[{"key":"remote_address","value":"x"}]}`)
	}
	many.WriteString(`]}`)
	resp, err := http.Post("http://"+p.http+"/json", "application/json", strings.NewReader(many.String()))
	if err != nil || resp.StatusCode != 400 {
		t.Errorf("10,000 descriptors: %v %v", resp.Status, err)
	}
}

func TestAdminAPI(t *testing.T) {
	p := start(t, []string{"SLUICE_ADMIN_TOKEN=s3cret"})
	postCheck(t, p.http, "default", "bob")
	for _, auth := range []string{"", "Bearer wrong", "s3cret"} {
		req, _ := http.NewRequest("GET", "http://"+p.admin+"/admin/config", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("auth %q: %d, want 401", auth, resp.StatusCode)
		}
	}
	do := func(method, path string) (int, string) { return adminCall(t, p.admin, "s3cret", method, path, "") }
	if code, body := do("GET", "/admin/config"); code != 200 || !strings.Contains(body, "policies:") {
		t.Errorf("config: %d %s", code, body)
	}
	if code, body := do("GET", "/admin/keys?policy=default&key=bob"); code != 200 || !strings.Contains(body, `"remaining":19`) {
		t.Errorf("inspect: %d %s", code, body)
	}
	if code, body := do("DELETE", "/admin/keys?policy=default&key=bob"); code != 200 || !strings.Contains(body, `"remaining":20`) {
		t.Errorf("reset: %d %s", code, body)
	}
	// Without a token the admin API does not start.
	q := start(t, nil)
	if _, err := net.DialTimeout("tcp", q.admin, time.Second); err == nil {
		t.Error("admin API listening without a token")
	}
}

// A good file reloads (on SIGHUP and on change) without resetting counters;
// a bad one is refused with file:line and the old config keeps serving.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sluice.yaml")
	write := func(s string) {
		if err := os.WriteFile(file+".tmp", []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Rename(file+".tmp", file)
	}
	write("policies:\n  - name: p\n    limit: 5/1h\n")
	p := start(t, nil, "-config", file)
	for range 3 {
		postCheck(t, p.http, "p", "k")
	}
	write("policies:\n  - name: p\n    limit: 10/1h\n  - name: q\n    limit: 1/1h\n")
	waitFor(t, func() bool {
		_, r := postCheck(t, p.http, "q", "x")
		return len(r.Results) == 1 && r.Results[0].Limit != ""
	})
	// What was used is kept: 3 of 5/h used, 10/h leaves 7, 6 after this
	// request. A reset would leave 9.
	if _, r := postCheck(t, p.http, "p", "k"); r.Results[0].Remaining != 10-3-1 {
		t.Fatalf("after raising the limit: %+v; want 6 remaining (the used part kept)", r.Results[0])
	}
	write("policies:\n  - name: p\n    limit: 0/1h\n")
	waitFor(t, func() bool { return strings.Contains(p.out.String(), "config reload rejected") })
	if !regexp.MustCompile(`sluice\.yaml:3:12: policies\[0\]\.limit`).MatchString(p.out.String()) {
		t.Errorf("rejection without file:line:column:\n%s", p.out)
	}
	if code, r := postCheck(t, p.http, "q", "y"); code != 200 || !r.Allowed {
		t.Fatalf("the old config stopped serving: %d %+v", code, r)
	}
	write("policies:\n  - name: z\n    limit: 1/1h\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, func() bool { code, _ := postCheck(t, p.http, "z", "k"); return code == 200 })
}

// The same checks against Redis started for the test.
func TestServeRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	p := start(t, nil, "-redis", srv.URL())
	waitFor(t, func() bool { return strings.Contains(p.out.String(), "store      redis") })
	allowed := 0
	for range 25 {
		if _, r := postCheck(t, p.http, "default", "carol"); r.Allowed {
			allowed++
		}
	}
	if allowed != 20 {
		t.Errorf("allowed %d of 25 on Redis, want 20", allowed)
	}
	resp, err := http.Get("http://" + p.http + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("readyz with Redis up: %v %v", resp, err)
	}
}

// The proxy limits and passes bodies through intact, and counts each
// request once on its metrics listener.
func TestProxy(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body) // HTTP/1 cannot read the body once the reply starts
		w.Write(b)
	}))
	defer upstream.Close()
	file := filepath.Join(t.TempDir(), "proxy.yaml")
	os.WriteFile(file, []byte(`policies:
  - name: limited
    limit: 3/1h
    key: client_ip
    match: "/limited"
`), 0o644)
	px := startProxy(t, file, upstream.URL)
	addr, ops := px.addr, px.ops

	body := bytes.Repeat([]byte("0123456789"), 100_000)
	codes := map[int]int{}
	for range 5 {
		resp, err := http.Post("http://"+addr+"/limited", "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		codes[resp.StatusCode]++
		if resp.StatusCode == 200 && !bytes.Equal(got, body) {
			t.Fatalf("body changed through the proxy: %d bytes back of %d", len(got), len(body))
		}
		if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	if codes[200] != 3 || codes[429] != 2 {
		t.Fatalf("limited: %v, want 3×200 and 2×429", codes)
	}
	// Each request counted once, under its policy, on the proxy's own
	// metrics listener.
	for result, want := range map[string]float64{"allowed": 3, "denied": 2} {
		series := `sluice_checks_total{domain="",policy="limited",result="` + result + `"}`
		if got := metric(t, ops, series); got != want {
			t.Errorf("%s = %v; want %v", series, got, want)
		}
	}

}

// A Kubernetes ConfigMap volume swaps a ..data symlink; the file's own path
// never changes. The swap reloads the config.
func TestReloadOnConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, body string) {
		os.MkdirAll(filepath.Join(dir, name), 0o755)
		os.WriteFile(filepath.Join(dir, name, "sluice.yaml"), []byte(body), 0o644)
	}
	version("..v1", "policies:\n  - name: one\n    limit: 5/1h\n")
	os.Symlink("..v1", filepath.Join(dir, "..data"))
	os.Symlink("..data/sluice.yaml", filepath.Join(dir, "sluice.yaml"))
	p := start(t, nil, "-config", filepath.Join(dir, "sluice.yaml"))
	if code, _ := postCheck(t, p.http, "one", "k"); code != 200 {
		t.Fatalf("policy one: %d", code)
	}
	// The kubelet's swap: a new directory, a new symlink renamed over ..data.
	version("..v2", "policies:\n  - name: two\n    limit: 5/1h\n")
	os.Symlink("..v2", filepath.Join(dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { code, _ := postCheck(t, p.http, "two", "k"); return code == 200 })
}

// sluice sim prints the comparison, draws it, and with -subwindows the
// accuracy table; a trace file is read once per measurement; bad flags are
// refused with a usage error.
func TestSim(t *testing.T) {
	needBinary(t)
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.csv")
	var tr strings.Builder
	tr.WriteString("# time,key\n")
	for range 10 {
		tr.WriteString("0.9,k\n")
	}
	tr.WriteString("1.5,k\n")
	if err := os.WriteFile(trace, []byte(tr.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	plot := filepath.Join(dir, "out.svg")
	out, err := exec.Command(binary, "sim", "-traffic", "trace", "-trace", trace, "-algorithms", "sliding_window,sliding_log",
		"-subwindows", "1,4", "-plot", plot).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// By hand (as in sim's TestSubWindowsByHand): the counter admits the
	// request at 1.5s that the log denies; four sub-windows deny it.
	rows := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 2 {
			rows[f[0]+" "+f[1]] = strings.Join(f, " ") // a row, by its first two fields
		}
	}
	for row, want := range map[string]string{
		"sliding_window 11":      "sliding_window 11 11 11 1.10× 9.0909% 0s 0s 24 B",
		"sliding_log 11":         "sliding_log 11 10 10 1.00× 0.0000% 0s 0s 16 B",
		"sliding_window 9.0909%": "sliding_window 9.0909% 24 B 24 B",
		"4 sub-windows":          "4 sub-windows 0.0000% 48 B 48 B",
	} {
		if rows[row] != want {
			t.Errorf("row %q = %q, want %q\n%s", row, rows[row], want, out)
		}
	}
	if b, err := os.ReadFile(plot); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("plot: %v, %d bytes", err, len(b))
	}
	for _, args := range [][]string{{"-subwindows", "3"}, {"-subwindows", "x"}, {"-limit", "0/1s"}, {"-traffic", "nope"}} {
		cmd := exec.Command(binary, append([]string{"sim"}, args...)...)
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 {
			t.Errorf("sim %v: %v, want exit 2\n%s", args, err, out)
		}
	}
}

// sluice version names the commit it was built from, and the service
// serves sluice_build_info with it.
func TestVersionNamesTheCommit(t *testing.T) {
	needBinary(t)
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skip("not in a git work tree")
	}
	rev := strings.TrimSpace(string(head))
	if top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output(); err == nil {
		if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err == nil && !fi.IsDir() {
			t.Skip("a linked git worktree (its .git is a file): go build stamps no commit there")
		}
	}
	out, err := exec.Command(binary, "version").Output()
	if err != nil || !strings.Contains(string(out), "commit "+rev[:12]) {
		t.Fatalf("sluice version: %q, %v; want commit %s", out, err, rev[:12])
	}
	p := start(t, nil)
	resp, err := http.Get("http://" + p.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `sluice_build_info{goversion="go`) || !strings.Contains(string(body), `revision="`+rev+`"`) {
		t.Fatalf("no sluice_build_info with the revision in /metrics")
	}
}

// With -log-format json every line the service writes is JSON, the
// startup record included.
func TestJSONLogsOnly(t *testing.T) {
	p := start(t, nil, "-log-format", "json")
	http.Get("http://" + p.http + "/healthz")
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait()
	lines := strings.Split(strings.TrimSpace(p.out.String()), "\n")
	sawStart := false
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("a line that is not JSON: %q", l)
		}
		if rec["msg"] == "sluice serving" && rec["http"] == p.http {
			sawStart = true
		}
	}
	if !sawStart {
		t.Fatalf("no startup record in:\n%s", p.out)
	}
}

// -admin-token-file, as a mounted Secret gives it: the token rotated in
// the file is the one `sluice serve` accepts from the next request on, and
// the old one is refused, with no restart.
func TestAdminTokenFileRotatesWithoutRestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, nil, "-admin-token-file", file)
	if code, _ := adminCall(t, p.admin, "first", "GET", "/admin/config", ""); code != 200 {
		t.Fatalf("the file's token: %d", code)
	}
	if err := os.WriteFile(file, []byte("second\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]int{"second": 200, "first": 401} {
		if code, _ := adminCall(t, p.admin, token, "GET", "/admin/config", ""); code != want {
			t.Errorf("token %q after the file was rotated: %d; want %d", token, code, want)
		}
	}
}

// An upstream over TLS with a private CA: refused (502, counted as
// unreachable) until the proxy is given the CA, as any Go program is, in
// SSL_CERT_FILE; then its answers pass.
func TestProxyToTLSUpstream(t *testing.T) {
	upstream := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "up") }))
	defer upstream.Close()
	dir := t.TempDir()
	file, ca := filepath.Join(dir, "proxy.yaml"), filepath.Join(dir, "ca.pem")
	os.WriteFile(file, []byte("policies: [{name: p, limit: 100/1h, match: /}]\n"), 0o644)
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: upstream.Certificate().Raw}), 0o644)
	get := func(px *proxyProc) (int, string) {
		resp, err := http.Get("http://" + px.addr + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	untrusting := startProxy(t, file, upstream.URL, "SSL_CERT_FILE="+filepath.Join(dir, "none.pem"))
	if code, _ := get(untrusting); code != http.StatusBadGateway {
		t.Fatalf("an upstream whose CA the proxy does not have: %d; want 502", code)
	}
	if n := metric(t, untrusting.ops, `sluice_proxy_upstream_failures_total{reason="unreachable"}`); n != 1 {
		t.Fatalf("sluice_proxy_upstream_failures_total{reason=\"unreachable\"} = %v; want 1", n)
	}
	if !strings.Contains(untrusting.out.String(), "certificate") {
		t.Fatalf("the failure's log line does not name the certificate:\n%s", untrusting.out)
	}
	trusting := startProxy(t, file, upstream.URL, "SSL_CERT_FILE="+ca)
	if code, body := get(trusting); code != 200 || body != "up" {
		t.Fatalf("with the upstream's CA in SSL_CERT_FILE: %d %q", code, body)
	}
}
