package server

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/rotated"
)

// A burst of wrong tokens sent at once, to the admin API and the status
// page's login together, gets at most adminFailures of them compared
// (answered 401); the rest are refused unread (429). Twenty bursts, each
// from a fresh count.
// The token is read from a file at each comparison, as a mounted Secret
// is.
func TestAdminLoginBurstComparesAtMostTen(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(&logbuf.Buffer{}, nil))
	tokens, err := rotated.Open(file, "admin token file", rotated.Text, log)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(path, []byte("listeners: {drain: 0s}\npolicies: [{name: p, limit: 10/1h}]\n"), 0o644)
	s, err := New(Options{Config: path, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", AdminTokenFile: tokens, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(t.Context()) })
	r, admin := s, "http://"+s.Addrs().Admin
	const burst = 60
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: burst}}
	defer c.CloseIdleConnections()
	for round := range 20 {
		if err := r.ui.failures.Reset(t.Context(), "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
		go1 := make(chan struct{})
		codes := make([]int, burst)
		var wg sync.WaitGroup
		for i := range burst {
			wg.Go(func() {
				var req *http.Request
				if i%2 == 0 {
					req, _ = http.NewRequest("GET", admin+"/admin/overrides", nil)
					req.Header.Set("Authorization", fmt.Sprint("Bearer guess", i))
				} else {
					req, _ = http.NewRequest("POST", admin+"/ui/login", strings.NewReader(url.Values{"token": {fmt.Sprint("guess", i)}}.Encode()))
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
				<-go1
				resp, err := c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				codes[i] = resp.StatusCode
			})
		}
		close(go1)
		wg.Wait()
		compared := 0
		for _, code := range codes {
			switch code {
			case http.StatusUnauthorized:
				compared++
			case http.StatusTooManyRequests:
			default:
				t.Fatalf("round %d: a wrong token answered %d", round, code)
			}
		}
		if compared > adminFailures || compared == 0 {
			t.Fatalf("round %d: %d of %d wrong tokens compared; want 1 to %d", round, compared, burst, adminFailures)
		}
	}
	// The right token, after the lock-out, and a right one before it are
	// not counted as failures.
	if err := r.ui.failures.Reset(t.Context(), "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	for range 2 * adminFailures {
		if code, _ := bearer(t, admin, "s3cret"); code != http.StatusOK {
			t.Fatalf("the right token: %d", code)
		}
	}
}

// The credentials used as keys never show on the status page, in admin
// answers or in the log: a policy keyed on Authorization or X-API-Key,
// one marked secret, and an Envoy descriptor named api_key show a short
// hash; a policy marked secret: false, or keyed on a header that is no
// credential, shows its keys. The inspector finds a hashed key by the
// link the page gives, and a key typed in clear.
func TestStatusPageHidesCredentials(t *testing.T) {
	redistest.HourAhead()
	r, admin := startUI(t, `
policies:
  - {name: bearer, limit: fixed_window 1/h, key: "header:Authorization"}
  - {name: apikey, limit: fixed_window 1/h, key: "header:X-API-Key+route"}
  - {name: marked, limit: fixed_window 1/h, key: "header:X-Tenant", secret: true}
  - {name: shown, limit: fixed_window 1/h, key: "header:X-Session-Id", secret: false}
  - {name: plain, limit: fixed_window 1/h, key: "header:X-Tenant"}
domains:
  - domain: edge
    descriptors:
      - key: api_key
        rate_limit: {unit: hour, requests_per_unit: 1}
`)
	secrets := map[string]string{"bearer": "Bearer sk-live-0001", "apikey": "ak-live-0002", "marked": "tenant-0003"}
	clear := map[string]string{"shown": "session-0004", "plain": "tenant-0005"}
	for policy, key := range mergeMaps(secrets, clear) {
		for range 3 {
			r.check(t, policy, key)
		}
	}
	rls := r.rlsClient(t)
	edgeKey := "ek-live-0006"
	for range 3 {
		req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{{
			Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "api_key", Value: edgeKey}}}}}
		if _, err := rls.ShouldRateLimit(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bearerDo(admin, "PUT", "/admin/overrides", `{"policy":"apikey","key":"ak-live-0002","limits":["5/1m"]}`); err != nil {
		t.Fatal(err)
	}
	if _, err := bearerDo(admin, "GET", "/admin/keys?policy=bearer&key="+url.QueryEscape(secrets["bearer"]), ""); err != nil {
		t.Fatal(err)
	}
	b := browser()
	if code, _, _ := fetch(t, b, "POST", admin+"/ui/login", url.Values{"token": {"s3cret"}}); code != http.StatusSeeOther {
		t.Fatalf("login: %d", code)
	}
	var pages strings.Builder
	for _, name := range []string{"bearer", "apikey", "marked", "shown", "plain", "edge"} {
		_, body, _ := fetch(t, b, "GET", admin+"/ui/policy/"+name, nil)
		pages.WriteString(body)
	}
	_, overview, _ := fetch(t, b, "GET", admin+"/ui/", nil)
	pages.WriteString(overview)
	overrides, err := bearerDo(admin, "GET", "/admin/overrides", "")
	if err != nil {
		t.Fatal(err)
	}
	for where, text := range map[string]string{"the status page": pages.String(), "/admin/overrides": overrides, "the log": r.log.String()} {
		for _, key := range append(valuesOf(secrets), edgeKey) {
			if strings.Contains(text, key) {
				t.Errorf("%s shows the credential %q", where, key)
			}
		}
	}
	for policy, key := range secrets {
		if hash := config.ShownKey(key, true); !strings.Contains(pages.String(), hash) {
			t.Errorf("the status page lacks %s's key as %s", policy, hash)
		}
	}
	if hash := "api_key=" + config.ShownKey(edgeKey, true); !strings.Contains(pages.String(), hash) {
		t.Errorf("the status page lacks the domain's key as %s", hash)
	}
	for _, key := range clear {
		if !strings.Contains(pages.String(), key) {
			t.Errorf("the status page lacks the key %q, which is no credential", key)
		}
	}
	// The inspector: by the link the page gives (the hash), and typed in
	// clear, it finds the key, denied.
	for _, key := range []string{config.ShownKey(secrets["bearer"], true), secrets["bearer"]} {
		_, body, _ := fetch(t, b, "GET", admin+"/ui/policy/bearer?key="+url.QueryEscape(key), nil)
		if !strings.Contains(body, "<td>false</td>") {
			t.Errorf("the inspector given %q does not find the key denied:\n%s", key, body)
		}
	}
}

func mergeMaps(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func valuesOf(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// bearerDo calls the admin API with the token s3cret and returns the
// answer's body, or an error for an answer other than 2xx.
func bearerDo(admin, method, path, body string) (string, error) {
	req, _ := http.NewRequest(method, admin+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer s3cret")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, out.String())
	}
	return out.String(), nil
}
