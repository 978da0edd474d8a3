package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
)

// ResetFormat says how X-RateLimit-Reset is written.
type ResetFormat uint8

const (
	// ResetUnix writes the Unix time in seconds at which the key is full
	// again, as GitHub and most APIs do. The default.
	ResetUnix ResetFormat = iota
	// ResetDelta writes the seconds until then.
	ResetDelta
)

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfterSeconds is Retry-After for a denial: whole seconds, rounded
// up, never 0 (a 0 invites an immediate retry that is denied again).
func retryAfterSeconds(d time.Duration) int64 {
	return max(ceilSeconds(d), 1)
}

// setRateHeaders writes X-RateLimit-* for the decision closest to its limit
// and the IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers) for every policy applied.
func setRateHeaders(h http.Header, now time.Time, format ResetFormat, closest sluice.Decision, policies []*Policy, ds []sluice.Decision) {
	reset := ceilSeconds(closest.ResetAfter)
	if format == ResetUnix {
		reset += now.Unix()
	}
	h["X-Ratelimit-Limit"] = []string{strconv.FormatInt(closest.Limit.Rate, 10)}
	h["X-Ratelimit-Remaining"] = []string{strconv.FormatInt(max(closest.Remaining, 0), 10)}
	h["X-Ratelimit-Reset"] = []string{strconv.FormatInt(reset, 10)}
	h["Ratelimit-Policy"] = []string{policyField(policies, ds)}
	h["Ratelimit"] = []string{rateLimitField(policies, ds)}
}

// policyField is the RateLimit-Policy Structured Field list: per policy,
// its name as an sf-string with q (quota) and w (window, seconds).
func policyField(policies []*Policy, ds []sluice.Decision) string {
	var b strings.Builder
	for i, p := range policies {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('"')
		b.WriteString(p.Name) // names are restricted to characters that need no escaping
		b.WriteString(`";q=`)
		b.WriteString(strconv.FormatInt(ds[i].Limit.Rate, 10))
		b.WriteString(";w=")
		b.WriteString(strconv.FormatInt(max(ceilSeconds(ds[i].Limit.Period), 1), 10))
	}
	return b.String()
}

// rateLimitField is the RateLimit Structured Field list: per policy, r
// (remaining) and t (seconds until the quota resets).
func rateLimitField(policies []*Policy, ds []sluice.Decision) string {
	var b strings.Builder
	for i, p := range policies {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('"')
		b.WriteString(p.Name)
		b.WriteString(`";r=`)
		b.WriteString(strconv.FormatInt(max(ds[i].Remaining, 0), 10))
		b.WriteString(";t=")
		b.WriteString(strconv.FormatInt(ceilSeconds(ds[i].ResetAfter), 10))
	}
	return b.String()
}
