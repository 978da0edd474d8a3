package bench

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/guard"
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
	g, err := guard.New(memstore.New(memstore.Options{}), guard.Options{})
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

// BenchmarkProxyUpstreamKeepAlive is `sluice proxy` in front of an
// upstream that closes a keep-alive connection idle for 20ms (as Node.js
// and uvicorn close one idle for 5s, Gunicorn 2s), sent one POST at a time,
// each 18–22ms after the last was answered: about when the upstream closes
// the connection the last one used. With listeners.upstream_idle_timeout
// at 90s (net/http's default), a POST can go out on a connection the
// upstream is closing and fail (502: a POST is not sent again); at 10ms,
// below the upstream's (as the default 1s is below those upstreams'), the
// proxy closes it first. It reports the share of POSTs answered 502.
//
//	cd bench && go test -run '^$' -bench ProxyUpstreamKeepAlive -benchtime 300x .
func BenchmarkProxyUpstreamKeepAlive(b *testing.B) {
	const upstreamIdle = 20 * time.Millisecond
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "up")
	}))
	up.Config.IdleTimeout = upstreamIdle
	up.Start()
	defer up.Close()
	u, _ := url.Parse(up.URL)
	for _, idle := range []string{"90s", "10ms"} {
		b.Run("upstream_idle_timeout="+idle, func(b *testing.B) {
			cfg, err := config.Parse("bench.yaml", []byte("listeners: {upstream_idle_timeout: "+idle+"}\npolicies: [{name: p, limit: 1000000000/1h, match: /}]\n"))
			if err != nil {
				b.Fatal(err)
			}
			g, err := guard.New(memstore.New(memstore.Options{}), guard.Options{})
			if err != nil {
				b.Fatal(err)
			}
			h, err := proxy.New(cfg, proxy.Deps{Guard: g}, u, slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			gw := httptest.NewServer(h)
			defer gw.Close()
			client := gw.Client()
			failed := 0
			for range b.N {
				resp, err := client.Post(gw.URL+"/orders", "text/plain", strings.NewReader("order"))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
				case 502:
					failed++
				default:
					b.Fatalf("status %d", resp.StatusCode)
				}
				time.Sleep(upstreamIdle - 2*time.Millisecond + rand.N(4*time.Millisecond))
			}
			b.ReportMetric(float64(failed)/float64(b.N)*100, "502-%")
			b.ReportMetric(0, "ns/op")
		})
	}
}
