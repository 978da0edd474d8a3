package bench

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkProxy is `sluice proxy` in front of a loopback upstream, two
// policies per request (per client address and per API key), on the
// memory store: a clean path, and one that the proxy decodes and resolves
// before matching (its canonical form); beside the upstream called
// directly, the anchor, so the proxy's own cost is the difference. The
// -64-clients cases send 64 requests at once (the others one per CPU),
// more than net/http's 2 idle connections per host.
func BenchmarkProxy(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "up") }))
	defer up.Close()
	cfg, err := config.Parse("bench.yaml", []byte(`
policies:
  - {name: per-ip, limit: 1000000000/1h, key: client_ip, match: "/api/"}
  - {name: per-key, limit: 1000000000/1h, key: "header:X-API-Key", match: "GET /api/items/{id}"}
`))
	if err != nil {
		b.Fatal(err)
	}
	g, err := sluice.NewGuard(memstore.New(memstore.Options{}), sluice.GuardOptions{})
	if err != nil {
		b.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	h, err := proxy.New(cfg, proxy.Deps{Guard: g}, u, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	gw := httptest.NewServer(h)
	defer gw.Close()
	for _, c := range []struct {
		name, base, path string
		clients          int
	}{
		{"upstream-direct", up.URL, "/api/items/7", 0},
		{"sluice-proxy", gw.URL, "/api/items/7", 0},
		{"sluice-proxy-encoded-path", gw.URL, "/x/%2e%2e/api/items/%37", 0},
		{"upstream-direct-64-clients", up.URL, "/api/items/7", 64},
		{"sluice-proxy-64-clients", gw.URL, "/api/items/7", 64},
	} {
		b.Run(c.name, func(b *testing.B) {
			tr := &http.Transport{MaxIdleConnsPerHost: 256}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			b.ReportAllocs()
			if c.clients > 0 {
				b.SetParallelism(max(1, c.clients/runtime.GOMAXPROCS(0)))
			}
			b.RunParallel(func(pb *testing.PB) {
				req, _ := http.NewRequest("GET", c.base+c.path, nil)
				req.Header.Set("X-API-Key", "k1")
				for pb.Next() {
					resp, err := client.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
			})
		})
	}
}
