package server

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkRLSUnderRapidReset is a probe client's ShouldRateLimit latency
// (p50 and p99 reported) on a quiet server, and while another client
// floods the same gRPC listener with HTTP/2 rapid reset (HEADERS then
// RST_STREAM as fast as it can write them, dialling again each time the
// guard sends it away).
func BenchmarkRLSUnderRapidReset(b *testing.B) {
	s, err := New(Options{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	addr := s.Addrs().GRPC
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := rlspb.NewRateLimitServiceClient(conn)
	req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	probe := func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			if _, err := c.ShouldRateLimit(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	b.Run("quiet", probe)
	b.Run("rapid-reset", func(b *testing.B) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var goAways int
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if attack(b, addr, stop) {
					goAways++
				}
			}
		})
		probe(b)
		close(stop)
		wg.Wait()
		b.ReportMetric(float64(goAways), "goaways")
	})
}

// attack floods one connection with rapid reset until the server sends it
// away or stop closes; it reports whether a GOAWAY came.
func attack(b *testing.B, addr string, stop chan struct{}) bool {
	h := dialH2(b, addr)
	defer h.c.Close()
	got := make(chan bool, 1)
	go func() {
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				got <- false
				return
			}
			if _, ok := f.(*http2.GoAwayFrame); ok {
				got <- true
				return
			}
		}
	}()
	for id := uint32(1); id < 1<<31; id += 2 {
		h.open(id, false)
		h.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		if id%200 == 1 && h.w.Flush() != nil {
			break
		}
		select {
		case g := <-got:
			return g
		case <-stop:
			return false
		default:
		}
	}
	return <-got
}
