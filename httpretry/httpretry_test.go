package httpretry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/httpretry"
)

// recorder replaces sleeping with recording: time is a parameter.
type recorder struct{ waits []time.Duration }

func (r *recorder) sleep(ctx context.Context, d time.Duration) error {
	r.waits = append(r.waits, d)
	return ctx.Err()
}

// limited answers 429 with retryAfter (if any) for the first n requests,
// then 200 with the request body echoed.
func limited(t *testing.T, n int64, retryAfter func() string) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if calls.Add(1) <= n {
			if v := retryAfter(); v != "" {
				w.Header().Set("Retry-After", v)
			}
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func TestHonoursDeltaSeconds(t *testing.T) {
	srv, calls := limited(t, 2, func() string { return "3" })
	rec := &recorder{}
	c := &http.Client{Transport: &httpretry.Transport{Sleep: rec.sleep}}
	resp, err := c.Get(srv.URL)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v, %v", resp, err)
	}
	if calls.Load() != 3 || len(rec.waits) != 2 || !within(rec.waits[0], 3*time.Second) || !within(rec.waits[1], 3*time.Second) {
		t.Fatalf("calls %d, waits %v; want 3 calls and two waits of 3s and up to a tenth more", calls.Load(), rec.waits)
	}
}

// within reports whether w honours a Retry-After of ra: at least ra, and
// at most a tenth more (the jitter).
func within(w, ra time.Duration) bool { return w >= ra && w <= ra+ra/10 }

// Clients told the same Retry-After do not all come back at that instant:
// each waits it plus up to a tenth more, spread.
func TestRetryAfterIsSpread(t *testing.T) {
	srv, _ := limited(t, 100, func() string { return "10" })
	rec := &recorder{}
	c := &http.Client{Transport: &httpretry.Transport{Sleep: rec.sleep, MaxAttempts: 21, MaxWait: time.Hour}}
	c.Get(srv.URL)
	distinct := map[time.Duration]bool{}
	for _, w := range rec.waits {
		if !within(w, 10*time.Second) {
			t.Fatalf("wait %v for a Retry-After of 10s; want 10s to 11s", w)
		}
		distinct[w] = true
	}
	if len(rec.waits) != 20 || len(distinct) < 15 {
		t.Fatalf("%d waits, %d distinct: %v; want 20, spread", len(rec.waits), len(distinct), rec.waits)
	}
}

// A wait that would outlast the request's deadline is not begun: the
// caller gets the 429, Retry-After included, at once.
func TestGivesUpAtOnceBeforeTheDeadline(t *testing.T) {
	srv, calls := limited(t, 100, func() string { return "20" })
	rec := &recorder{}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := (&http.Client{Transport: &httpretry.Transport{Sleep: rec.sleep}}).Do(req)
	if err != nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "20" || calls.Load() != 1 || len(rec.waits) != 0 {
		t.Fatalf("%v, %v after %d calls and waits %v; want the 429 at once", resp, err, calls.Load(), rec.waits)
	}
}

func TestHonoursHTTPDate(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	srv, _ := limited(t, 1, func() string { return now.Add(7 * time.Second).Format(http.TimeFormat) })
	rec := &recorder{}
	c := &http.Client{Transport: &httpretry.Transport{Sleep: rec.sleep, Now: func() time.Time { return now }}}
	if resp, err := c.Get(srv.URL); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v, %v", resp, err)
	}
	if len(rec.waits) != 1 || !within(rec.waits[0], 7*time.Second) {
		t.Fatalf("waits %v; want one of 7s and up to a tenth more", rec.waits)
	}
}

func TestBackoffWithFullJitterIsCapped(t *testing.T) {
	srv, _ := limited(t, 100, func() string { return "" })
	rec := &recorder{}
	c := &http.Client{Transport: &httpretry.Transport{Sleep: rec.sleep, MaxAttempts: 8, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, MaxWait: time.Hour}}
	resp, err := c.Get(srv.URL)
	if err != nil || resp.StatusCode != 429 {
		t.Fatalf("after the last attempt: %v, %v; want the 429 itself", resp, err)
	}
	if len(rec.waits) != 7 {
		t.Fatalf("%d waits for 8 attempts", len(rec.waits))
	}
	for i, w := range rec.waits {
		ceiling := min(100*time.Millisecond<<i, time.Second)
		if w < 0 || w >= ceiling {
			t.Errorf("wait %d = %v, outside [0, %v)", i+1, w, ceiling)
		}
	}
}

func TestMaxWaitIsNeverExceeded(t *testing.T) {
	srv, calls := limited(t, 100, func() string { return "20" })
	rec := &recorder{}
	c := &http.Client{Transport: &httpretry.Transport{Sleep: rec.sleep, MaxAttempts: 10, MaxWait: 45 * time.Second}}
	resp, _ := c.Get(srv.URL)
	if resp.StatusCode != 429 || calls.Load() != 3 || len(rec.waits) != 2 {
		t.Fatalf("status %d, %d calls, waits %v; want 3 calls and 40 to 44s waited", resp.StatusCode, calls.Load(), rec.waits)
	}
}

func TestReplaysBodiesAndOnlyIdempotentMethods(t *testing.T) {
	srv, calls := limited(t, 1, func() string { return "1" })
	rec := &recorder{}
	c := &http.Client{Transport: &httpretry.Transport{Sleep: rec.sleep}}
	// PUT with a replayable body: retried, body intact.
	req, _ := http.NewRequest("PUT", srv.URL, strings.NewReader("payload"))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "payload" || calls.Load() != 2 {
		t.Fatalf("PUT: body %q after %d calls", b, calls.Load())
	}
	// POST: not idempotent, not retried.
	calls.Store(0)
	resp, _ = c.Post(srv.URL, "text/plain", strings.NewReader("x"))
	if resp.StatusCode != 429 || calls.Load() != 1 {
		t.Fatalf("POST: %d after %d calls; want the 429 after one", resp.StatusCode, calls.Load())
	}
	// POST with an Idempotency-Key: retried.
	calls.Store(0)
	req, _ = http.NewRequest("POST", srv.URL, strings.NewReader("y"))
	req.Header.Set("Idempotency-Key", "abc")
	if resp, _ = c.Do(req); resp.StatusCode != 200 || calls.Load() != 2 {
		t.Fatalf("POST with Idempotency-Key: %d after %d calls", resp.StatusCode, calls.Load())
	}
	// A body that cannot be replayed: not retried.
	calls.Store(0)
	req, _ = http.NewRequest("PUT", srv.URL, io.NopCloser(strings.NewReader("z")))
	req.GetBody = nil
	if resp, _ = c.Do(req); resp.StatusCode != 429 || calls.Load() != 1 {
		t.Fatalf("unreplayable body: %d after %d calls", resp.StatusCode, calls.Load())
	}
}

func TestHonoursContext(t *testing.T) {
	srv, _ := limited(t, 100, func() string { return "1" })
	ctx, cancel := context.WithCancel(context.Background())
	c := &http.Client{Transport: &httpretry.Transport{Sleep: func(ctx context.Context, d time.Duration) error {
		cancel()
		return ctx.Err()
	}}}
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	if _, err := c.Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v; want context.Canceled", err)
	}
}

// A real wait, once: the default sleep honours a 1-second Retry-After.
func TestRealRetryAfter(t *testing.T) {
	srv, _ := limited(t, 1, func() string { return "1" })
	start := time.Now()
	resp, err := (&http.Client{Transport: &httpretry.Transport{}}).Get(srv.URL)
	if err != nil || resp.StatusCode != 200 || time.Since(start) < time.Second {
		t.Fatalf("%v, %v after %v", resp, err, time.Since(start))
	}
}
