package httplimit

import (
	"net/http"
	"strconv"
	"time"
	"unsafe"

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

// headerBuf sets the rate headers without allocating: their values are
// written after the request's keys in the scratch's buffer (scratch.keys),
// and their header lines are slots of strs, both handed out once and
// never written again, so a header map that outlives the request reads
// what was set. A full strs, like a full buffer, is replaced, never
// reused.
type headerBuf struct{ strs []string }

// lines returns n string slots that no one has been handed.
func (hb *headerBuf) lines(n int) []string {
	if cap(hb.strs)-len(hb.strs) < n {
		hb.strs = make([]string, 0, headerLines)
	}
	i := len(hb.strs)
	hb.strs = hb.strs[:i+n]
	return hb.strs[i : i+n : i+n]
}

// number appends n in decimal to *buf and returns a header line holding
// it, handed out as set's are.
func (hb *headerBuf) number(buf *[]byte, n int64) []string {
	b := *buf
	start := len(b)
	b = strconv.AppendInt(b, n, 10)
	*buf = b
	line := hb.lines(1)
	line[0] = unsafe.String(&b[start], len(b)-start)
	return line
}

// headerLines is the number of header lines in one of headerBuf's
// arrays: 4 KiB, 64 requests' worth.
const headerLines = 256

// set writes X-RateLimit-* for the decision closest to its limit and the
// IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers) for every policy applied. The
// values are appended to *buf.
func (hb *headerBuf) set(h http.Header, buf *[]byte, now time.Time, format ResetFormat, closest int, policies []*Policy, ds []sluice.Decision) {
	d := ds[closest]
	reset := ceilSeconds(d.ResetAfter)
	if format == ResetUnix {
		reset += now.Unix()
	}
	// X-RateLimit-Limit and, for one policy, RateLimit-Policy never change:
	// each policy keeps them ready. The rest is built after the keys.
	var ends [4]int
	b := *buf
	start := len(b)
	b = strconv.AppendInt(b, max(d.Remaining, 0), 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, reset, 10)
	ends[1] = len(b)
	b = appendRateLimitField(b, policies, ds)
	ends[2] = len(b)
	// One policy of its own Limit has its field ready; several, or limits
	// its Limits chose per request, are written from the decisions.
	chosen := len(policies) > 1 || ds[0].Limit != policies[0].Limit
	if chosen {
		b = appendPolicyField(b, policies, ds)
	}
	ends[3] = len(b)
	*buf = b
	// An append that grew b copied the values with it: they are read
	// where b is now, which is only ever written past its end.
	vals := hb.lines(4)
	for i, from := range [4]int{start, ends[0], ends[1], ends[2]} {
		vals[i] = unsafe.String(unsafe.SliceData(b[from:]), ends[i]-from)
	}
	if p := policies[closest]; d.Limit.Rate == p.Limit.Rate {
		h["X-Ratelimit-Limit"] = p.limitHdr
	} else {
		h["X-Ratelimit-Limit"] = []string{strconv.FormatInt(d.Limit.Rate, 10)} // a limit the policy's Limits chose
	}
	h["X-Ratelimit-Remaining"] = vals[0:1:1]
	h["X-Ratelimit-Reset"] = vals[1:2:2]
	h["Ratelimit"] = vals[2:3:3]
	if chosen {
		h["Ratelimit-Policy"] = vals[3:4:4]
	} else {
		h["Ratelimit-Policy"] = policies[0].policyHdr
	}
}

// appendPolicyField appends the RateLimit-Policy Structured Field list:
// per policy, its name as an sf-string with q (quota) and w (window,
// seconds) of the limit its decision in ds reports. Names are restricted
// to characters that need no escaping.
func appendPolicyField(b []byte, policies []*Policy, ds []sluice.Decision) []byte {
	for i, p := range policies {
		if i > 0 {
			b = append(b, ", "...)
		}
		l := ds[i].Limit
		b = append(append(append(b, '"'), p.Name...), `";q=`...)
		b = strconv.AppendInt(b, l.Rate, 10)
		b = strconv.AppendInt(append(b, ";w="...), max(ceilSeconds(l.Period), 1), 10)
	}
	return b
}

// appendRateLimitField appends the RateLimit Structured Field list: per
// policy, r (remaining) and t (seconds until the quota resets).
func appendRateLimitField(b []byte, policies []*Policy, ds []sluice.Decision) []byte {
	for i, p := range policies {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(append(append(b, '"'), p.Name...), `";r=`...)
		b = strconv.AppendInt(b, max(ds[i].Remaining, 0), 10)
		b = strconv.AppendInt(append(b, ";t="...), ceilSeconds(ds[i].ResetAfter), 10)
	}
	return b
}
