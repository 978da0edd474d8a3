package config_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

func TestMatchKey(t *testing.T) {
	for _, tc := range []struct {
		pattern, key string
		want         bool
	}{
		{"vip", "vip", true},
		{"vip", "vip2", false},
		{"partner-*", "partner-acme", true},
		{"partner-*", "partner-", true},
		{"partner-*", "partne", false},
		{"*-eu", "acme-eu", true},
		{"*-eu", "acme-us", false},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"k?y", "key", true},
		{"k?y", "ky", false},
		{`lit\*`, "lit*", true},
		{`lit\*`, "litx", false},
		{"*", "", true},
		{"", "", true},
		{"", "a", false},
	} {
		if got := config.MatchKey(tc.pattern, tc.key); got != tc.want {
			t.Errorf("MatchKey(%q, %q) = %v, want %v", tc.pattern, tc.key, got, tc.want)
		}
	}
}

func TestOverridesAndPlans(t *testing.T) {
	cfg, err := config.Parse("o.yaml", []byte(`policies:
  - name: api
    limit: 100/1m
    key: header:X-API-Key
    overrides:
      - {key: vip, limit: 1000/1m}
      - {key: "partner-*", limits: ["500/1m", "calendar 100000/month"]}
    plan_from: header:X-Plan
    plans:
      free: 10/1m
      pro: [1000/1m, "calendar 1000000/month"]
`))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policy("api")
	for _, tc := range []struct{ key, plan, want string }{
		{"alice", "", "gcra 100/m"},
		{"alice", "free", "gcra 10/m"},
		{"alice", "pro", "gcra 1000/m, calendar 1000000/month"},
		{"alice", "gold", "gcra 100/m"},
		{"vip", "free", "gcra 1000/m"}, // an override beats the plan
		{"partner-acme", "", "gcra 500/m, calendar 100000/month"},
	} {
		var got []string
		for _, l := range p.LimitsFor(tc.key, tc.plan) {
			got = append(got, l.String())
		}
		if strings.Join(got, ", ") != tc.want {
			t.Errorf("LimitsFor(%q, %q) = %v, want %s", tc.key, tc.plan, got, tc.want)
		}
	}
}

// Overrides and plans that can never apply, or say nothing, are refused
// at their field.
func TestBadOverrides(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{`overrides: [{key: "", limit: 1/s}]`, "policies[0].overrides[0].key: required"},
		{`overrides: [{key: vip}]`, "policies[0].overrides[0].limit: required"},
		{`overrides: [{key: "a*", limit: 1/s}, {key: abc, limit: 2/s}]`, `policies[0].overrides[1].key: "abc" can never match: overrides[0]`},
		{`overrides: [{key: vip, limit: 1/s}, {key: vip, limit: 2/s}]`, `overrides[1].key: "vip" can never match`},
		{`overrides: [{key: 'x\', limit: 1/s}]`, "lone"},
		{`overrides: [{key: vip, limit: 0/s}]`, "policies[0].overrides[0].limit:"},
		{`overrides: [{key: vip, limit: 1/s, limits: [2/s]}]`, "one choice"},
		{`plans: {free: 5/xyz}`, "policies[0].plans.free:"},
		{`plans: [free]`, "policies[0].plans: want a mapping"},
		{`plan_from: cookie:plan
    plans: {free: 1/s}`, `policies[0].plan_from: "cookie:plan"`},
		{`plan_from: header:X-Plan`, "no plans to choose from"},
		{`plans: {pro: []}`, "empty list"},
	} {
		src := "policies:\n  - name: a\n    limit: 10/s\n    " + tc.yaml + "\n"
		_, err := config.Parse("b.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant an error containing %q", tc.yaml, err, tc.want)
		}
	}
}
