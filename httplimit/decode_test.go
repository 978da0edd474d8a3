package httplimit_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// encoders are the content codings an answer may come in, each as a
// writer that encodes onto w, with the name it goes by.
var encoders = []struct {
	name, coding string
	encode       func(w io.Writer) io.WriteCloser
}{
	{"gzip", "gzip", func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }},
	{"x-gzip", "x-gzip", func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }},
	{"deflate", "deflate", func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) }},
	{"raw deflate", "deflate", func(w io.Writer) io.WriteCloser { z, _ := flate.NewWriter(w, flate.DefaultCompression); return z }},
	{"br", "br", func(w io.Writer) io.WriteCloser { return brotli.NewWriter(w) }},
	{"zstd", "zstd", func(w io.Writer) io.WriteCloser { z, _ := zstd.NewWriter(w); return z }},
	{"gzip over br", "br, gzip", func(w io.Writer) io.WriteCloser { return stacked(w, brotli.NewWriter, gzip.NewWriter) }},
}

// stacked encodes with first, then with second, as "first, second".
func stacked(w io.Writer, first func(io.Writer) *brotli.Writer, second func(io.Writer) *gzip.Writer) io.WriteCloser {
	g := second(w)
	b := first(g)
	return closers{b, b, g}
}

type closers struct {
	io.Writer
	inner, outer io.Closer
}

func (c closers) Close() error { c.inner.Close(); return c.outer.Close() }

// flushWriter flushes w after every write, as a streaming upstream does.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(b []byte) (int, error) {
	n, err := f.w.Write(b)
	f.w.(http.Flusher).Flush()
	return n, err
}

// encodedAnswer writes body to w encoded with enc, flushing each event of
// a stream (and each piece of a JSON body) as it goes.
func encodedAnswer(w http.ResponseWriter, coding string, encode func(io.Writer) io.WriteCloser, contentType string, pieces []string) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Encoding", coding)
	z := encode(flushWriter{w})
	for _, p := range pieces {
		io.WriteString(z, p)
		if f, ok := z.(interface{ Flush() error }); ok {
			f.Flush()
		}
	}
	z.Close()
}

// A client that asks for a compressed answer is charged the tokens the
// answer reports, in every coding the cost reader decodes, as a JSON
// document and as a stream: 10000 tokens an hour, 3000 an answer, the
// 5th request refused; and the client gets the encoded bytes, untouched.
func TestCompressedAnswersAreChargedTheirTokens(t *testing.T) {
	usage := `"usage":{"prompt_tokens":1000,"completion_tokens":2000,"total_tokens":3000}`
	kinds := map[string]struct {
		contentType string
		pieces      []string
	}{
		"json": {"application/json", []string{`{"id":"x","choices":[{"message":{"content":"`, strings.Repeat("hi ", 500), `"}}],`, usage + `}`}},
		"sse": {"text/event-stream", []string{"data: {\"choices\":[{\"delta\":{\"content\":\"h\"}}],\"usage\":null}\n\n",
			"data: {\"choices\":[{\"delta\":{\"content\":\"i\"}}],\"usage\":null}\n\n", "data: {\"choices\":[]," + usage + "}\n\n", "data: [DONE]\n\n"}},
	}
	for _, enc := range encoders {
		for kind, a := range kinds {
			t.Run(enc.name+"/"+kind, func(t *testing.T) {
				var mu sync.Mutex
				var settled []httplimit.Settlement
				p := tokenPolicy()
				p.Limit = sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10000, Period: time.Hour}
				srv := chargeServer(t, memstore.New(memstore.Options{}), p, func(w http.ResponseWriter, r *http.Request) {
					encodedAnswer(w, enc.coding, enc.encode, a.contentType, a.pieces)
				}, func(o *httplimit.Options) {
					o.OnSettle = func(_ *http.Request, s httplimit.Settlement) { mu.Lock(); settled = append(settled, s); mu.Unlock() }
				})
				for i := range 4 {
					resp, body := postEncoded(t, srv.URL, "eve", "gzip, deflate, br, zstd")
					if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != enc.coding || strings.Contains(body, "total_tokens") {
						t.Fatalf("request %d: %d, Content-Encoding %q; want 200 and the encoded answer", i+1, resp.StatusCode, resp.Header.Get("Content-Encoding"))
					}
				}
				if resp, _ := postEncoded(t, srv.URL, "eve", "gzip, deflate, br, zstd"); resp.StatusCode != 429 {
					t.Fatalf("request 5: %d; want 429: 4 answers of 3000 tokens used 12000 of 10000", resp.StatusCode)
				}
				mu.Lock()
				defer mu.Unlock()
				for _, s := range settled {
					if s.Actual != 3000 || s.Err != nil {
						t.Fatalf("settled %+v; want 3000 read from the decoded answer", s)
					}
				}
			})
		}
	}
}

// postEncoded posts to url as user, asking for the codings of accept, and
// returns the answer with its body read as it came (not decoded).
func postEncoded(t *testing.T, url, user, accept string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"model":"m"}`))
	req.Header.Set("X-User", user)
	req.Header.Set("Accept-Encoding", accept) // set: the client leaves the body as it came
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// A bytes cost counts the bytes the client reads, decoded: ten gzip
// answers of 128 KiB each (a few hundred bytes sent) use the 1 MiB of a
// limit after 8, and the 9th is refused.
func TestBytesCostCountsDecodedBytes(t *testing.T) {
	line := "<p>the same paragraph, again and again</p>\n"
	page := bytes.Repeat([]byte(line), 128<<10/len(line)+1)[:128<<10]
	p := httplimit.Policy{Name: "bytes", Limit: sluice.Limit{Rate: 1 << 20, Period: 720 * time.Hour}, // GCRA: a byte back in 2.5 s
		Cost: 1024, CostFrom: httplimit.CostFromBytes()}
	var got []int64
	var sent int
	srv := chargeServer(t, memstore.New(memstore.Options{}), p, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		var b bytes.Buffer
		z := gzip.NewWriter(&b)
		z.Write(page)
		z.Close()
		sent = b.Len()
		io.Copy(w, &b) // through ReadFrom
	}, func(o *httplimit.Options) {
		o.OnSettle = func(_ *http.Request, s httplimit.Settlement) { got = append(got, s.Actual) }
	})
	for i := range 10 {
		resp, _ := postEncoded(t, srv.URL, "fay", "gzip")
		want := 200
		if i >= 8 {
			want = 429
		}
		if resp.StatusCode != want {
			t.Fatalf("answer %d of 128 KiB (%d bytes gzipped): %d, want %d", i+1, sent, resp.StatusCode, want)
		}
	}
	for _, n := range got {
		if n != 128<<10 {
			t.Fatalf("charged %v; want 131072 each, the 1024 estimate settled to it", got)
		}
	}
}

// Decoding is bounded by the bytes sent: a zstd answer of 256 MiB of
// zeros, a few KiB on the wire, is decoded up to 1024 bytes a byte sent
// (and 64 KiB), and its bytes cost is that bound.
func TestBytesCostOfADecompressionBomb(t *testing.T) {
	var bomb bytes.Buffer
	z, _ := zstd.NewWriter(&bomb, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	zeros := make([]byte, 1<<20)
	for range 256 {
		z.Write(zeros)
	}
	z.Close()
	p := httplimit.Policy{Name: "bytes", Limit: sluice.Limit{Rate: 1 << 40, Period: time.Hour},
		Cost: 1, CostFrom: httplimit.CostFromBytes()}
	var got httplimit.Settlement
	srv := chargeServer(t, memstore.New(memstore.Options{}), p, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "zstd")
		w.Write(bomb.Bytes())
	}, func(o *httplimit.Options) {
		o.OnSettle = func(_ *http.Request, s httplimit.Settlement) { got = s }
	})
	postEncoded(t, srv.URL, "gus", "zstd")
	if want := 1024*int64(bomb.Len()) + 64<<10; got.Actual != want || got.Err != nil {
		t.Fatalf("a %d-byte zstd answer of 256 MiB settled %+v; want %d, 1024 a byte sent and 64 KiB", bomb.Len(), got, want)
	}
}

// A request whose cost is read from its body asks only for the codings
// the cost reader decodes: the others, and "*", are taken out of its
// Accept-Encoding, and with none left it goes without one. A policy that
// does not read the body leaves the field as it came.
func TestAcceptEncodingHeldToDecodableCodings(t *testing.T) {
	cases := []struct {
		source    httplimit.CostSource
		sent, got string
	}{
		{httplimit.CostFromJSON("usage.total_tokens"), "gzip, deflate, br, zstd", "gzip, deflate, br, zstd"},
		{httplimit.CostFromJSON("usage.total_tokens"), "dcb, GZIP;q=0.5, compress, *;q=0.1, identity", "GZIP;q=0.5, identity"},
		{httplimit.CostFromBytes(), "dcz, lz4", ""},
		{httplimit.CostFromBytes(), "*", ""},
		{httplimit.CostFromHeader("X-Cost"), "dcb, *", "dcb, *"},
	}
	for _, c := range cases {
		t.Run(c.source.String()+"/"+c.sent, func(t *testing.T) {
			var seen []string
			p := httplimit.Policy{Name: "p", Limit: sluice.Limit{Rate: 1000, Period: time.Hour}, Cost: 1, CostFrom: c.source}
			srv := chargeServer(t, memstore.New(memstore.Options{}), p, func(w http.ResponseWriter, r *http.Request) {
				seen = r.Header.Values("Accept-Encoding")
			})
			postEncoded(t, srv.URL, "hal", c.sent)
			if strings.Join(seen, ",") != c.got {
				t.Fatalf("Accept-Encoding %q reached the handler as %q; want %q", c.sent, seen, c.got)
			}
		})
	}
}

// An answer in a coding the cost reader cannot decode, or one that does
// not decode, is charged as a cost that cannot be read: the estimate
// plus what it showed (for bytes, the bytes sent), or cost.unread when
// that is more; and says why.
func TestUndecodableAnswerIsChargedAsUnread(t *testing.T) {
	cases := []struct {
		name, coding string
		source       httplimit.CostSource
		unread, want int64
		why          string
	}{
		{"unknown coding, json", "compress", httplimit.CostFromJSON("usage.total_tokens"), 0, 40, `"compress" cannot be decoded`},
		{"unknown coding, json, unread", "compress", httplimit.CostFromJSON("usage.total_tokens"), 900, 900, `"compress" cannot be decoded`},
		{"unknown coding, bytes", "dcb", httplimit.CostFromBytes(), 0, 40 + 300, `"dcb" cannot be decoded`},
		{"corrupt gzip, json", "gzip", httplimit.CostFromJSON("usage.total_tokens"), 0, 40, "content-encoding gzip"},
		{"corrupt gzip, bytes", "gzip", httplimit.CostFromBytes(), 0, 40 + 300, "content-encoding gzip"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got httplimit.Settlement
			p := httplimit.Policy{Name: "p", Limit: sluice.Limit{Rate: 100000, Period: time.Hour}, Cost: 40, CostFrom: c.source, CostUnread: c.unread}
			srv := chargeServer(t, memstore.New(memstore.Options{}), p, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", c.coding)
				w.Write(bytes.Repeat([]byte{0x1f}, 300)) // neither JSON nor gzip
			}, func(o *httplimit.Options) {
				o.OnSettle = func(_ *http.Request, s httplimit.Settlement) { got = s }
			})
			postEncoded(t, srv.URL, "ida", c.coding)
			if got.Actual != c.want || got.Err == nil || !strings.Contains(got.Err.Error(), c.why) {
				t.Fatalf("settled %+v; want %d, because %s", got, c.want, c.why)
			}
		})
	}
}

func ExampleCostFromBytes() {
	// A bytes cost counts what the client reads, decoded: this answer
	// is 11 bytes however it is encoded on the wire.
	p := httplimit.Policy{Name: "bytes", Limit: sluice.Limit{Rate: 1 << 30, Period: time.Hour}, Cost: 1,
		Key: httplimit.APIKey("X-User"), CostFrom: httplimit.CostFromBytes()}
	m, _ := httplimit.New(httplimit.Options{Store: memstore.New(memstore.Options{}), Policies: []httplimit.Policy{p},
		OnSettle: func(_ *http.Request, s httplimit.Settlement) { fmt.Println("charged", s.Actual) }})
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		z := gzip.NewWriter(w)
		io.WriteString(z, "hello world")
		z.Close()
	}))
	req, _ := http.NewRequest("GET", "/", nil)
	req.Header.Set("X-User", "ann")
	h.ServeHTTP(discard{http.Header{}}, req)
	// Output: charged 11
}

type discard struct{ h http.Header }

func (d discard) Header() http.Header         { return d.h }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}
