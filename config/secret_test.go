package config_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// A policy's keys are credentials when its key reads a header named like
// one, or when it says secret: true; secret: false shows them.
func TestSecretKeys(t *testing.T) {
	for _, tt := range []struct {
		policy string
		secret bool
	}{
		{`{name: p, limit: 1/s}`, false},
		{`{name: p, limit: 1/s, key: client_ip}`, false},
		{`{name: p, limit: 1/s, key: "header:Authorization"}`, true},
		{`{name: p, limit: 1/s, key: "header:proxy-authorization"}`, true},
		{`{name: p, limit: 1/s, key: "header:Cookie"}`, true},
		{`{name: p, limit: 1/s, key: "header:X-API-Key+route"}`, true},
		{`{name: p, limit: 1/s, key: "client_ip+user:X-Session-Id"}`, true},
		{`{name: p, limit: 1/s, key: "header:X-Access-Token"}`, true},
		{`{name: p, limit: 1/s, key: "header:X-Client-Secret"}`, true},
		{`{name: p, limit: 1/s, key: "header:X-Tenant"}`, false},
		{`{name: p, limit: 1/s, key: "header:X-Tenant", secret: true}`, true},
		{`{name: p, limit: 1/s, key: "header:X-API-Key", secret: false}`, false},
	} {
		c, err := config.Parse("p.yaml", []byte("policies:\n  - "+tt.policy+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", tt.policy, err)
		}
		if got := c.Policy("p").SecretKeys; got != tt.secret {
			t.Errorf("%s: SecretKeys %v; want %v", tt.policy, got, tt.secret)
		}
	}
	if _, err := config.Parse("p.yaml", []byte("policies:\n  - {name: p, limit: 1/s, secret: maybe}\n")); err == nil || !strings.Contains(err.Error(), "p.yaml:2") {
		t.Errorf("secret: maybe: %v; want an error at p.yaml:2", err)
	}
}

// A hash shows no part of the key, tells keys apart, and is the same for
// the same key; a key that is no credential is shown as it is.
func TestShownKey(t *testing.T) {
	a, b := config.ShownKey("sk-live-0001", true), config.ShownKey("sk-live-0002", true)
	if a == b || !strings.HasPrefix(a, "hash:") || len(a) != len("hash:")+12 || strings.Contains(a, "sk-live") {
		t.Errorf("hashes %q and %q", a, b)
	}
	if a != config.ShownKey("sk-live-0001", true) {
		t.Error("one key, two hashes")
	}
	if got := config.ShownKey("tenant-1", false); got != "tenant-1" {
		t.Errorf("a key that is no credential shown as %q", got)
	}
}
