package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// CredentialName reports whether a header (or an Envoy descriptor's
// entry) called name carries a credential by convention: Authorization,
// Proxy-Authorization, Cookie, or any name holding key, token, secret,
// session or auth, in any case (X-API-Key, X-Session-Id).
func CredentialName(name string) bool {
	n := strings.ToLower(name)
	if n == "cookie" {
		return true
	}
	for _, w := range [...]string{"key", "token", "secret", "session", "auth"} { // auth: authorization too
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// secretKeys reports whether the key spec reads a header named like a
// credential, in any of its parts.
func secretKeys(spec string) bool {
	for _, part := range strings.Split(spec, "+") {
		if name, arg, _ := strings.Cut(strings.TrimSpace(part), ":"); (name == "header" || name == "user") && CredentialName(arg) {
			return true
		}
	}
	return false
}

// ShownKey is how the status page, the admin API and the logs show key, a
// client's identity under a policy: as it is, or, when secret, as
// "hash:" and the first 12 hex digits of its SHA-256, which tells keys
// apart and matches the hash of a key typed in, without showing it.
func ShownKey(key string, secret bool) string {
	if !secret {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "hash:" + hex.EncodeToString(sum[:6])
}
