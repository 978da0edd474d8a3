package config

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// randomOverrides returns n override keys, plain and patterns, none that
// can never match (no plain key after a pattern that catches it, no
// duplicate), in the order given.
func randomOverrides(rng *rand.Rand, n int) []string {
	var keys []string
	seen := map[string]bool{}
	for len(keys) < n {
		var k string
		switch rng.IntN(4) {
		case 0:
			k = fmt.Sprintf("p%d*", rng.IntN(n))
		case 1:
			k = fmt.Sprintf("?%d", rng.IntN(n))
		case 2:
			k = fmt.Sprintf(`a\*%d`, rng.IntN(n))
		default:
			k = fmt.Sprintf("p%d", rng.IntN(4*n))
		}
		caught := seen[k]
		for _, e := range keys {
			caught = caught || plainKey(k) && MatchKey(e, unquote(k))
		}
		if !caught {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// The parsed policy's indexed lookup finds the same override as trying
// each in order, for plain keys, patterns and escaped wildcards.
func TestOverrideIndexAgreesWithScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 20 {
		keys := randomOverrides(rng, 1+rng.IntN(60))
		var b strings.Builder
		b.WriteString("policies:\n  - name: p\n    limit: 1/1h\n    overrides:\n")
		for i, k := range keys {
			fmt.Fprintf(&b, "      - {key: %q, limit: %d/1h}\n", k, i+2)
		}
		cfg, err := Parse("o.yaml", []byte(b.String()))
		if err != nil {
			t.Fatalf("round %d: %v\n%s", round, err, b.String())
		}
		parsed := cfg.Policies[0]
		byHand := &Policy{Limits: parsed.Limits, Overrides: parsed.Overrides}
		for range 500 {
			key := fmt.Sprintf("%s%d", []string{"p", "x", "a*", "", "p1"}[rng.IntN(5)], rng.IntN(4*len(keys)))
			if got, want := parsed.LimitsFor(key, ""), byHand.LimitsFor(key, ""); got[0] != want[0] {
				t.Fatalf("round %d, key %q: indexed %v, scanned %v", round, key, got[0], want[0])
			}
		}
	}
}

// A plain override after a pattern that catches it, or a repeated key,
// is still refused with the index.
func TestOverrideThatCanNeverMatch(t *testing.T) {
	for _, keys := range [][2]string{{"partner-*", "partner-7"}, {"k", "k"}, {"a?", "a?"}, {`x\*`, `x\*`}} {
		yaml := fmt.Sprintf("policies:\n  - name: p\n    limit: 1/1h\n    overrides:\n      - {key: %q, limit: 2/1h}\n      - {key: %q, limit: 3/1h}\n", keys[0], keys[1])
		if _, err := Parse("o.yaml", []byte(yaml)); err == nil || !strings.Contains(err.Error(), "can never match") {
			t.Errorf("%q then %q: %v; want can never match", keys[0], keys[1], err)
		}
	}
}

// BenchmarkParseOverrides parses a policy with 100,000 plain overrides
// and a few patterns, as a reload does.
func BenchmarkParseOverrides(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("policies:\n  - name: p\n    limit: 1/1h\n    overrides:\n")
	for i := range 100_000 {
		fmt.Fprintf(&sb, "      - {key: customer-%d, limit: %d/1h}\n", i, i%1000+2)
	}
	sb.WriteString("      - {key: \"partner-*\", limit: 5/1h}\n")
	src := []byte(sb.String())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("o.yaml", src); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLimitsForOverrides looks a key up among 100,000 overrides.
func BenchmarkLimitsForOverrides(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("policies:\n  - name: p\n    limit: 1/1h\n    overrides:\n")
	for i := range 100_000 {
		fmt.Fprintf(&sb, "      - {key: customer-%d, limit: 2/1h}\n", i)
	}
	cfg, err := Parse("o.yaml", []byte(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	p := cfg.Policies[0]
	b.ReportAllocs()
	for b.Loop() {
		p.LimitsFor("customer-99999", "")
	}
}
