package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	sluicehttp "github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

var noop = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

// serveParallel calls h from every goroutine with requests from 10k client
// addresses and fails on any status but want. For a denial (429), every
// address is first used up.
func serveParallel(b *testing.B, h http.Handler, want int) {
	reqs := make([]*http.Request, 10_000)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/api/items/7", nil)
		reqs[i].RemoteAddr = fmt.Sprintf("10.%d.%d.%d:4242", i>>16&255, i>>8&255, i&255)
	}
	if want == http.StatusTooManyRequests {
		w := &discard{h: http.Header{}}
		for _, r := range reqs {
			for range 10 {
				clear(w.h)
				w.code = 200 // a handler that writes nothing answers 200
				if h.ServeHTTP(w, r); w.code == want {
					break
				}
			}
			if w.code != want {
				b.Fatalf("%s: status %d ten times, want %d", r.RemoteAddr, w.code, want)
			}
		}
	}
	var seq atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1) * 7919)
		w := &discard{h: http.Header{}}
		for pb.Next() {
			clear(w.h)
			w.code = 200
			h.ServeHTTP(w, reqs[i%len(reqs)])
			if w.code != want {
				b.Fatalf("status %d, want %d", w.code, want)
			}
			i++
		}
	})
}

// discard is a ResponseWriter that keeps only the status: the benchmark
// measures the middleware, not a recorder's buffers.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }

// BenchmarkHTTPMiddleware compares whole middlewares keyed by client IP, each
// on its own memory store, in front of a no-op handler, every request
// allowed; and sluice's store call alone, so the middleware's own overhead
// is the difference.
func BenchmarkHTTPMiddleware(b *testing.B) {
	for _, mw := range middlewares {
		b.Run(mw.name, func(b *testing.B) {
			serveParallel(b, mw.new(b, benchLimit), http.StatusOK)
		})
		if mw.name != "sluice" {
			continue
		}
		b.Run("sluice-store-call-only", func(b *testing.B) {
			s := memstore.New(memstore.Options{})
			ctx := context.Background()
			ks := keys(10_000)
			for i := range ks {
				ks[i] = "api\x00" + ks[i]
			}
			parallel(b, ks, func(key string) {
				if d, err := s.Take(ctx, sluice.Request{Key: key, Limit: benchLimit, Cost: 1}); err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
			})
		})
	}
}

// BenchmarkHTTPMiddlewareDenied is BenchmarkHTTPMiddleware with every
// request denied, as in a flood: a limit of one an hour, each of the 10k
// addresses used up first. Each middleware answers 429 with its own
// headers and body.
//
//	cd bench && go test -run '^$' -bench HTTPMiddlewareDenied -benchmem -cpu 2 -count 8 .
func BenchmarkHTTPMiddlewareDenied(b *testing.B) {
	for _, mw := range middlewares {
		b.Run(mw.name, func(b *testing.B) {
			serveParallel(b, mw.new(b, sluice.Limit{Rate: 1, Period: time.Hour}), http.StatusTooManyRequests)
		})
	}
}

// middlewares are the middlewares compared, each keyed by client IP on its
// own memory store under limit: the peers' with its capacity per period.
var middlewares = []struct {
	name string
	new  func(b *testing.B, limit sluice.Limit) http.Handler
}{
	{"sluice", func(b *testing.B, limit sluice.Limit) http.Handler {
		ip, _ := clientip.RemoteAddr(clientip.Options{})
		m, err := sluicehttp.New(sluicehttp.Options{
			Store: memstore.New(memstore.Options{}),
			Policies: []sluicehttp.Policy{{
				Name: "api", Pattern: "GET /api/items/{id}", Limit: limit, Key: sluicehttp.ClientIP(ip),
			}},
		})
		if err != nil {
			b.Fatal(err)
		}
		return m.Handler(noop)
	}},
	{"go-chi-httprate", func(_ *testing.B, limit sluice.Limit) http.Handler {
		// What its deprecated LimitByIP does: the peer's address, IPv6 by /64.
		byIP := func(r *http.Request) (string, error) {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			if err != nil {
				host = r.RemoteAddr
			}
			return httprate.CanonicalizeIP(host), nil
		}
		return httprate.LimitBy(int(limit.Capacity()), limit.Period, byIP)(noop)
	}},
	{"go-limiter-httplimit", func(b *testing.B, limit sluice.Limit) http.Handler {
		store, _ := memorystore.New(&memorystore.Config{Tokens: uint64(limit.Capacity()), Interval: limit.Period})
		b.Cleanup(func() { store.Close(context.Background()) })
		m, err := httplimit.NewMiddleware(store, httplimit.IPKeyFunc())
		if err != nil {
			b.Fatal(err)
		}
		return m.Handle(noop)
	}},
}
