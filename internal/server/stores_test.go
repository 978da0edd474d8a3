package server

import (
	"strings"
	"testing"
)

// A URL on the command line picks its store kind by its scheme; the
// config's type by its name.
func TestStoreKindOf(t *testing.T) {
	for _, tt := range []struct{ name, url, want string }{
		{"memory", "", "memory"},
		{"redis", "", "redis"},
		{"postgres", "", "postgres"},
		{"memory", "postgres://u@h:5432/db", "postgres"},
		{"memory", "postgresql://u@h/db", "postgres"},
		{"postgres", "redis://h:6379", "redis"},
		{"memory", "rediss://h:6380", "redis"},
		{"memory", "redis-sentinel://h:26379/m", "redis"},
	} {
		k, err := kindOf(tt.name, tt.url)
		if err != nil || k.name != tt.want {
			t.Errorf("kindOf(%q, %q) = %q, %v; want %q", tt.name, tt.url, k.name, err, tt.want)
		}
	}
	if _, err := kindOf("memory", "mysql://h/db"); err == nil || !strings.Contains(err.Error(), "postgres://") {
		t.Errorf("an unknown scheme: %v; want an error listing the schemes", err)
	}
}
