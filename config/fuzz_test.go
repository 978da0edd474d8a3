package config_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// FuzzParse feeds the policy file parser arbitrary files: each parses, or
// is refused with problems that each name a line and column in the file;
// none panics. A file that parses has something to limit.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"policies: [{name: a, limit: 10/s}]",
		"store: {type: redis, url: redis://x:1, mode: local-sync}\npolicies:\n  - name: a\n    limits: [\"10/s\", \"1000/h\"]\n    key: header:X-Key+route\n    match: \"GET /a/{id}\"\n",
		"domain: d\ndescriptors:\n  - key: k\n    value: v*\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
		"store:\n  timeout: fast\n  mode: shard\n  peers: [dns:x:1]\nlisteners: {drain: 1s}\n",
		"policies:\n\t- name: a\n", "", "- a\n- b", "policies: [{name: a, limit: {algorithm: token_bucket, rate: 5, period: 1s, burst: 9}}]",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse("f.yaml", data)
		if err == nil {
			if len(cfg.Policies) == 0 && len(cfg.Domains) == 0 {
				t.Fatalf("parsed with nothing to limit: %q", data)
			}
			if (cfg.Store.Memory == nil) == (cfg.Store.Redis == nil) {
				t.Fatalf("parsed with a store of no kind or of two: %+v", cfg.Store)
			}
			return
		}
		var ps config.Problems
		if !errors.As(err, &ps) || len(ps) == 0 {
			t.Fatalf("error %v is not Problems", err)
		}
		for _, p := range ps {
			if p.Line < 1 || p.Column < 1 {
				t.Fatalf("problem without a position: %v (file %q)", p, data)
			}
		}
	})
}
