package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/server"
)

// BenchmarkForwardAuth is the same decision (one policy keyed by a header,
// memory store, 10k keys, every request allowed) asked of the service by
// 64 keep-alive clients over loopback two ways, side by side in one run:
// POST /v1/check with the key in JSON, and GET /v1/forward-auth with the
// original request in X-Forwarded-Method/-Uri and the key in its header,
// as a gateway asks.
func BenchmarkForwardAuth(b *testing.B) {
	path := filepath.Join(b.TempDir(), "sluice.yaml")
	os.WriteFile(path, []byte("policies:\n  - {name: p, limit: 1000000000/1h, key: \"header:X-Key\", match: /}\n"), 0o644)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var s *server.Server
	s, err := server.New(server.Options{Config: path, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Logger: log,
		ForwardAuth: func(cfg *config.Config) (http.Handler, error) {
			return proxy.ForwardAuth(cfg, proxy.Deps{Guard: s.Guard(), Slots: s.Slots(), Overrides: s.Overrides(), Accounting: s}, log)
		}})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Shutdown(context.Background()) })
	base := "http://" + s.Addrs().HTTP
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	do := func(req *http.Request) error {
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	b.Run("v1-check/callers=64", func(b *testing.B) {
		drive(b, 64, func(key string) error {
			req, _ := http.NewRequest("POST", base+"/v1/check", bytes.NewReader([]byte(`{"checks":[{"policy":"p","key":"`+key+`"}]}`)))
			req.Header.Set("Content-Type", "application/json")
			return do(req)
		})
	})
	b.Run("forward-auth/callers=64", func(b *testing.B) {
		drive(b, 64, func(key string) error {
			req, _ := http.NewRequest("GET", base+"/v1/forward-auth", nil)
			req.Header.Set("X-Forwarded-Method", "GET")
			req.Header.Set("X-Forwarded-Uri", "/api/items/7")
			req.Header.Set("X-Key", key)
			return do(req)
		})
	})
}
