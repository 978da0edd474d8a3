package server

import (
	"strings"
	"testing"
)

// The peer secret file and the gossip key file refuse what would leave
// the ring open or fail later, naming why.
func TestPeerCredentialFiles(t *testing.T) {
	for _, tt := range []struct {
		raw  string
		want []string // or the error's words
		err  string
	}{
		{raw: "first-secret-of-the-ring\n\n  second-secret-of-the-ring  \n", want: []string{"first-secret-of-the-ring", "second-secret-of-the-ring"}},
		{raw: "\n \n", err: "no secret"},
		{raw: "short\n", err: "fewer than 16"},
	} {
		got, err := secretLines([]byte(tt.raw))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("secrets %q: %v; want %q", tt.raw, err, tt.err)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("secrets %q: %q, %v; want %q", tt.raw, got, err, tt.want)
		}
	}
	for _, tt := range []struct {
		raw  string
		keys int
		err  string
	}{
		{raw: "MDEyMzQ1Njc4OWFiY2RlZg==\nMDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n", keys: 2},
		{raw: "", err: "no key"},
		{raw: "not base64!\n", err: "not base64"},
		{raw: "c2hvcnQ=\n", err: "5 bytes"},
	} {
		keys, err := gossipKeys([]byte(tt.raw))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("gossip keys %q: %v; want %q", tt.raw, err, tt.err)
			}
			continue
		}
		if err != nil || len(keys) != tt.keys {
			t.Errorf("gossip keys %q: %d, %v; want %d", tt.raw, len(keys), err, tt.keys)
		}
	}
}
