package proxy

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

const tokensYAML = `policies:
  - name: tokens
    limit: sliding_log 10000/1m # exact, and nothing comes back within a test
    key: header:Authorization
    match: "POST /v1/chat/completions"
    cost:
      estimate: 500
      from: json:usage.total_tokens
  - name: failed-logins
    limit: 5/15m
    key: header:X-User
    match: "POST /login"
    charge_status: [401, 403]
`

// chargeStores are memory and a real redis-server.
func chargeStores(t *testing.T) map[string]sluice.Store {
	rs, err := redisstore.Open(redistest.Standalone(t).URL(), redisstore.Options{Prefix: redistest.UniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return map[string]sluice.Store{"memory": memstore.New(memstore.Options{}), "redis": rs}
}

// completions is an OpenAI-style upstream whose every answer used 3000
// tokens, as one JSON document or, for "stream": true, as events with
// the usage in the last before [DONE].
func completions(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	usage := `"usage":{"prompt_tokens":1200,"completion_tokens":1800,"total_tokens":3000}`
	if !strings.Contains(string(body), `"stream":true`) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c1","object":"chat.completion","choices":[{"message":{"role":"assistant","content":"hello"}}],`+usage+`}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range []string{
		`{"id":"c1","choices":[{"delta":{"content":"hel"}}],"usage":null}`,
		`{"id":"c1","choices":[{"delta":{"content":"lo"}}],"usage":null}`,
		`{"id":"c1","choices":[],` + usage + `}`,
		`[DONE]`,
	} {
		fmt.Fprintf(w, "data: %s\n\n", ev)
		w.(http.Flusher).Flush()
	}
}

func chat(t *testing.T, url, token string, stream bool) (*http.Response, string) {
	t.Helper()
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	if stream {
		body = `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`
	}
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// The proxy charges the tokens the answer reports: 10000/1m, estimate
// 500, every answer 3000 tokens: requests 1 to 4 are forwarded, the 5th
// refused with Retry-After, for a JSON answer and for a stream whose
// usage is in its last event; on memory and on Redis.
func TestProxyChargesTheAnswersTokens(t *testing.T) {
	for name, store := range chargeStores(t) {
		settled := make(chan [2]int64, 64)
		srv := gatewayTo(t, tokensYAML, store, http.HandlerFunc(completions), Deps{Accounting: tally{
			settled: func(policy string, estimate, actual int64, unread bool) {
				if policy == "tokens" && !unread {
					settled <- [2]int64{estimate, actual}
				}
			},
		}})
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", name, stream), func(t *testing.T) {
				token := fmt.Sprintf("%s-%v", name, stream)
				for i := range 4 {
					resp, body := chat(t, srv.URL, token, stream)
					if resp.StatusCode != 200 || !strings.Contains(body, `"total_tokens":3000`) {
						t.Fatalf("request %d: %d %q; want it forwarded", i+1, resp.StatusCode, body)
					}
					if s := <-settled; s != [2]int64{500, 3000} {
						t.Fatalf("request %d settled %v; want 500 to 3000", i+1, s)
					}
				}
				resp, _ := chat(t, srv.URL, token, stream)
				if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
					t.Fatalf("request 5: %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
				}
			})
		}
	}
}

// A login policy charges failed logins only, through the proxy.
func TestProxyChargesFailedLoginsOnly(t *testing.T) {
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	})
	srv := gatewayTo(t, tokensYAML, memstore.New(memstore.Options{}), upstream, Deps{})
	login := func(password string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/login", nil)
		req.Header.Set("X-User", "erin")
		req.Header.Set("X-Password", password)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range 8 {
		if got := login("right"); got != 200 {
			t.Fatalf("right login %d: %d", i+1, got)
		}
	}
	for i := range 5 {
		if got := login("wrong"); got != 401 {
			t.Fatalf("failed login %d: %d", i+1, got)
		}
	}
	if got := login("right"); got != 429 {
		t.Fatalf("after 5 failures: %d, want 429", got)
	}
}

// A stream reaches the client as the upstream sends it: the first event
// is read while the upstream waits to send the rest. A client that goes
// away after the usage event is charged what the upstream reported.
func TestProxyStreamsAndChargesAClientThatLeaves(t *testing.T) {
	for name, store := range chargeStores(t) {
		t.Run(name, func(t *testing.T) {
			read := make(chan struct{})
			upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.ReadAll(r.Body) // the request read whole, as an API does
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"total_tokens\":2200}}\n\n")
				w.(http.Flusher).Flush()
				select {
				case <-read:
				case <-r.Context().Done():
				}
				<-r.Context().Done() // the client has gone: the proxy cancels the upstream call
			})
			settled := make(chan [2]int64, 1)
			srv := gatewayTo(t, tokensYAML, store, upstream, Deps{Accounting: tally{
				settled: func(_ string, estimate, actual int64, _ bool) { settled <- [2]int64{estimate, actual} },
			}})
			req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
			req.Header.Set("Authorization", "Bearer leaver")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err != nil || !strings.Contains(line, "2200") {
				t.Fatalf("first event: %q, %v; want it before the upstream sends more", line, err)
			}
			close(read)
			resp.Body.Close() // the client leaves mid-stream
			if s := <-settled; s != [2]int64{500, 2200} {
				t.Fatalf("settled %v; want the reported 2200", s)
			}
			l, _ := sluice.NewLimiter(store, sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10000, Period: time.Minute}, sluice.LimiterOptions{})
			if d, _ := l.Peek(t.Context(), "tokens\x00Bearer leaver"); d.Remaining != 10000-2200 {
				t.Fatalf("%d left; want %d", d.Remaining, 10000-2200)
			}
		})
	}
}

// BenchmarkProxyFirstEvent measures how long the first event of a
// stream whose cost the proxy reads takes from the upstream's flush to
// the client: µs/event (docs/performance.md).
func BenchmarkProxyFirstEvent(b *testing.B) {
	sent := make(chan time.Time, 1)
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		sent <- time.Now()
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"h\"}}]}\n\n")
		w.(http.Flusher).Flush()
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"total_tokens\":1}}\n\ndata: [DONE]\n\n")
	})
	for name, yaml := range map[string]string{
		"cost=stream": strings.Replace(tokensYAML, "sliding_log 10000/1m", "1000000000/1s", 1),
		"cost=fixed":  "policies: [{name: tokens, limit: 1000000000/1s, key: \"header:Authorization\", cost: 500, match: /}]",
	} {
		b.Run(name, func(b *testing.B) { firstEvent(b, yaml, upstream, sent) })
	}
}

func firstEvent(b *testing.B, yaml string, upstream http.Handler, sent chan time.Time) {
	srv := gatewayTo(b, yaml, memstore.New(memstore.Options{}), upstream, Deps{})
	var total time.Duration
	for b.Loop() {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
		req.Header.Set("Authorization", "Bearer bench")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadString('\n'); err != nil {
			b.Fatal(err)
		}
		total += time.Since(<-sent)
		io.Copy(io.Discard, br)
		resp.Body.Close()
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/first-event")
}

// gzipped is completions answered in gzip, as an upstream with
// compression on answers a client that accepts it, each event of a
// stream flushed as it is written; it records the Accept-Encoding it got.
func gzipped(accepts chan<- string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		accepts <- r.Header.Get("Accept-Encoding")
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			completions(w, r)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		z := gzip.NewWriter(w)
		defer z.Close()
		completions(gzipWriter{w, z}, r)
	}
}

// gzipWriter is an answer whose body is gzipped: a flush flushes the
// gzip stream, then the connection.
type gzipWriter struct {
	http.ResponseWriter
	z *gzip.Writer
}

func (g gzipWriter) Write(b []byte) (int, error) { return g.z.Write(b) }
func (g gzipWriter) Flush() {
	g.z.Flush()
	g.ResponseWriter.(http.Flusher).Flush()
}

// A client that asks for gzip gets the upstream's gzipped answer as it
// came, and is charged the tokens in it: requests 1 to 4 forwarded, the
// 5th refused, for a JSON answer and a stream; a coding the proxy cannot
// decode is not asked of the upstream.
func TestProxyChargesGzippedAnswers(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			accepts := make(chan string, 8)
			settled := make(chan [2]int64, 8)
			srv := gatewayTo(t, tokensYAML, memstore.New(memstore.Options{}), gzipped(accepts), Deps{Accounting: tally{
				settled: func(policy string, estimate, actual int64, unread bool) { settled <- [2]int64{estimate, actual} },
			}})
			ask := func() *http.Response {
				body := `{"model":"m"}`
				if stream {
					body = `{"model":"m","stream":true}`
				}
				req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer zed")
				req.Header.Set("Accept-Encoding", "dcb, gzip") // set: the client leaves the body as it came
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				z, err := gzip.NewReader(resp.Body)
				if resp.StatusCode == 200 && err != nil {
					t.Fatalf("the answer is not gzip: %v", err)
				}
				if resp.StatusCode == 200 {
					if b, _ := io.ReadAll(z); !strings.Contains(string(b), `"total_tokens":3000`) {
						t.Fatalf("decoded answer %q", b)
					}
				}
				return resp
			}
			for i := range 4 {
				if resp := ask(); resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" {
					t.Fatalf("request %d: %d, Content-Encoding %q; want 200, gzip", i+1, resp.StatusCode, resp.Header.Get("Content-Encoding"))
				}
				if s := <-settled; s != [2]int64{500, 3000} {
					t.Fatalf("request %d settled %v; want 500 to 3000", i+1, s)
				}
				if a := <-accepts; a != "gzip" {
					t.Fatalf("the upstream was asked for %q; want gzip alone", a)
				}
			}
			if resp := ask(); resp.StatusCode != 429 {
				t.Fatalf("request 5: %d; want 429", resp.StatusCode)
			}
		})
	}
}

// A bytes cost through the proxy counts the bytes its client reads: ten
// gzipped answers of 128 KiB use a 1 MiB limit after 8.
func TestProxyChargesDecodedBytes(t *testing.T) {
	yaml := `policies:
  - name: download
    limit: 1048576/720h # GCRA: a byte back in 2.5 s
    key: header:X-User
    match: /
    cost: {estimate: 1024, from: bytes}
`
	line := "<p>the same paragraph, again and again</p>\n"
	page := strings.Repeat(line, 128<<10/len(line)+1)[:128<<10]
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		z := gzip.NewWriter(w)
		io.WriteString(z, page)
		z.Close()
	})
	settled := make(chan int64, 16)
	srv := gatewayTo(t, yaml, memstore.New(memstore.Options{}), upstream, Deps{Accounting: tally{
		settled: func(_ string, _, actual int64, _ bool) { settled <- actual },
	}})
	for i := range 10 {
		req, _ := http.NewRequest("GET", srv.URL+"/page", nil)
		req.Header.Set("X-User", "amy")
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if want := map[bool]int{true: 200, false: 429}[i < 8]; resp.StatusCode != want {
			t.Fatalf("answer %d of 128 KiB gzipped: %d, want %d", i+1, resp.StatusCode, want)
		}
		if i < 8 {
			if n := <-settled; n != 128<<10 {
				t.Fatalf("answer %d charged %d bytes; want 131072", i+1, n)
			}
		}
	}
}

// A client that hangs up after a stream's content, before its usage
// event, is charged its estimate and one per event it got through the
// proxy, gzipped or not.
func TestProxyChargesAStreamCutBeforeItsUsage(t *testing.T) {
	const events = 2000
	for _, coding := range []string{"", "gzip"} {
		t.Run("coding="+coding, func(t *testing.T) {
			upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				var out io.Writer = w
				if coding != "" {
					w.Header().Set("Content-Encoding", coding)
					z := gzip.NewWriter(w)
					defer z.Close()
					out = z
				}
				for i := range events {
					fmt.Fprintf(out, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}],\"usage\":null}\n\n", i)
				}
				if z, ok := out.(*gzip.Writer); ok {
					z.Flush()
				}
				w.(http.Flusher).Flush()
				<-r.Context().Done() // the usage event never comes: the client leaves first
			})
			settled := make(chan [2]int64, 1)
			srv := gatewayTo(t, tokensYAML, memstore.New(memstore.Options{}), upstream, Deps{Accounting: tally{
				settled: func(_ string, estimate, actual int64, _ bool) { settled <- [2]int64{estimate, actual} },
			}})
			req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
			req.Header.Set("Authorization", "Bearer cut")
			if coding != "" {
				req.Header.Set("Accept-Encoding", coding)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body io.Reader = resp.Body
			if coding != "" {
				if body, err = gzip.NewReader(resp.Body); err != nil {
					t.Fatal(err)
				}
			}
			br := bufio.NewReader(body)
			for range 2 * events {
				if _, err := br.ReadString('\n'); err != nil {
					t.Fatal(err)
				}
			}
			resp.Body.Close()
			if s := <-settled; s != [2]int64{500, 500 + events} {
				t.Fatalf("settled %v; want 500 to %d, the estimate and one per event", s, 500+events)
			}
		})
	}
}
