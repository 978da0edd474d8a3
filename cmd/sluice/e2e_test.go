package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/sluicehq/sluice/internal/freeport"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/shard"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "sluice")
	// -buildvcs=true: the binary names its commit, as a release's does,
	// whatever GOFLAGS says here; -tags grpcnotrace,vtprotobuf, as
	// deploy/Dockerfile builds it (TestReleaseBuildPrunesMethods).
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-tags", "grpcnotrace,vtprotobuf", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building sluice: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running sluice process.
type proc struct {
	cmd               *exec.Cmd
	http, grpc, admin string
	out               *logbuf.Buffer
	exited            chan struct{} // closed when a process of startBinary exits
	exitErr           error         // cmd.Wait's, once exited is closed
}

// wait waits for a process of startBinary to exit and returns how.
func (p *proc) wait() error {
	<-p.exited
	return p.exitErr
}

// start runs `sluice serve` with args and waits until it answers /healthz
// and has announced itself.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startBinary(t, binary, env, args...)
}

// proxyProc is a `sluice proxy` started for a test.
type proxyProc struct {
	cmd       *exec.Cmd
	addr, ops string // its listener and its metrics listener
	out       *logbuf.Buffer
}

// startProxy starts `sluice proxy` of the policy file in front of
// upstream, with env added to its environment, and returns once it
// accepts connections.
func startProxy(t *testing.T, file, upstream string, env ...string) *proxyProc {
	t.Helper()
	p := &proxyProc{addr: freeport.Addr(t), ops: freeport.Addr(t), out: &logbuf.Buffer{}}
	p.cmd = exec.Command(binary, "proxy", "-config", file, "-upstream", upstream, "-listen", p.addr, "-metrics", p.ops)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		if t.Failed() {
			t.Logf("sluice proxy output:\n%s", p.out)
		}
	})
	waitFor(t, func() bool {
		c, err := net.Dial("tcp", p.addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return p
}

// startBinary is start with the sluice binary bin. Its listeners bind
// port 0 and their addresses are read from the startup record: a port
// picked free beforehand can be taken by another test's process before
// sluice binds it.
func startBinary(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{out: &logbuf.Buffer{}}
	args = append([]string{"serve", "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0"}, args...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() { p.exitErr = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.wait()
		if t.Failed() {
			t.Logf("sluice output:\n%s", p.out)
		}
	})
	// Serving and announced: the record comes once the config file is
	// watched, so a test's change to it from here on is seen.
	for {
		if m := startRecord.FindStringSubmatch(p.out.String()); m != nil {
			p.http, p.grpc, p.admin = m[1], m[2], m[3]
			break
		}
		select {
		case <-p.exited:
			t.Fatalf("sluice exited before serving:\n%s", p.out)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if resp, err := http.Get("http://" + p.http + "/healthz"); err != nil {
		t.Fatalf("sluice announced %s and does not answer /healthz: %v", p.http, err)
	} else {
		resp.Body.Close()
	}
	return p
}

// startRecord finds the addresses in the startup record, logged as text
// or as JSON.
var startRecord = regexp.MustCompile(`sluice serving.*?\bhttp[=":]+([^\s",]+).*?\bgrpc[=":]+([^\s",]+).*?\badmin[=":]+([^\s",]*)`)

// adminCall sends one admin API call with token and a JSON body, and
// returns its status and body.
// metric returns the value of series (its name and labels as /metrics
// writes them) on the server at addr, 0 when it has none.
func metric(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+]+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	var n float64
	fmt.Sscan(string(m[1]), &n)
	return n
}

func adminCall(t *testing.T, addr, token, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type checkResp struct {
	Allowed bool `json:"allowed"`
	Results []struct {
		Allowed    bool   `json:"allowed"`
		Remaining  int64  `json:"remaining"`
		Limit      string `json:"limit"`
		FailedOpen bool   `json:"failed_open"`
	} `json:"results"`
}

func postCheck(t *testing.T, addr, policy, key string) (int, checkResp) {
	t.Helper()
	body := fmt.Sprintf(`{"checks":[{"policy":%q,"key":%q}]}`, policy, key)
	resp, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r checkResp
	json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r
}

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

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SIGTERM during load: /readyz answers 503 for at least a second while
// checks are still answered, then the listener closes; every request sent
// gets a whole reply, and the process exits 0.
func TestGracefulShutdown(t *testing.T) {
	p := start(t, nil)
	var sent, answered, broken atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			c := &http.Client{Transport: &http.Transport{DisableKeepAlives: false}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				resp, err := c.Post("http://"+p.http+"/v1/check", "application/json", strings.NewReader(`{"checks":[{"policy":"default","key":"k"}]}`))
				if err != nil {
					sent.Add(-1) // refused: never reached the server
					return
				}
				var r checkResp
				if json.NewDecoder(resp.Body).Decode(&r) != nil || len(r.Results) != 1 {
					broken.Add(1)
				}
				resp.Body.Close()
				answered.Add(1)
			}
		})
	}
	// When /readyz first says 503, and when the listener first refuses.
	var notReady, refused atomic.Int64
	wg.Go(func() {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		for refused.Load() == 0 {
			resp, err := c.Get("http://" + p.http + "/readyz")
			if err != nil {
				refused.Store(time.Now().UnixNano())
				return
			}
			if resp.StatusCode == 503 && notReady.Load() == 0 {
				notReady.Store(time.Now().UnixNano())
			}
			resp.Body.Close()
			time.Sleep(20 * time.Millisecond)
		}
	})
	time.Sleep(300 * time.Millisecond)
	p.cmd.Process.Signal(syscall.SIGTERM)
	err := p.wait()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Errorf("exit: %v", err)
	}
	if broken.Load() != 0 || answered.Load() == 0 {
		t.Fatalf("%d answered, %d cut mid-reply", answered.Load(), broken.Load())
	}
	if notReady.Load() == 0 {
		t.Fatal("/readyz never answered 503 before the listener closed")
	}
	if d := time.Duration(refused.Load() - notReady.Load()); d < time.Second {
		t.Fatalf("/readyz answered 503 for %v before the listener closed; want at least 1s", d)
	}
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

// The proxy limits, passes bodies through intact, and shapes bursty
// input to the configured rate.
func TestProxy(t *testing.T) {
	var hits atomic.Int64
	var mu sync.Mutex
	var arrivals []time.Time
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/shaped" {
			mu.Lock()
			arrivals = append(arrivals, time.Now())
			mu.Unlock()
		}
		b, _ := io.ReadAll(r.Body) // HTTP/1 cannot read the body once the reply starts
		w.Write(b)
	}))
	defer upstream.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "proxy.yaml")
	os.WriteFile(file, []byte(`policies:
  - name: limited
    limit: 3/1h
    key: client_ip
    match: "/limited"
  - name: shaped
    limit: leaky_bucket 20/1s burst 400
    key: client_ip
    match: "/shaped"
    shape: true
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

	// Bursty input: 4 bursts of 50, every 2.5s, for 10s. Shaped to 20/s,
	// the upstream sees them spread evenly.
	var wg sync.WaitGroup
	start := time.Now()
	for burst := range 4 {
		time.Sleep(time.Until(start.Add(time.Duration(burst) * 2500 * time.Millisecond)))
		for range 50 {
			wg.Go(func() {
				resp, err := http.Get("http://" + addr + "/shaped")
				if err == nil {
					resp.Body.Close()
				}
			})
		}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != 200 {
		t.Fatalf("%d of 200 shaped requests reached the upstream", len(arrivals))
	}
	span := arrivals[len(arrivals)-1].Sub(arrivals[0]).Seconds()
	t.Logf("shaped: 200 requests in 4 bursts reached the upstream at %.2f/s over %.2fs (configured 20/s)", float64(len(arrivals)-1)/span, span)
	// Never early: the i-th request to reach the upstream left the queue
	// no sooner than i emission intervals (50ms) after the first burst was
	// sent. A busy host can only make it later, never earlier, so this
	// holds there too; 5ms is for the clocks of two processes.
	slices.SortFunc(arrivals, time.Time.Compare)
	for i, at := range arrivals {
		if due := start.Add(time.Duration(i)*50*time.Millisecond - 5*time.Millisecond); at.Before(due) {
			t.Fatalf("request %d reached the upstream %v after the first burst; shaped to 20/s it leaves no sooner than %v", i, at.Sub(start), due.Sub(start))
		}
	}
}

// Three `sluice serve` processes in local-sync mode on one Redis: a hot
// key hammered through all three is admitted within the bound.
func TestLocalSyncThreeInstances(t *testing.T) {
	redistest.HourAhead()
	srv := redistest.Standalone(t)
	file := filepath.Join(t.TempDir(), "ls.yaml")
	os.WriteFile(file, []byte(`store:
  type: redis
  url: `+srv.URL()+`
  mode: local-sync
  sync_interval: 100ms
  instances: 3
policies:
  - name: hot
    limit: fixed_window 100/1h
`), 0o644)
	var procs []*proc
	for range 3 {
		procs = append(procs, start(t, nil, "-config", file))
	}
	if !strings.Contains(procs[0].out.String(), "local-sync") {
		t.Fatalf("not in local-sync mode:\n%s", procs[0].out)
	}
	admitted := 0
	for range 20 {
		for _, p := range procs {
			for range 5 {
				if _, r := postCheck(t, p.http, "hot", "k"); r.Allowed {
					admitted++
				}
			}
		}
		// Let them sync: each pushes, then each pulls what all pushed, so
		// that every round starts from the one remaining. Only a sync that
		// falls inside a round (every 100ms, in the background) lets an
		// instance see part of another's round.
		for range 2 {
			for _, p := range procs {
				waitSyncs(t, p, 1)
			}
		}
	}
	// 300 offered against 100 per hour: between syncs each instance admits
	// at most a third of what it last saw remaining.
	t.Logf("admitted %d of 300 against a limit of 100", admitted)
	if admitted > 110 || admitted < 60 {
		t.Fatalf("admitted %d; want 100 within the local-sync bound (10%%), and not far under", admitted)
	}
}

// waitSyncs waits until p has made n more successful local-sync calls to
// Redis than when it was called.
func waitSyncs(t *testing.T, p *proc, n float64) {
	t.Helper()
	const series = `sluice_store_calls_total{operation="sync",result="ok"}`
	from := metric(t, p.http, series)
	waitFor(t, func() bool { return metric(t, p.http, series) >= from+n })
}

// Three `sluice serve` processes in shard mode: each key is decided
// exactly by its owner whichever instance is asked, and when one instance
// dies its keys move to the survivors within a membership interval.
func TestShardThreeInstances(t *testing.T) {
	grpcs := []string{freeport.Addr(t), freeport.Addr(t), freeport.Addr(t)}
	file := filepath.Join(t.TempDir(), "shard.yaml")
	os.WriteFile(file, []byte(shardConfig(t, grpcs, "30/1h")), 0o644)
	var procs []*proc
	for _, g := range grpcs {
		p := &proc{http: freeport.Addr(t), grpc: freeport.Addr(t), admin: freeport.Addr(t), out: &logbuf.Buffer{}}
		p.cmd = exec.Command(binary, "serve", "-config", file, "-http", p.http, "-grpc", p.grpc, "-admin", p.admin, "-peer-listen", g)
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
		procs = append(procs, p)
	}
	for _, p := range procs {
		waitFor(t, func() bool {
			r, err := http.Get("http://" + p.http + "/healthz")
			if err == nil {
				r.Body.Close()
			}
			return err == nil
		})
	}
	waitFor(t, func() bool { return membersSeen(procs, grpcs) })
	for k := range 6 {
		key := fmt.Sprint("key-", k)
		admitted := 0
		for i := range 45 {
			if _, r := postCheck(t, procs[i%3].http, "p", key); r.Allowed {
				admitted++
			}
		}
		if admitted != 30 {
			t.Errorf("%s: %d admitted across three instances, want exactly 30", key, admitted)
		}
	}
	// Forwarding happened somewhere: every instance was asked about keys
	// that other instances own.
	forwarded := 0
	for _, p := range procs {
		forwarded += int(metric(t, p.http, "sluice_shard_forwarded_total"))
	}
	if forwarded == 0 {
		t.Error("no forwarding counted on any instance")
	}
	// Keys owned by the instance about to die (the service keys state by
	// policy, NUL, key).
	ring := shard.NewRing(grpcs, 128, nil)
	var orphans []string
	for i := 0; len(orphans) < 5; i++ {
		if k := fmt.Sprint("after-", i); ring.Owner("p\x00"+k) == grpcs[2] {
			orphans = append(orphans, k)
		}
	}
	procs[2].cmd.Process.Kill()
	procs[2].cmd.Wait()
	died := time.Now()
	for k, key := range orphans {
		waitFor(t, func() bool {
			code, r := postCheck(t, procs[k%2].http, "p", key)
			return code == 200 && len(r.Results) == 1 && !r.Results[0].FailedOpen && r.Results[0].Remaining == 29
		})
	}
	t.Logf("all keys answered %v after an instance died (membership interval 200ms)", time.Since(died))
}

// membersSeen reports whether every instance logged a ring of all three
// peer addresses.
func membersSeen(procs []*proc, peers []string) bool {
	for _, p := range procs {
		seen := false
		for _, line := range strings.Split(p.out.String(), "\n") {
			if strings.Contains(line, "membership changed") && strings.Contains(line, peers[0]) &&
				strings.Contains(line, peers[1]) && strings.Contains(line, peers[2]) {
				seen = true
			}
		}
		if !seen {
			return false
		}
	}
	return true
}

// Local-sync with the shared Redis down and back: three processes keep
// deciding while it is down, keep what they admitted, and push it when it
// is back: the shared count is exactly what they admitted since it came
// back empty, nothing lost and nothing counted twice.
func TestLocalSyncRedisDownAndBack(t *testing.T) {
	redistest.HourAhead()
	srv := redistest.Own(t) // it changes the server
	file := filepath.Join(t.TempDir(), "ls.yaml")
	os.WriteFile(file, []byte(`store:
  type: redis
  url: `+srv.URL()+`
  mode: local-sync
  sync_interval: 50ms
  instances: 3
policies:
  - name: p
    limit: fixed_window 3000/1h
`), 0o644)
	var procs []*proc
	for range 3 {
		procs = append(procs, start(t, nil, "-config", file))
	}
	srv.Kill()
	admitted := 0
	for i := range 90 { // 30 per instance, well within each one's share
		if code, r := postCheck(t, procs[i%3].http, "p", "k"); code == 200 && r.Allowed {
			admitted++
		}
	}
	if admitted != 90 {
		t.Fatalf("admitted %d of 90 while Redis was down; local decisions must go on", admitted)
	}
	time.Sleep(300 * time.Millisecond) // several failed syncs
	// Each failed sync is counted; its lines are sampled, not one each.
	const syncErrors = `sluice_store_calls_total{operation="sync",result="error"}`
	for i, p := range procs {
		waitFor(t, func() bool { return metric(t, p.http, syncErrors) >= 2 })
		failed := metric(t, p.http, syncErrors)
		if lines := strings.Count(p.out.String(), "local-sync: sync failed"); failed < 2 || float64(lines) >= failed {
			t.Fatalf("instance %d: %v failed syncs counted, %d lines; want several, and fewer lines", i, failed, lines)
		}
	}
	srv.Restart()
	waitFor(t, func() bool { return redisCount(t, srv) >= 0 })
	time.Sleep(300 * time.Millisecond) // more syncs: nothing may be pushed twice
	count := redisCount(t, srv)
	if count != 90 {
		t.Fatalf("Redis holds a count of %d after coming back; want exactly the 90 admitted", count)
	}
}

// redisCount reads the count of policy p's key k (the second packed double
// of sluice:{p\x00k}:fixed_window:...) with struct.unpack, as the store
// does; -1 when it is not there. The key holds a NUL, so it is found by
// pattern inside Redis rather than passed on a command line.
func redisCount(t *testing.T, srv *redistest.Server) int {
	out := srv.Do("EVAL", `local ks = redis.call('KEYS', 'sluice:{p?k}:fixed_window:*')
if #ks ~= 1 then return -1 end
local a, b = struct.unpack('<d<d', redis.call('GET', ks[1]))
return b`, "0")
	var n int
	fmt.Sscan(out, &n)
	return n
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

// The proxy reloads its file on SIGHUP under load: 100 of them, no request
// fails, and the new policies apply.
func TestProxyReloadsUnderLoad(t *testing.T) {
	var dials atomic.Int64
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "up") }))
	upstream.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	upstream.Start()
	defer upstream.Close()
	file := filepath.Join(t.TempDir(), "proxy.yaml")
	// Idle connections kept an hour: what is counted is the reloads' dials,
	// not a busy machine's pauses past the default second.
	os.WriteFile(file, []byte("listeners: {upstream_idle_timeout: 1h}\npolicies: [{name: p, limit: 1000000/1h, key: client_ip, match: /}]\n"), 0o644)
	px := startProxy(t, file, upstream.URL)
	addr, cmd, out := px.addr, px.cmd, px.out
	var ok, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Get("http://" + addr + "/x")
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	for range 100 {
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Fatalf("%d requests failed, %d answered across 100 SIGHUPs:\n%s", failed.Load(), ok.Load(), out)
	}
	// The connections to the upstream outlive each reload: at most one or
	// two per client, where each reload's proxy dialled its own and left
	// the last one's idle.
	t.Logf("%d connections to the upstream", dials.Load())
	if n := dials.Load(); n > 16 {
		t.Fatalf("%d connections to the upstream from 8 clients across 100 reloads; want at most 16", n)
	}
	// A changed file takes effect: a limit of 1 now.
	os.WriteFile(file, []byte("policies: [{name: p, limit: 1/1h, key: client_ip, match: /}]\n"), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + addr + "/x")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 429
	})
}

// sluice version names the commit it was built from, and the service
// serves sluice_build_info with it.
func TestVersionNamesTheCommit(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skip("not in a git work tree")
	}
	rev := strings.TrimSpace(string(head))
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
