//go:build e2e

package main_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestOverridesOnEveryInstance: three `sluice serve` on one Redis. An
// override set through one instance's admin API applies on the very next
// check on every instance, and so does its removal; plans choose limits
// per check; a bad override is refused and changes nothing.
func TestOverridesOnEveryInstance(t *testing.T) {
	redistest.HourAhead()
	srv := redistest.Standalone(t)
	file := filepath.Join(t.TempDir(), "o.yaml")
	os.WriteFile(file, []byte(`store: {type: redis, url: "`+srv.URL()+`"}
policies:
  - name: api
    limit: fixed_window 2/1h
    plans: {pro: fixed_window 5/1h}
`), 0o644)
	var procs []*proc
	for range 3 {
		procs = append(procs, start(t, []string{"SLUICE_ADMIN_TOKEN=t0ken"}, "-config", file))
	}
	admin := func(method, path, body string) (int, string) {
		t.Helper()
		return adminCall(t, procs[0].admin, "t0ken", method, path, body)
	}
	// Each key is new per round, so the count starts at 0 on every one.
	for round, key := range []string{"vip", "vip2", "vip3"} {
		code, body := admin("PUT", "/admin/overrides", fmt.Sprintf(`{"policy":"api","key":%q,"limits":["fixed_window %d/1h"]}`, key, 10+round))
		if code != 200 || !strings.Contains(body, `"instances":3,"applied_by":3`) {
			t.Fatalf("PUT override: %d %s; want 200 applied by 3 of 3", code, body)
		}
		for i, p := range procs { // the next check, on each instance
			if _, r := postCheck(t, p.http, "api", key); !r.Allowed || r.Results[0].Limit != fmt.Sprintf("fixed_window %d/h", 10+round) {
				t.Fatalf("round %d, instance %d: the next check after the override: %+v", round, i, r)
			}
		}
	}
	if code, body := admin("GET", "/admin/overrides", ""); code != 200 || !strings.Contains(body, `"key":"vip2"`) {
		t.Fatalf("GET overrides: %d %s", code, body)
	}
	if code, body := admin("DELETE", "/admin/overrides?policy=api&key=vip", ""); code != 200 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	for i, p := range procs {
		if _, r := postCheck(t, p.http, "api", "vip"); r.Results[0].Limit != "fixed_window 2/h" {
			t.Fatalf("instance %d after the removal: %+v; want the policy's limit", i, r)
		}
	}
	for _, bad := range []string{
		`{"policy":"nope","key":"k","limits":["1/s"]}`,
		`{"policy":"api","key":"","limits":["1/s"]}`,
		`{"policy":"api","key":"k","limits":["0/s"]}`,
		`{"policy":"api","key":"k","limits":[]}`,
		`{"policy":"api","key":"k","limits":["1/s"],"colour":"blue"}`,
	} {
		if code, body := admin("PUT", "/admin/overrides", bad); code != 400 {
			t.Errorf("%s: %d %s; want 400", bad, code, body)
		}
	}
	if _, body := admin("GET", "/admin/overrides", ""); strings.Contains(body, `"key":"k"`) {
		t.Fatalf("a refused override was kept: %s", body)
	}
	// Plans: the check names its plan.
	allowed := 0
	for range 8 {
		resp, err := http.Post("http://"+procs[1].http+"/v1/check", "application/json",
			strings.NewReader(`{"checks":[{"policy":"api","key":"payer","plan":"pro"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.HasPrefix(string(b), `{"allowed":true`) {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("plan pro (5/1h) admitted %d of 8", allowed)
	}
}
