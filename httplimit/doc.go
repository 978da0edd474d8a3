// Package httplimit is sluice's net/http middleware: policies chosen by
// method and path pattern (Go 1.22 ServeMux syntax), each with its own
// limit, key, cost, fail mode and shadow switch; every matching policy of a
// request checked in one all-or-nothing TakeAll; and the responses clients
// expect.
//
// Denied requests get 429 with Retry-After (whole seconds, rounded up,
// never 0), X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset
// (Unix seconds, or delta seconds by option), the IETF RateLimit-Policy and
// RateLimit fields, and an RFC 9457 application/problem+json body. Allowed
// responses carry the same rate headers. With several policies, the
// X-RateLimit-* headers describe the one closest to its limit. A store
// failure under a fail-closed policy answers 503 with Retry-After.
//
// Denials and failures are logged through log/slog, sampled: at most
// LogsPerSecond lines per policy, each saying how many were suppressed.
//
// Keys: ClientIP (with a clientip.Resolver for your proxies), User, APIKey,
// UserAgent, Route, and Compose of them. A key that cannot be found is a
// misconfiguration, decided by the policy's fail mode; it never falls back
// to one shared key for everybody.
package httplimit
