package proxy

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/localsync"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// gateway is the proxy in front of an upstream that answers 200 "up".
func gateway(t testing.TB, yaml string, store sluice.Store) *httptest.Server {
	t.Helper()
	return gatewayTo(t, yaml, store, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "up") }), Deps{})
}

// gatewayTo is the proxy on store, with deps (its Guard made here), in
// front of upstream.
func gatewayTo(t testing.TB, yaml string, store sluice.Store, upstream http.Handler, deps Deps) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	return gatewayURL(t, yaml, store, u, deps)
}

// gatewayURL is the proxy on store, with deps (its Guard made here), in
// front of the upstream at u.
func gatewayURL(t testing.TB, yaml string, store sluice.Store, u *url.URL, deps Deps) *httptest.Server {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	var local sluice.Store
	if _, ok := store.(*memstore.Store); !ok {
		local = memstore.New(memstore.Options{})
	}
	g, err := guard.New(store, guard.Options{Timeout: cfg.Store.Timeout, Local: local})
	if err != nil {
		t.Fatal(err)
	}
	deps.Guard = g
	h, err := New(cfg, deps, u, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string, header ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// Policies apply by pattern and key: each limit per key, 429 past it with
// Retry-After, other routes and keys untouched, a shadow policy never
// denying.
func TestPolicies(t *testing.T) {
	srv := gateway(t, `
policies:
  - {name: api, limit: 2/1h, key: "header:X-Key", match: "GET /api/"}
  - {name: watch, limit: 1/1h, key: "header:X-Key", match: "/api/", shadow: true}
`, memstore.New(memstore.Options{}))
	for i, want := range []int{200, 200, 429} {
		if resp := get(t, srv.URL+"/api/x", "X-Key", "a"); resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
		} else if want == 429 && resp.Header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	if resp := get(t, srv.URL+"/api/x", "X-Key", "b"); resp.StatusCode != 200 {
		t.Fatalf("another key: %d", resp.StatusCode)
	}
	if resp := get(t, srv.URL+"/other", "X-Key", "a"); resp.StatusCode != 200 {
		t.Fatalf("another route: %d", resp.StatusCode)
	}
}

// Redis down under each fail_mode: local enforces the limit in memory,
// open lets requests through, closed answers 503; concurrency slots
// follow their policy's mode too. Each request is counted once, under its
// policy, with the outcome that decided it.
func TestFailModes(t *testing.T) {
	redis := redistest.Standalone(t)
	fp := faultproxy.Start(t, redis.Addr)
	rs, err := redisstore.Open(redis.URLVia(fp.Addr), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	var mu sync.Mutex
	counted := map[string]int{}
	count := func(policy string, o guard.Outcome, identity string, _ *sluice.Decision, _ time.Time) {
		mu.Lock()
		counted[policy+" "+o.String()+" "+identity]++
		mu.Unlock()
	}
	srv := gatewayTo(t, `
store: {timeout: 200ms}
policies:
  - {name: local, limit: 2/1h, key: "header:X-Key", match: "/local"}
  - {name: open, limit: 1/1h, key: "header:X-Key", match: "/open", fail_mode: open}
  - {name: closed, limit: 1/1h, key: "header:X-Key", match: "/closed", fail_mode: closed}
  - {name: uploads, concurrency: 2, key: "header:X-Key", match: "/upload", fail_mode: open}
`, rs, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "up") }), Deps{Accounting: tally{check: count}})
	fp.Down()
	for i := range 3 {
		want := 200
		if i == 2 {
			want = 429
		}
		if resp := get(t, srv.URL+"/local", "X-Key", "a"); resp.StatusCode != want {
			t.Fatalf("local, request %d: %d, want %d", i, resp.StatusCode, want)
		}
		if resp := get(t, srv.URL+"/open", "X-Key", "a"); resp.StatusCode != 200 {
			t.Fatalf("open, request %d: %d", i, resp.StatusCode)
		}
		if resp := get(t, srv.URL+"/closed", "X-Key", "a"); resp.StatusCode != 503 {
			t.Fatalf("closed, request %d: %d", i, resp.StatusCode)
		}
		if resp := get(t, srv.URL+"/upload", "X-Key", "a"); resp.StatusCode != 200 {
			t.Fatalf("concurrency, open, request %d: %d", i, resp.StatusCode)
		}
	}
	want := map[string]int{
		"local local_allowed a": 2, "local local_denied a": 1,
		"open failed_open a":     3,
		"closed failed_closed a": 3,
		"uploads failed_open a":  3,
	}
	mu.Lock()
	defer mu.Unlock()
	if !maps.Equal(counted, want) {
		t.Fatalf("counted %v; want %v", counted, want)
	}
}

// In local-sync mode the store keeps the keys it is handed: a key built
// in the middleware's buffer stays the key it was after later requests
// have been through, so an exhausted client stays exhausted.
func TestLocalSyncKeysOutliveTheirRequest(t *testing.T) {
	redistest.HourAhead()
	redis := redistest.Standalone(t)
	rs, err := redisstore.Open(redis.URL(), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	ls, err := localsync.New(localsync.Options{Shared: rs, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close() })
	srv := gateway(t, `policies: [{name: p, limit: fixed_window 2/1h, key: "header:X-User", match: /}]`, ls)
	for range 2 {
		get(t, srv.URL, "X-User", "alice")
	}
	for i := range 200 {
		if resp := get(t, srv.URL, "X-User", fmt.Sprintf("m%04d", i)); resp.StatusCode != 200 {
			t.Fatalf("user %d: %d", i, resp.StatusCode)
		}
	}
	if resp := get(t, srv.URL, "X-User", "alice"); resp.StatusCode != 429 {
		t.Fatalf("alice after 200 other users: %d, want 429", resp.StatusCode)
	}
}

// An upstream that is down gets a 502 with a problem body; one that does
// not answer in time, a 504.
func TestUpstreamFailures(t *testing.T) {
	cfg, err := config.Parse("test.yaml", []byte("policies: [{name: p, limit: 100/1h, match: /}]"))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := guard.New(memstore.New(memstore.Options{}), guard.Options{})
	down, _ := url.Parse("http://127.0.0.1:1")
	h, err := New(cfg, Deps{Guard: g}, down, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp := get(t, srv.URL+"/x")
	if resp.StatusCode != 502 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("upstream down: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer slow.Close()
	cfg, err = config.Parse("test.yaml", []byte("listeners: {proxy_timeout: 200ms}\npolicies: [{name: p, limit: 100/1h, match: /}]"))
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(slow.URL)
	h, _ = New(cfg, Deps{Guard: g}, u, slog.New(slog.DiscardHandler))
	rp := httptest.NewServer(h)
	defer rp.Close()
	if resp := get(t, rp.URL+"/x"); resp.StatusCode != 504 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("upstream hung: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// A request without the header its policy keys on is limited by the
// client's address by default (3 of 20 served on 3/1h), refused under
// missing: deny, and passed under missing: skip.
func TestMissingKeyInProxy(t *testing.T) {
	redistest.HourAhead()
	for missing, want := range map[string]int{"": 3, "client_ip": 3, "deny": 0, "skip": 20} {
		srv := gateway(t, fmt.Sprintf(`
policies:
  - {name: api, limit: fixed_window 3/1h, key: "header:X-API-Key", match: "/", missing: %q}
`, missing), memstore.New(memstore.Options{}))
		served := 0
		for range 20 {
			if get(t, srv.URL+"/").StatusCode == 200 {
				served++
			}
		}
		if served != want {
			t.Errorf("missing: %q: %d of 20 served without X-API-Key; want %d", missing, served, want)
		}
	}
}

// A body of a declared length is sent to the upstream without being read
// past its end. The transport read it once more, to check it ended there,
// and on a client's connection that read raced net/http's own read of what
// is left once the answer's headers go out, which closes the body: when
// the transport came second it took the closed body for a failed send and
// closed the upstream connection, and the client got a cut answer.
func TestBodyNotReadPastItsLength(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body) // all of it first: HTTP/1 reads no more of a body once the answer starts
		w.Write(b)
	})
	up := httptest.NewServer(echo)
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	cfg, _ := config.Parse("test.yaml", []byte("policies: [{name: p, limit: 100/1h, match: /}]"))
	g, _ := guard.New(memstore.New(memstore.Options{}), guard.Options{})
	h, err := New(cfg, Deps{Guard: g}, u, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("0123456789"), 100_000)
	b := &endWatch{b: body}
	req := httptest.NewRequest("POST", "/upload", b)
	req.ContentLength = int64(len(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), body) {
		t.Fatalf("%d, %d bytes back of %d", rec.Code, rec.Body.Len(), len(body))
	}
	if b.pastEnd.Load() != 0 {
		t.Fatalf("the body was read %d times past its end", b.pastEnd.Load())
	}
}

// endWatch counts the reads of b once all of it was read.
type endWatch struct {
	b       []byte
	read    atomic.Int64
	pastEnd atomic.Int64
}

func (e *endWatch) Read(p []byte) (int, error) {
	off := e.read.Load()
	if off == int64(len(e.b)) {
		e.pastEnd.Add(1)
		return 0, io.EOF
	}
	n := copy(p, e.b[off:])
	e.read.Add(int64(n))
	return n, nil
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// A client that asks before it uploads (Expect: 100-continue, as curl does
// for large bodies) is told 429 without sending its body, and an allowed
// one sends it, intact, to the upstream.
func TestExpectContinue(t *testing.T) {
	var got atomic.Int64
	echoLen := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Store(n)
		fmt.Fprint(w, n)
	})
	srv := gatewayTo(t, "policies: [{name: p, limit: 1/1h, match: /upload}]", memstore.New(memstore.Options{}), echoLen, Deps{})
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ExpectContinueTimeout = time.Hour // the body goes only once the proxy asks for it
	defer tr.CloseIdleConnections()
	const size = 4 << 20
	for i, want := range []int{200, 429} {
		body := &countingReader{r: bytes.NewReader(make([]byte, size))}
		req, _ := http.NewRequest("POST", srv.URL+"/upload", body)
		req.ContentLength = size
		req.Header.Set("Expect", "100-continue")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode != want:
			t.Fatalf("request %d: %d %s, want %d", i, resp.StatusCode, answer, want)
		case want == 200 && (string(answer) != fmt.Sprint(size) || got.Load() != size):
			t.Fatalf("the upstream read %s bytes of %d", answer, size)
		case want == 429 && body.n.Load() != 0:
			t.Fatalf("a refused upload sent %d bytes of its body", body.n.Load())
		}
	}
}

// An upstream that answers an upload before reading all of it (a body
// over its size limit refused at once, as nginx's client_max_body_size
// and most frameworks do) gets its answer to the client through the
// proxy, and the proxy goes on serving: not a 502 because the upstream
// stopped reading, nor a connection reset under the client's upload, nor
// an upstream failure counted.
func TestUpstreamAnswersBeforeReadingTheUpload(t *testing.T) {
	refuse := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/upload" {
			io.CopyN(io.Discard, r.Body, 1024)
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		io.WriteString(w, "up")
	})
	var failures atomic.Int64
	srv := gatewayTo(t, "policies: [{name: p, limit: 100/1h, match: /}]", memstore.New(memstore.Options{}), refuse,
		Deps{Accounting: tally{upstreamFailed: func(string) { failures.Add(1) }}})
	for i := range 3 {
		resp, err := http.Post(srv.URL+"/upload", "application/octet-stream", bytes.NewReader(make([]byte, 32<<20)))
		if err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || string(b) != "too large\n" {
			t.Fatalf("upload %d: %d %q, want the upstream's 413", i, resp.StatusCode, b)
		}
		if resp := get(t, srv.URL+"/after"); resp.StatusCode != 200 {
			t.Fatalf("after upload %d: %d", i, resp.StatusCode)
		}
	}
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d upstream failures counted for answers the upstream gave", n)
	}
}

// Concurrent requests reuse the proxy's connections to its upstream: 32
// clients sending 40 requests each open at most a connection or two per
// client, where net/http's default of 2 idle connections per host closed
// nearly every one after its request (a new TCP connection, and one in
// TIME_WAIT, per request under load).
func TestUpstreamConnectionsReused(t *testing.T) {
	var dials atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "up") }))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	// Idle connections kept an hour: a busy machine's pause past the
	// default second is not what this counts.
	srv := gatewayURL(t, "listeners: {upstream_idle_timeout: 1h}\npolicies: [{name: p, limit: 1000000/1h, match: /}]", memstore.New(memstore.Options{}), u, Deps{})
	const clients, each = 32, 40
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range each {
				req, _ := http.NewRequest("GET", srv.URL+"/x", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	t.Logf("%d connections to the upstream for %d requests", dials.Load(), clients*each)
	if n := dials.Load(); n > 2*clients {
		t.Fatalf("%d connections to the upstream for %d requests from %d clients; want at most %d", n, clients*each, clients, 2*clients)
	}
}

// The proxy closes a connection to its upstream once it has been idle for
// listeners.upstream_idle_timeout, so that an upstream with a short
// keep-alive timeout (Node.js and uvicorn 5s, Gunicorn 2s) never closes one
// under a request the proxy is sending: that request would fail, and a
// POST cannot be sent again. Here the upstream never closes an idle
// connection itself, so a connection that closes was closed by the proxy;
// the next POST goes on a new one, and every POST is answered by the
// upstream.
func TestUpstreamIdleConnectionsClosedFirst(t *testing.T) {
	states := make(chan http.ConnState, 16)
	var bodies atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, _ := io.ReadAll(r.Body); string(b) == "order" {
			bodies.Add(1)
		}
		io.WriteString(w, "up")
	}))
	up.Config.IdleTimeout = time.Hour
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew || s == http.StateClosed {
			states <- s
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	srv := gatewayURL(t, "listeners: {upstream_idle_timeout: 50ms}\npolicies: [{name: p, limit: 1000000/1h, match: /}]", memstore.New(memstore.Options{}), u, Deps{})
	post := func() {
		t.Helper()
		resp, err := http.Post(srv.URL+"/orders", "text/plain", strings.NewReader("order"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST through the proxy: %d", resp.StatusCode)
		}
	}
	next := func(want http.ConnState) {
		t.Helper()
		select {
		case s := <-states:
			if s != want {
				t.Fatalf("the upstream's connection went %v; want %v", s, want)
			}
		case <-time.After(30 * time.Second): // a guard against hanging: the event decides
			t.Fatalf("no %v connection at the upstream", want)
		}
	}
	post()
	next(http.StateNew)
	next(http.StateClosed) // by the proxy: the upstream keeps idle ones an hour
	post()
	next(http.StateNew)
	if n := bodies.Load(); n != 2 {
		t.Fatalf("the upstream read %d of the 2 POSTs' bodies", n)
	}
}

// Every way the upstream fails a request is told to
// Accounting.CountUpstreamFailure once and logged: refused (502), no
// headers in time (504), and an answer cut mid-body, which reaches the
// client as a cut answer and was logged only at debug level.
func TestUpstreamFailuresCounted(t *testing.T) {
	var mu sync.Mutex
	failed := map[string]int{}
	deps := Deps{Accounting: tally{upstreamFailed: func(reason string) { mu.Lock(); failed[reason]++; mu.Unlock() }}}
	cut := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(200)
		io.WriteString(w, "part of it")
		w.(http.Flusher).Flush()
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	})
	var logs logbuf.Buffer
	up := httptest.NewServer(cut)
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	cfg, _ := config.Parse("test.yaml", []byte("listeners: {proxy_timeout: 200ms}\npolicies: [{name: p, limit: 100/1h, match: /}]"))
	g, _ := guard.New(memstore.New(memstore.Options{}), guard.Options{})
	deps.Guard = g
	h, err := New(cfg, deps, u, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("a cut answer read whole: %q", body)
	}
	// The count comes as the proxy's copy fails; the client saw the cut
	// once the proxy's handler ended.
	mu.Lock()
	got := failed["cut"]
	mu.Unlock()
	if got != 1 || !strings.Contains(logs.String(), "the upstream's answer was cut") {
		t.Fatalf("cut %d times; log:\n%s", got, logs.String())
	}

	down, _ := url.Parse("http://127.0.0.1:1")
	h, _ = New(cfg, deps, down, slog.New(slog.DiscardHandler))
	refused := httptest.NewServer(h)
	t.Cleanup(refused.Close)
	if resp := get(t, refused.URL+"/x"); resp.StatusCode != 502 {
		t.Fatalf("upstream down: %d", resp.StatusCode)
	}
	hung := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-hung:
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(hung) })
	u, _ = url.Parse(slow.URL)
	h, _ = New(cfg, deps, u, slog.New(slog.DiscardHandler))
	timing := httptest.NewServer(h)
	t.Cleanup(timing.Close)
	if resp := get(t, timing.URL+"/x"); resp.StatusCode != 504 {
		t.Fatalf("upstream hung: %d", resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := map[string]int{"cut": 1, "unreachable": 1, "timeout": 1}; !maps.Equal(failed, want) {
		t.Fatalf("counted %v; want %v", failed, want)
	}
}

// tally is an Accounting that tells each count to its function, if set.
type tally struct {
	check          func(policy string, o guard.Outcome, identity string, closest *sluice.Decision, start time.Time)
	settled        func(policy string, estimate, actual int64, unread bool)
	unknownPlan    func(policy, plan string)
	upstreamFailed func(reason string)
}

func (t tally) CountCheck(policy string, o guard.Outcome, identity string, closest *sluice.Decision, start time.Time) {
	if t.check != nil {
		t.check(policy, o, identity, closest, start)
	}
}

func (t tally) CountSettled(policy string, estimate, actual int64, unread bool) {
	if t.settled != nil {
		t.settled(policy, estimate, actual, unread)
	}
}

func (t tally) NoteUnknownPlan(policy, plan string) {
	if t.unknownPlan != nil {
		t.unknownPlan(policy, plan)
	}
}

func (t tally) CountUpstreamFailure(reason string) {
	if t.upstreamFailed != nil {
		t.upstreamFailed(reason)
	}
}
