package door

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// The one identity rule: what Identity refuses, and what Key lets
// through of it (a composition's NUL, the application's empty key).
func TestIdentityRule(t *testing.T) {
	for _, tt := range []struct {
		id            string
		identity, key bool // refused by each
	}{
		{"alice", false, false},
		{"clé", false, false},
		{"with\ttab", false, false},
		{strings.Repeat("k", sluice.MaxIdentityLen), false, false},
		{"", true, false},
		{strings.Repeat("k", sluice.MaxIdentityLen+1), true, true},
		{strings.Repeat("k", 5000), true, true},
		{"a\x00b", true, false},
		{"a\x01b", true, true},
		{"a\nb", true, true},
		{"a\x1fb", true, true},
		{"a\x7fb", true, true},
		{"a\xffb", true, true},
		{"a\xed\xa0\x80b", true, true}, // a surrogate half, which UTF-8 cannot hold
		{"a\ufffdb", true, true},
	} {
		for _, f := range []struct {
			name    string
			check   func(string) error
			refused bool
		}{{"Identity", Identity, tt.identity}, {"Key", Key, tt.key}} {
			err := f.check(tt.id)
			if (err != nil) != f.refused || err != nil && !errors.Is(err, ErrInvalidIdentity) {
				t.Errorf("%s(%.20q): %v; refused %v", f.name, tt.id, err, f.refused)
			}
			if err != nil && len(tt.id) > 2 && strings.Contains(err.Error(), tt.id) {
				t.Errorf("%s(%.20q): the error %q quotes the identity", f.name, tt.id, err)
			}
		}
	}
	if err := Identity(strings.Repeat("k", 5000)); !errors.Is(err, ErrIdentityTooLong) {
		t.Errorf("5,000 bytes: %v; want ErrIdentityTooLong", err)
	}
}

// BenchmarkIdentity is the rule's cost on a 32-byte API key, which a
// request through httplimit pays twice (the key function's Identity, the
// middleware's Key):
//
//	go test -run '^$' -bench Identity -count 5 ./internal/door
func BenchmarkIdentity(b *testing.B) {
	id := "sk-live-0123456789abcdef01234567"
	b.ReportAllocs()
	for b.Loop() {
		if Identity(id) != nil {
			b.Fatal("refused")
		}
	}
}
