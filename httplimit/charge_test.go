package httplimit_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// chargeStores are the stores the answer-charged policies are tried on:
// memory, and a real redis-server.
func chargeStores(t *testing.T) map[string]sluice.Store {
	rs, err := redisstore.Open(redistest.Standalone(t).URL(), redisstore.Options{Prefix: redistest.UniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return map[string]sluice.Store{"memory": memstore.New(memstore.Options{}), "redis": rs}
}

func chargeServer(t *testing.T, store sluice.Store, p httplimit.Policy, h http.HandlerFunc, opts ...func(*httplimit.Options)) *httptest.Server {
	t.Helper()
	if p.Key == nil {
		p.Key = httplimit.APIKey("X-User")
	}
	o := httplimit.Options{Store: store, Policies: []httplimit.Policy{p}}
	for _, f := range opts {
		f(&o)
	}
	m, err := httplimit.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(h))
	t.Cleanup(srv.Close)
	return srv
}

// "5 failed logins per 15 minutes": a user who logs in right is never
// charged, and one who fails five times is refused the sixth attempt
// before the handler sees it.
func TestFailedLoginsOnlyAreCharged(t *testing.T) {
	for name, store := range chargeStores(t) {
		t.Run(name, func(t *testing.T) {
			var tries atomic.Int64
			login := func(w http.ResponseWriter, r *http.Request) {
				tries.Add(1)
				if r.Header.Get("X-Password") != "right" {
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				io.WriteString(w, "welcome")
			}
			srv := chargeServer(t, store, httplimit.Policy{Name: "failed-logins", Pattern: "POST /login",
				Limit: sluice.Limit{Rate: 5, Period: 15 * time.Minute}, ChargeStatus: []int{401, 403}}, login)
			try := func(password string) int {
				resp, err := postHeaders(srv.URL+"/login", "X-User", "alice", "X-Password", password)
				if err != nil {
					t.Fatal(err)
				}
				return resp.StatusCode
			}
			for i := range 10 {
				if got := try("right"); got != 200 {
					t.Fatalf("right login %d: %d, want 200: logging in right must cost nothing", i+1, got)
				}
			}
			for i := range 5 {
				if got := try("wrong"); got != 401 {
					t.Fatalf("failed login %d: %d, want 401", i+1, got)
				}
			}
			before := tries.Load()
			if got := try("right"); got != 429 {
				t.Fatalf("after 5 failures: %d, want 429", got)
			}
			if tries.Load() != before {
				t.Fatal("the refused attempt reached the handler")
			}
		})
	}
}

// tokenPolicy is the LLM policy of the docs: 10000 tokens a minute, 500
// taken before the answer, settled to the answer's usage.total_tokens.
func tokenPolicy() httplimit.Policy {
	return httplimit.Policy{Name: "tokens", Limit: sluice.Limit{Rate: 10000, Period: time.Minute}, Cost: 500,
		CostFrom: httplimit.CostFromJSON("usage.total_tokens")}
}

// postHeaders posts an empty body to url with the headers of the name and
// value pairs (an empty value is not sent), and returns the answer with
// its body read.
func postHeaders(url string, pairs ...string) (*http.Response, error) {
	req, _ := http.NewRequest("POST", url, nil)
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			req.Header.Set(pairs[i], pairs[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

func post(t *testing.T, url, user string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"model":"m"}`))
	req.Header.Set("X-User", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Every answer used 3000 tokens: requests 1 to 4 are served (the 4th
// starts at 9000 used, with room for its estimate), the 5th is refused
// with Retry-After; the same with the usage in the last event of a
// stream.
func TestTokensSettledFromTheAnswer(t *testing.T) {
	answers := map[string]http.HandlerFunc{
		"json": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"x","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":1000,"completion_tokens":2000,"total_tokens":3000}}`)
		},
		"sse": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, ev := range []string{`{"choices":[{"delta":{"content":"h"}}],"usage":null}`, `{"choices":[{"delta":{"content":"i"}}],"usage":null}`,
				`{"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":2000,"total_tokens":3000}}`, `[DONE]`} {
				fmt.Fprintf(w, "data: %s\n\n", ev)
				w.(http.Flusher).Flush()
			}
		},
	}
	for name, store := range chargeStores(t) {
		for kind, h := range answers {
			t.Run(name+"/"+kind, func(t *testing.T) {
				var settled []httplimit.Settlement
				var mu sync.Mutex
				srv := chargeServer(t, store, tokenPolicy(), h, func(o *httplimit.Options) {
					o.OnSettle = func(_ *http.Request, s httplimit.Settlement) { mu.Lock(); settled = append(settled, s); mu.Unlock() }
				})
				for i := range 4 {
					if resp, body := post(t, srv.URL, kind); resp.StatusCode != 200 || !strings.Contains(body, "3000") {
						t.Fatalf("request %d: %d %q, want 200 and the answer", i+1, resp.StatusCode, body)
					}
				}
				resp, _ := post(t, srv.URL, kind)
				if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
					t.Fatalf("request 5: %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
				}
				mu.Lock()
				defer mu.Unlock()
				for _, s := range settled {
					if s.Estimate != 500 || s.Actual != 3000 || s.Err != nil {
						t.Fatalf("settled %+v; want 500 settled to 3000", s)
					}
				}
			})
		}
	}
}

// The stream is not held back while its cost is looked for: an event
// reaches the client before the handler writes the next.
func TestStreamedAnswerIsNotBuffered(t *testing.T) {
	read := make(chan struct{})
	h := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-read: // the client has the first event
		case <-time.After(time.Minute):
			return
		}
		io.WriteString(w, "data: {\"usage\":{\"total_tokens\":700}}\n\ndata: [DONE]\n\n")
	}
	srv := chargeServer(t, memstore.New(memstore.Options{}), tokenPolicy(), h)
	req, _ := http.NewRequest("POST", srv.URL, nil)
	req.Header.Set("X-User", "bob")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: {\"n\":1}\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	close(read)
}

// The writer the handler gets keeps the interfaces of the one beneath:
// a handler that flushes or hijacks (a websocket upgrade) still can.
func TestChargedWriterKeepsItsInterfaces(t *testing.T) {
	var flusher, hijacker, readerFrom bool
	h := func(w http.ResponseWriter, _ *http.Request) {
		_, flusher = w.(http.Flusher)
		_, hijacker = w.(http.Hijacker)
		_, readerFrom = w.(io.ReaderFrom)
		w.Header().Set("X-Cost", "3")
		io.Copy(w, strings.NewReader("abc")) // through ReadFrom
	}
	store := memstore.New(memstore.Options{})
	p := httplimit.Policy{Name: "bytes", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 100, Period: time.Hour}, Cost: 10, CostFrom: httplimit.CostFromBytes()}
	srv := chargeServer(t, store, p, h)
	get(t, srv.URL, "X-User", "carol")
	if !flusher || !hijacker || !readerFrom {
		t.Fatalf("flusher %v, hijacker %v, reader from %v; want all", flusher, hijacker, readerFrom)
	}
	l, _ := sluice.NewLimiter(store, p.Limit, sluice.LimiterOptions{})
	if d, _ := l.Peek(t.Context(), "bytes\x00carol"); d.Remaining != 97 {
		t.Fatalf("%d left after a 3-byte answer estimated at 10; want 97", d.Remaining)
	}
}

// An answer whose cost cannot be read keeps the estimate, and says why,
// logged and to OnSettle: the field missing, not a number, negative, past
// 2^53, a body that is not JSON; a header missing or not a number.
func TestUnreadableCostKeepsTheEstimate(t *testing.T) {
	cases := []struct {
		name   string
		source httplimit.CostSource
		header string
		body   string
		why    string
	}{
		{"missing", httplimit.CostFromJSON("usage.total_tokens"), "", `{"usage":{}}`, "does not report"},
		{"not a number", httplimit.CostFromJSON("usage.total_tokens"), "", `{"usage":{"total_tokens":"many"}}`, "not a number"},
		{"negative", httplimit.CostFromJSON("usage.total_tokens"), "", `{"usage":{"total_tokens":-5}}`, "negative"},
		{"past 2^53", httplimit.CostFromJSON("usage.total_tokens"), "", `{"usage":{"total_tokens":18014398509481985}}`, "past 2^53"},
		{"fraction", httplimit.CostFromJSON("usage.total_tokens"), "", `{"usage":{"total_tokens":1.5}}`, "not a whole number"},
		{"not json", httplimit.CostFromJSON("usage.total_tokens"), "", `<html>` + strings.Repeat("x", 2<<20) + `</html>`, "first MiB"},
		{"no header", httplimit.CostFromHeader("X-Cost"), "", "ok", "does not report"},
		{"bad header", httplimit.CostFromHeader("X-Cost"), "lots", "ok", "not a whole number"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs logbuf.Buffer
			var got httplimit.Settlement
			h := func(w http.ResponseWriter, _ *http.Request) {
				if c.header != "" {
					w.Header().Set("X-Cost", c.header)
				}
				io.WriteString(w, c.body)
			}
			p := httplimit.Policy{Name: "p", Limit: sluice.Limit{Rate: 1000, Period: time.Hour}, Cost: 40, CostFrom: c.source}
			srv := chargeServer(t, memstore.New(memstore.Options{}), p, h, func(o *httplimit.Options) {
				o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				o.OnSettle = func(_ *http.Request, s httplimit.Settlement) { got = s }
			})
			get(t, srv.URL, "X-User", "dan")
			if got.Actual != 40 || got.Err == nil || !strings.Contains(got.Err.Error(), c.why) {
				t.Fatalf("settled %+v; want the estimate 40 kept, because %q", got, c.why)
			}
			if !strings.Contains(logs.String(), "the estimate stands") {
				t.Fatalf("not logged: %q", logs.String())
			}
		})
	}
}

func TestParseCostSource(t *testing.T) {
	for _, spec := range []string{"json:usage.total_tokens", "header:X-Tokens", "bytes"} {
		c, err := httplimit.ParseCostSource(spec)
		if err != nil || c.String() != spec && c.String() != "header:X-Tokens" {
			t.Errorf("%q: %v, %v", spec, c, err)
		}
	}
	for _, spec := range []string{"", "json:", "json:a..b", "header:", "bytes:1", "body"} {
		if _, err := httplimit.ParseCostSource(spec); err == nil {
			t.Errorf("%q accepted", spec)
		}
	}
}

// A handler that sets its cost's header and writes nothing is settled
// from that header: the answer is a 200 with the headers it set.
func TestCostHeaderOfAnAnswerWithNoBody(t *testing.T) {
	var got httplimit.Settlement
	h := func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("X-Cost", "7") }
	p := httplimit.Policy{Name: "p", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 100, Period: time.Hour}, Cost: 1, CostFrom: httplimit.CostFromHeader("X-Cost")}
	srv := chargeServer(t, memstore.New(memstore.Options{}), p, h, func(o *httplimit.Options) {
		o.OnSettle = func(_ *http.Request, s httplimit.Settlement) { got = s }
	})
	get(t, srv.URL, "X-User", "fay")
	if got.Actual != 7 || got.Err != nil {
		t.Fatalf("settled %+v; want 7 from the header", got)
	}
}

// A request allowed because the store failed (fail_mode open) took
// nothing, so its answer settles nothing: settling its estimate down to
// the answer's usage once Redis is back would give back what was never
// taken, and its client would get more than the limit.
func TestFailedOpenChargeSettlesNothing(t *testing.T) {
	p := tokenPolicy()
	p.Limit = sluice.Limit{Rate: 10000, Period: 720 * time.Hour} // GCRA: a refund is room, whatever took it
	p.FailMode = sluice.FailOpen
	during, left := acrossAnOutage(t, p,
		func(res httplimit.Result) bool { return res.Outcome == guard.Allowed },
		func(resp *http.Response, _ httplimit.Result) int64 {
			n, _ := strconv.ParseInt(resp.Header.Get("X-RateLimit-Remaining"), 10, 64)
			return n
		})
	if during.Outcome != guard.FailedOpen {
		t.Fatalf("the request during the outage: %v, want failed_open", during.Outcome)
	}
	if left != 500 {
		t.Fatalf("after an answer of 100 to a request that failed open: %d left after this one's 500, want 500 (1000 as before it, less 500)", left)
	}
}

// acrossAnOutage runs p on Redis through a fault proxy. alice's first
// request is answered 9000 tokens (1000 left of 10000); with Redis down
// she sends one whose answer, 100, waits until Redis is back and decides
// again; then one answered 0, whose left is returned, with the result of
// the request during the outage. decided tells a request whose policy
// Redis decided (a connection the outage broke fails one call).
func acrossAnOutage(t *testing.T, p httplimit.Policy, decided func(httplimit.Result) bool, left func(*http.Response, httplimit.Result) int64) (during httplimit.Result, after int64) {
	t.Helper()
	redis := redistest.Standalone(t)
	proxy := faultproxy.Start(t, redis.Addr)
	store, err := redisstore.Open(redis.URLVia(proxy.Addr), redisstore.Options{Prefix: redistest.UniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	entered, resume := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	results := map[string]httplimit.Result{} // each client's last
	srv := chargeServer(t, store, p, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Wait") != "" {
			entered <- struct{}{}
			<-resume
		}
		fmt.Fprintf(w, `{"usage":{"total_tokens":%s}}`, r.Header.Get("X-Used"))
	}, func(o *httplimit.Options) {
		o.OnResult = func(r *http.Request, res *httplimit.Result) {
			mu.Lock()
			results[r.Header.Get("X-User")] = *res
			mu.Unlock()
		}
	})
	result := func(user string) httplimit.Result {
		mu.Lock()
		defer mu.Unlock()
		return results[user]
	}
	// send sends requests of user until Redis decides one, and returns
	// what it left.
	send := func(user, used string) int64 {
		for deadline := time.Now().Add(30 * time.Second); ; {
			resp, err := postHeaders(srv.URL, "X-User", user, "X-Used", used)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if res := result(user); decided(res) {
				return left(resp, res)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: requests still failed 30 s after Redis came back", user)
			}
		}
	}
	send("alice", "9000") // 1000 left
	proxy.Down()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := postHeaders(srv.URL, "X-User", "alice", "X-Used", "100", "X-Wait", "yes"); err != nil {
			t.Error(err)
		}
	}()
	<-entered
	during = result("alice")
	proxy.Up()
	for range 3 { // Redis decides again, on every connection the outage broke
		send("probe", "0")
	}
	close(resume) // its answer, 100, settles nothing: it took nothing
	<-done
	return during, send("alice", "0")
}

// A shadow policy that would have denied took nothing, so the answer
// settles nothing on it: its count stays what the enforced one would
// have been.
func TestShadowDeniedChargeSettlesNothing(t *testing.T) {
	p := tokenPolicy()
	p.Limit, p.Shadow = sluice.Limit{Rate: 1000, Period: 720 * time.Hour}, true
	var shadowLeft atomic.Int64
	srv := chargeServer(t, memstore.New(memstore.Options{}), p, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"usage":{"total_tokens":%s}}`, r.Header.Get("X-Used"))
	}, func(o *httplimit.Options) {
		o.OnResult = func(_ *http.Request, res *httplimit.Result) { shadowLeft.Store(res.Decisions[0].Remaining) }
	})
	for i, used := range []string{"900", "100", "0"} {
		resp, err := postHeaders(srv.URL, "X-User", "alice", "X-Used", used)
		if err != nil {
			t.Fatal(err)
		}
		// 1000 less 500 at the door; then 100 left, which would deny 500
		// twice over.
		if want := []int64{500, 100, 100}[i]; resp.StatusCode != 200 || shadowLeft.Load() != want {
			t.Fatalf("request %d: %d, the shadow policy's decision left %d, want %d", i+1, resp.StatusCode, shadowLeft.Load(), want)
		}
	}
}

// A shadow policy whose take failed with the store took nothing, so its
// answer settles nothing on it once the store is back: giving back the
// estimate less the answer would give the shadow count room it never
// lost, and it would under-report what the enforced limit would do.
func TestShadowChargeWhoseTakeFailedSettlesNothing(t *testing.T) {
	p := tokenPolicy()
	p.Limit, p.Shadow = sluice.Limit{Rate: 10000, Period: 720 * time.Hour}, true // GCRA: a refund is room, whatever took it
	during, left := acrossAnOutage(t, p,
		func(res httplimit.Result) bool { return !res.ShadowFailed },
		func(_ *http.Response, res httplimit.Result) int64 { return res.Decisions[0].Remaining })
	if !during.ShadowFailed || during.Outcome != guard.Allowed {
		t.Fatalf("the request during the outage: %+v, want allowed with its shadow failed", during)
	}
	if left != 500 {
		t.Fatalf("after an answer of 100 to a request whose shadow take failed: %d left after this one's 500, want 500 (1000 as before it, less 500)", left)
	}
}
