package proxy

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkForwardAuthHandler is one forward-auth check through its
// handler, without a network: the original request read from nginx's
// pair and Caddy's, a clean path and one with a path parameter, one
// policy keyed by a header, every check allowed.
func BenchmarkForwardAuthHandler(b *testing.B) {
	cfg, err := config.Parse("bench.yaml", []byte(`policies: [{name: p, limit: 1000000000/1h, key: "header:X-Key", match: "/api/"}]`))
	if err != nil {
		b.Fatal(err)
	}
	g, err := guard.New(memstore.New(memstore.Options{}), guard.Options{})
	if err != nil {
		b.Fatal(err)
	}
	h, err := ForwardAuth(cfg, Deps{Guard: g}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, method, uri, path string }{
		{"nginx", "X-Original-Method", "X-Original-Uri", "/api/items/7?q=1"},
		{"caddy", "X-Forwarded-Method", "X-Forwarded-Uri", "/api/items/7?q=1"},
		{"nginx-parameter", "X-Original-Method", "X-Original-Uri", "/api;jsessionid=x/items/7"},
	} {
		b.Run(c.name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "/v1/forward-auth", nil)
			req.Header.Set(c.method, "GET")
			req.Header.Set(c.uri, c.path)
			req.Header.Set("X-Key", "k")
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}

// BenchmarkCanonicalPath is canonicalPath of a clean path (no allocation),
// an encoded one, and one with a path parameter.
func BenchmarkCanonicalPath(b *testing.B) {
	for _, p := range []string{"/api/items/7", "/x/%2e%2e/api/items/%37", "/api;jsessionid=x/items/7"} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := canonicalPath(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
