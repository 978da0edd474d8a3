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
// addresses, every one allowed, and fails on any other status.
func serveParallel(b *testing.B, h http.Handler) {
	reqs := make([]*http.Request, 10_000)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/api/items/7", nil)
		reqs[i].RemoteAddr = fmt.Sprintf("10.%d.%d.%d:4242", i>>16&255, i>>8&255, i&255)
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
			if w.code != 200 {
				b.Fatalf("status %d", w.code)
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
// on its own memory store, in front of a no-op handler; and sluice's store
// call alone, so the middleware's own overhead is the difference.
func BenchmarkHTTPMiddleware(b *testing.B) {
	b.Run("sluice", func(b *testing.B) {
		ip, _ := clientip.RemoteAddr(clientip.Options{})
		m, err := sluicehttp.New(sluicehttp.Options{
			Store: memstore.New(memstore.Options{}),
			Policies: []sluicehttp.Policy{{
				Name: "api", Pattern: "GET /api/items/{id}", Limit: benchLimit, Key: sluicehttp.ClientIP(ip),
			}},
		})
		if err != nil {
			b.Fatal(err)
		}
		serveParallel(b, m.Handler(noop))
	})
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
	b.Run("go-chi-httprate", func(b *testing.B) {
		// What its deprecated LimitByIP does: the peer's address, IPv6 by /64.
		byIP := func(r *http.Request) (string, error) {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			if err != nil {
				host = r.RemoteAddr
			}
			return httprate.CanonicalizeIP(host), nil
		}
		serveParallel(b, httprate.LimitBy(1<<30, time.Hour, byIP)(noop))
	})
	b.Run("go-limiter-httplimit", func(b *testing.B) {
		store, _ := memorystore.New(&memorystore.Config{Tokens: 1 << 30, Interval: time.Hour})
		defer store.Close(context.Background())
		m, err := httplimit.NewMiddleware(store, httplimit.IPKeyFunc())
		if err != nil {
			b.Fatal(err)
		}
		serveParallel(b, m.Handle(noop))
	})
}
