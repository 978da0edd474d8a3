// Package httpretry is the client side of rate limiting: an
// http.RoundTripper that retries requests answered 429 Too Many Requests
// or 503 Service Unavailable.
//
// The wait before a retry is the server's Retry-After when it sends one,
// as delta-seconds ("120") or an HTTP-date, plus a uniformly random tenth
// of it at most: clients told the same time (a window that resets for
// all of them) do not all come back at that instant. Otherwise it is
// capped exponential backoff with full jitter: before retry n (1, 2, ...)
// it waits a uniformly random duration in
// [0, min(MaxDelay, BaseDelay × 2^(n−1))), so that many clients denied
// together do not come back together.
//
// It gives up, returning the last response as it is, after MaxAttempts
// attempts, or when the next wait would take the total past MaxWait (a
// Retry-After beyond it is not waited for at all) or past the request's
// context deadline (its caller then gets the 429, Retry-After included,
// at once, not an error after waiting in vain), or when the request's
// context ends. It replays only requests whose body can be replayed (no
// body, or Request.GetBody set, as http.NewRequest does for in-memory
// bodies) and, unless RetryNonIdempotent is set, only idempotent methods
// (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or requests with an
// Idempotency-Key header.
package httpretry

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Transport retries rate-limited requests. The zero value is ready to use;
// each field's zero value means its default.
type Transport struct {
	// Base performs each attempt. Default http.DefaultTransport.
	Base http.RoundTripper
	// MaxAttempts counts the first attempt too. Default 4.
	MaxAttempts int
	// MaxWait caps the total time spent waiting between attempts.
	// Default 30s.
	MaxWait time.Duration
	// BaseDelay is the first backoff's cap. Default 100ms.
	BaseDelay time.Duration
	// MaxDelay caps any one backoff. Default 10s.
	MaxDelay time.Duration
	// RetryNonIdempotent also retries POST and PATCH without an
	// Idempotency-Key. Default false.
	RetryNonIdempotent bool
	// Sleep waits d or until ctx ends. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock for HTTP-date Retry-After values. Default time.Now.
	Now func() time.Time
}

var _ http.RoundTripper = (*Transport)(nil)

// RoundTrip sends req, retrying as the package documents.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	attempts := t.MaxAttempts
	if attempts <= 0 {
		attempts = 4
	}
	maxWait := t.MaxWait
	if maxWait <= 0 {
		maxWait = 30 * time.Second
	}
	retryable := t.replayable(req)
	var waited time.Duration
	for n := 1; ; n++ {
		resp, err := base.RoundTrip(req)
		if err != nil || !retryable || n >= attempts || !rateLimited(resp) {
			return resp, err
		}
		wait, ok := t.retryAfter(resp)
		if ok {
			wait += time.Duration(rand.Int64N(int64(wait/10) + 1))
		} else {
			wait = t.backoff(n)
		}
		if waited+wait > maxWait || pastDeadline(req.Context(), wait) {
			return resp, nil
		}
		// The body is drained so that the connection can be reused.
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if err := t.sleep(req.Context(), wait); err != nil {
			return nil, err
		}
		waited += wait
		if req, err = rewind(req); err != nil {
			return nil, err
		}
	}
}

// pastDeadline reports whether ctx's deadline comes before a wait of d
// would end: the retry could never be sent.
func pastDeadline(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < d
}

func rateLimited(resp *http.Response) bool {
	return resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
}

func (t *Transport) replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	if t.RetryNonIdempotent || req.Header.Get("Idempotency-Key") != "" {
		return true
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// rewind returns req with a fresh body for another attempt.
func rewind(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Body = body
	return r, nil
}

// retryAfter parses Retry-After as delta-seconds or an HTTP-date.
func (t *Transport) retryAfter(resp *http.Response) (time.Duration, bool) {
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 || secs > int64(365*24*time.Hour/time.Second) {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	}
	when, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	return max(when.Sub(now()), 0), true
}

// backoff is full jitter: uniform in [0, min(MaxDelay, BaseDelay × 2^(n−1))).
func (t *Transport) backoff(n int) time.Duration {
	base, cap := t.BaseDelay, t.MaxDelay
	if base <= 0 {
		base = 100 * time.Millisecond
	}
	if cap <= 0 {
		cap = 10 * time.Second
	}
	ceiling := cap
	if n-1 < 32 && base<<(n-1) < cap && base<<(n-1) > 0 {
		ceiling = base << (n - 1)
	}
	return time.Duration(rand.Int64N(int64(ceiling)))
}

func (t *Transport) sleep(ctx context.Context, d time.Duration) error {
	if t.Sleep != nil {
		return t.Sleep(ctx, d)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
