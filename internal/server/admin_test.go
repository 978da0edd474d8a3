package server

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// The admin API logs every action and every refused token with the
// caller's address, throttles an address that sends wrong tokens, and
// shows the config with its secrets redacted.
func TestAdminAudited(t *testing.T) {
	r, admin := startUI(t, "store: {type: memory}\npolicies: [{name: p, limit: 5/1h}]\n")
	buf := r.log
	call := func(method, path, token string) (int, string) {
		req, _ := http.NewRequest(method, admin+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := call("GET", "/admin/config", "s3cret"); code != 200 || strings.Contains(body, "s3cret") || !strings.Contains(body, "REDACTED") {
		t.Fatalf("/admin/config: %d\n%s", code, body)
	}
	if code, _ := call("DELETE", "/admin/keys?policy=p&key=alice", "s3cret"); code != 200 {
		t.Fatalf("reset: %d", code)
	}
	log := buf.String()
	if !strings.Contains(log, "admin: DELETE /admin/keys") || !strings.Contains(log, "key=alice") || !strings.Contains(log, "remote=127.0.0.1") {
		t.Fatalf("the reset is not in the log:\n%s", log)
	}
	for i := range adminFailures {
		if code, _ := call("GET", "/admin/config", "guess"); code != 401 {
			t.Fatalf("wrong token %d: %d, want 401", i, code)
		}
	}
	if !strings.Contains(buf.String(), "admin: refused") {
		t.Fatalf("refused tokens are not in the log:\n%s", buf)
	}
	// Past the allowance even the right token waits: the address is
	// throttled, not the token.
	if code, _ := call("GET", "/admin/config", "guess"); code != 429 {
		t.Fatalf("wrong token past the allowance: %d, want 429", code)
	}
	if code, _ := call("GET", "/admin/config", "s3cret"); code != 429 {
		t.Fatalf("right token from a throttled address: %d, want 429", code)
	}
	// A throttled address hammering away: every request counted, its
	// lines at most one a second.
	for range 50 {
		call("GET", "/admin/config", "guess")
	}
	m := r.metrics(t)
	for series, want := range map[string]int{
		`sluice_admin_refused_total{reason="wrong_token"}`: adminFailures,
		`sluice_admin_refused_total{reason="locked_out"}`:  52,
	} {
		if !strings.Contains(m, "\n"+series+" "+strconv.Itoa(want)+"\n") {
			t.Errorf("want %s %d in the metrics", series, want)
		}
	}
	if n := strings.Count(buf.String(), "admin: wrong tokens from this address"); n < 1 || n >= 52 {
		t.Fatalf("%d lines for 52 requests from a throttled address; want one a second at most", n)
	}
}
