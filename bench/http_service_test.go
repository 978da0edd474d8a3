package bench

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkHTTPCheck drives the service's POST /v1/check over loopback
// HTTP/1.1 from 64 concurrent keep-alive clients, one check per request on
// 10k keys under the embedded config's default policy: an empty net/http
// handler answering a small JSON body (the transport's ceiling), sluice on
// the memory store, and sluice on Redis.
func BenchmarkHTTPCheck(b *testing.B) {
	targets := []struct {
		name string
		addr func(b *testing.B) string
	}{
		{"empty-handler", startEmptyHTTP},
		{"sluice-memory", func(b *testing.B) string { return startServer(b, "", "").HTTP }},
		{"sluice-redis", func(b *testing.B) string {
			return startServer(b, "redis://"+redistest.Standalone(b).Addr, "").HTTP
		}},
	}
	for _, tg := range targets {
		b.Run(tg.name+"/callers=64", func(b *testing.B) {
			url := "http://" + tg.addr(b) + "/v1/check"
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			defer client.CloseIdleConnections()
			drive(b, 64, func(key string) error {
				body := []byte(`{"checks":[{"policy":"default","key":"` + key + `"}]}`)
				resp, err := client.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					return err
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
				return nil
			})
		})
	}
}

func startEmptyHTTP(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"allowed":true}`+"\n")
	})}
	go srv.Serve(l)
	b.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}
