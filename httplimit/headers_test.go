package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
)

var (
	policyItem = regexp.MustCompile(`^"[A-Za-z0-9._:-]+";q=[0-9]+;w=[0-9]+$`)
	rateItem   = regexp.MustCompile(`^"[A-Za-z0-9._:-]+";r=[0-9]+;t=[0-9]+$`)
	number     = regexp.MustCompile(`^[0-9]+$`)
)

// FuzzRateHeaders: whatever the decisions, every header value is a
// well-formed Structured Field list or number, with no CR or LF.
func FuzzRateHeaders(f *testing.F) {
	f.Add("api", int64(10), int64(time.Minute), int64(3), int64(time.Second), "burst", int64(1000), int64(time.Hour), int64(-5), int64(0))
	f.Fuzz(func(t *testing.T, name1 string, rate1, period1, rem1, reset1 int64, name2 string, rate2, period2, rem2, reset2 int64) {
		var policies []*Policy
		var ds []sluice.Decision
		for _, c := range []struct {
			name                     string
			rate, period, rem, reset int64
		}{{name1, rate1, period1, rem1, reset1}, {name2, rate2, period2, rem2, reset2}} {
			l := sluice.Limit{Rate: max(c.rate%1_000_000, 1), Period: time.Duration(max(c.period%int64(24*time.Hour), int64(time.Millisecond)))}
			l.Period = l.Period.Truncate(time.Microsecond)
			p := &Policy{Name: c.name, Limit: l, Key: Route()}
			if p.prepare() != nil {
				return // names and limits are validated before headers
			}
			policies = append(policies, p)
			ds = append(ds, sluice.Decision{Limit: l, Remaining: c.rem, ResetAfter: time.Duration(c.reset % int64(1000*time.Hour))})
		}
		for n := 1; n <= 2; n++ {
			h := http.Header{}
			var hb headerBuf
			var buf []byte
			hb.set(h, &buf, time.Unix(1_700_000_000, 0), ResetUnix, n-1, policies[:n], ds[:n])
			for k, vs := range h {
				for _, v := range vs {
					if strings.ContainsAny(v, "\r\n") {
						t.Fatalf("%s: %q holds CR or LF", k, v)
					}
				}
			}
			for _, k := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
				if !number.MatchString(h.Get(k)) {
					t.Fatalf("%s = %q", k, h.Get(k))
				}
			}
			for _, item := range strings.Split(h.Get("Ratelimit-Policy"), ", ") {
				if !policyItem.MatchString(item) {
					t.Fatalf("RateLimit-Policy item %q", item)
				}
			}
			for _, item := range strings.Split(h.Get("Ratelimit"), ", ") {
				if !rateItem.MatchString(item) {
					t.Fatalf("RateLimit item %q", item)
				}
			}
		}
	})
}

// A refusal's body is what encoding/json writes for it, for every kind of
// refusal, policy name and Retry-After.
func TestProblemBodyIsWhatJSONWrites(t *testing.T) {
	type problem struct {
		Type       string `json:"type"`
		Title      string `json:"title"`
		Status     int    `json:"status"`
		Detail     string `json:"detail"`
		Policy     string `json:"policy,omitempty"`
		RetryAfter int64  `json:"retry_after"`
	}
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.StringMatching(`[A-Za-z0-9._:-]{1,64}`).Draw(t, "name")
		p := &Policy{Name: name, Concurrency: rapid.Int64Range(1, 1<<40).Draw(t, "concurrency")}
		res := &Result{Policies: []*Policy{p}, Closest: rapid.IntRange(-1, 0).Draw(t, "closest"), InFlight: rapid.Bool().Draw(t, "inFlight")}
		res.Denied = rapid.Bool().Draw(t, "denied")
		status := http.StatusServiceUnavailable
		if res.Denied {
			// 403 as WriteRefusal answers it for a gateway's auth check.
			status = rapid.SampledFrom([]int{http.StatusTooManyRequests, http.StatusForbidden}).Draw(t, "status")
		}
		secs := rapid.Int64Range(1, 1<<40).Draw(t, "secs")
		want := problem{Type: "about:blank", Title: http.StatusText(status), Status: status, RetryAfter: secs}
		switch {
		case !res.Denied || res.Closest < 0:
			want.Detail = "the rate limiter is unavailable; retry shortly"
		case res.InFlight:
			want.Policy = name
			want.Detail = fmt.Sprintf("concurrency limit %q: %d requests in flight already; retry in %d s", name, p.Concurrency, secs)
		default:
			want.Policy = name
			want.Detail = fmt.Sprintf("rate limit %q exceeded; retry in %d s", name, secs)
		}
		wantBody, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendProblem([]byte("x"), status, res, secs); string(got) != "x"+string(wantBody) {
			t.Fatalf("body\n%s\nwant\n%s", got[1:], wantBody)
		}
	})
}
