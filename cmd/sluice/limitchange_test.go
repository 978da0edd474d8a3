package main_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The six algorithms, each a policy named after it, at a limit of n an
// hour (a day for the calendar).
func sixPolicies(n string, match bool) string {
	var b strings.Builder
	b.WriteString("policies:\n")
	for _, alg := range []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket", "gcra"} {
		b.WriteString("  - {name: " + alg + ", limit: \"" + alg + " " + n + "/1h\", key: client_ip")
		if match {
			b.WriteString(", match: /" + alg + "/")
		}
		b.WriteString("}\n")
	}
	b.WriteString("  - {name: calendar, limit: \"calendar " + n + "/day\", key: client_ip")
	if match {
		b.WriteString(", match: /calendar/")
	}
	b.WriteString("}\n")
	return b.String()
}

var algorithms = []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket", "gcra", "calendar"}

// reloadAndWait sends SIGHUP to cmd and waits until out logs one more
// "config reloaded" than it had.
func reloadAndWait(t *testing.T, cmd *exec.Cmd, out *logbuf.Buffer) {
	t.Helper()
	before := strings.Count(out.String(), "config reloaded")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Count(out.String(), "config reloaded") > before })
}

// A limit raised by a reload keeps what was used: one of 1/1h used, 3/1h
// leaves two, in every algorithm, and the answers say limit 3 with the
// right remaining. Lowered back, the key that used two of three has none.
func TestServeLimitChangeKeepsUsed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(file, []byte(sixPolicies("1", false)), 0o644)
	p := start(t, nil, "-config", file)
	for _, alg := range algorithms {
		if _, r := postCheck(t, p.http, alg, "k"); !r.Allowed {
			t.Fatalf("%s: the first request was refused: %+v", alg, r)
		}
	}
	os.WriteFile(file, []byte(sixPolicies("3", false)), 0o644)
	reloadAndWait(t, p.cmd, p.out)
	for _, alg := range algorithms {
		for i, want := range []int64{1, 0} {
			_, r := postCheck(t, p.http, alg, "k")
			if !r.Allowed || r.Results[0].Remaining != want || !strings.HasPrefix(r.Results[0].Limit, "3/") && !strings.Contains(r.Results[0].Limit, " 3/") {
				t.Errorf("%s: request %d after raising to 3: %+v; want allowed, remaining %d, limit 3", alg, i+2, r.Results, want)
			}
		}
		if _, r := postCheck(t, p.http, alg, "k"); r.Allowed {
			t.Errorf("%s: the 4th request was allowed at 3: %+v", alg, r.Results)
		}
		// Another key: two of three used before the limit drops to one.
		postCheck(t, p.http, alg, "j")
		postCheck(t, p.http, alg, "j")
	}
	os.WriteFile(file, []byte(sixPolicies("1", false)), 0o644)
	reloadAndWait(t, p.cmd, p.out)
	for _, alg := range algorithms {
		if _, r := postCheck(t, p.http, alg, "j"); r.Allowed || r.Results[0].Remaining != 0 {
			t.Errorf("%s: two used of 3, lowered to 1: %+v; want refused, remaining 0", alg, r.Results)
		}
	}
}

// The same through `sluice proxy` on SIGHUP, read from the headers.
func TestProxyLimitChangeKeepsUsed(t *testing.T) {
	redistest.HourAhead()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "up") }))
	defer upstream.Close()
	file := filepath.Join(t.TempDir(), "proxy.yaml")
	os.WriteFile(file, []byte(sixPolicies("1", true)), 0o644)
	px := startProxy(t, file, upstream.URL)
	addr, cmd, out := px.addr, px.cmd, px.out
	get := func(alg string) (int, http.Header) {
		resp, err := http.Get("http://" + addr + "/" + alg + "/x")
		if err != nil {
			return 0, nil
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	waitFor(t, func() bool { code, _ := get("fixed_window"); return code == 200 })
	for _, alg := range algorithms[1:] {
		if code, h := get(alg); code != 200 {
			t.Fatalf("%s: the first request got %d %v", alg, code, h)
		}
	}
	os.WriteFile(file, []byte(sixPolicies("3", true)), 0o644)
	reloadAndWait(t, cmd, out)
	for _, alg := range algorithms {
		for i, want := range []string{"1", "0"} {
			code, h := get(alg)
			if code != 200 || h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != want {
				t.Errorf("%s: request %d after raising to 3: %d, limit %q remaining %q; want 200, 3, %s", alg, i+2, code, h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), want)
			}
		}
		if code, h := get(alg); code != 429 || h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != "0" {
			t.Errorf("%s: the 4th request at 3: %d, limit %q remaining %q; want 429, 3, 0", alg, code, h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"))
		}
	}
	if t.Failed() {
		t.Logf("proxy output:\n%s", out)
	}
}
