package server

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// A check that names a plan its policy does not have, as callers still
// do once a reload has renamed it, is decided by the policy's own limits,
// as documented, and never silently: it is counted, and logged sampled
// with the plans the policy has.
func TestUnknownPlanAfterReload(t *testing.T) {
	const before = `policies:
  - name: api
    limit: 1/1h
    plans: {pro: 3/1h}
`
	r := start(t, before, "")
	check := func(key, plan string) CheckResult {
		t.Helper()
		body, _ := json.Marshal(CheckRequest{Checks: []Check{{Policy: "api", Key: key, Plan: plan}}})
		resp, err := client.Post(r.base+"/v1/check", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var out CheckResponse
		if err := json.Unmarshal(data, &out); err != nil || len(out.Results) != 1 {
			t.Fatalf("%d %s: %v", resp.StatusCode, data, err)
		}
		return out.Results[0]
	}
	const unknown = `sluice_plan_unknown_total{policy="api"}`
	if res := check("a", "pro"); !res.Allowed || res.Limit != "gcra 3/h" || res.Remaining != 2 {
		t.Fatalf("plan pro before the reload: %+v", res)
	}
	if n := metricValue(t, r, unknown); n != 0 {
		t.Fatalf("%s = %v for a plan the policy has", unknown, n)
	}

	rewrite(t, r, strings.Replace(before, "pro:", "premium:", 1))
	if res := check("b", "pro"); !res.Allowed || res.Limit != "gcra 1/h" || res.Remaining != 0 {
		t.Fatalf("plan pro once renamed: %+v, want the policy's own 1/1h", res)
	}
	if res := check("b", "pro"); res.Allowed {
		t.Fatalf("plan pro once renamed, second check: %+v, want denied by 1/1h", res)
	}
	if res := check("c", "premium"); !res.Allowed || res.Limit != "gcra 3/h" {
		t.Fatalf("plan premium: %+v", res)
	}
	if n := metricValue(t, r, unknown); n != 2 {
		t.Fatalf("%s = %v after two checks naming plan pro, want 2", unknown, n)
	}
	var lines []string
	for line := range strings.SplitSeq(r.log.String(), "\n") {
		if strings.Contains(line, "plan its policy does not have") {
			lines = append(lines, line)
		}
	}
	// Sampled: one line a second; the two checks may fall in two seconds.
	if len(lines) == 0 || len(lines) > 2 {
		t.Fatalf("%d lines about the unknown plan, want 1 or 2; log:\n%s", len(lines), r.log.String())
	}
	if l := lines[0]; !strings.Contains(l, `policy=api`) || !strings.Contains(l, `plan="\"pro\""`) || !strings.Contains(l, `plans=[premium]`) {
		t.Fatalf("the line does not say the policy, the plan and the plans there are: %s", l)
	}
	// The reload itself said so, before any check named it.
	if !logHas(r, "plans removed", "policy=api", "removed=[pro]", "plans=[premium]") {
		t.Fatalf("no reload line naming the removed plan; log:\n%s", r.log.String())
	}
}

// A reload that drops a policy keeps its runtime overrides, and says so:
// they apply to nothing until a policy of that name returns, and then
// apply again.
func TestReloadKeepsOverridesOfADroppedPolicy(t *testing.T) {
	const with = "policies: [{name: api, limit: 1/1h}, {name: other, limit: 1/1h}]\n"
	r := start(t, with, "")
	vip, err := sluice.ParseLimit("5/1h")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.overrides.Set(t.Context(), "api", "vip", []sluice.Limit{vip}); err != nil {
		t.Fatal(err)
	}
	rewrite(t, r, "policies: [{name: other, limit: 1/1h}]\n")
	if !logHas(r, "runtime overrides of a policy the config no longer has", "policy=api", "overrides=1") {
		t.Fatalf("no reload line about policy api's override; log:\n%s", r.log.String())
	}
	if res, code := r.check(t, "api", "vip"); code != 400 {
		t.Fatalf("a check of the dropped policy: %d %+v, want 400", code, res)
	}
	const said = "runtime overrides of a policy the config no longer has"
	rewrite(t, r, "policies: [{name: other, limit: 2/1h}]\n") // a later reload: said once, by the one that dropped it
	if n := strings.Count(r.log.String(), said); n != 1 {
		t.Fatalf("the dropped policy's overrides were reported %d times over two reloads, want once; log:\n%s", n, r.log.String())
	}
	rewrite(t, r, with)
	if res, _ := r.check(t, "api", "vip"); !res.Allowed || res.Remaining != 4 {
		t.Fatalf("the policy back: %+v, want its key's override 5/1h again", res)
	}
}

// logHas reports whether one line of r's log holds every one of parts.
func logHas(r *running, parts ...string) bool {
	for line := range strings.SplitSeq(r.log.String(), "\n") {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			return true
		}
	}
	return false
}
