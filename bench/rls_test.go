package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/server"
)

// emptyRLS answers OK at once: served on sluice's gRPC transport (newEmpty),
// the ceiling of that transport for this service on this machine.
type emptyRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
}

func (emptyRLS) ShouldRateLimit(context.Context, *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
}

// newEmpty returns a gRPC server of emptyRLS on sluice's gRPC transport
// (its codec, stream workers and windows): what carrying a check costs
// sluice serve before it decides anything.
func newEmpty() *grpc.Server {
	s := grpc.NewServer(server.TransportOptions()...)
	rlspb.RegisterRateLimitServiceServer(s, emptyRLS{})
	return s
}

func startEmpty(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := newEmpty()
	go s.Serve(l)
	b.Cleanup(s.Stop)
	return l.Addr().String()
}

func startSluice(b *testing.B, redisURL string) string { return startServer(b, redisURL, "").GRPC }

// startServer starts the service, on Redis when redisURL is set, with the
// config at path ("" for the embedded default), and returns its addresses.
func startServer(b *testing.B, redisURL, path string) server.Addrs {
	s, err := server.New(server.Options{Config: path, RedisURL: redisURL, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Shutdown(context.Background()) })
	return s.Addrs()
}

// BenchmarkRLS drives envoy.service.ratelimit.v3 ShouldRateLimit over
// loopback gRPC from 64 concurrent callers on 10k descriptors (the embedded
// config's remote_address limit, always allowed at 50/s per address): an
// empty handler on the same gRPC transport (its ceiling), sluice on the
// memory store, and sluice on Redis.
func BenchmarkRLS(b *testing.B) {
	var redis rueidis.Client // the Redis store's server, for its script time
	targets := []struct {
		name string
		addr func(b *testing.B) string
	}{
		{"empty-handler", startEmpty},
		{"sluice-memory", func(b *testing.B) string { return startSluice(b, "") }},
		{"sluice-redis", func(b *testing.B) string {
			srv := redistest.Standalone(b)
			redis = rueidisClient(b, srv.Addr)
			return startSluice(b, srv.URL())
		}},
	}
	for _, tg := range targets {
		b.Run(tg.name+"/callers=64", func(b *testing.B) {
			check := rlsClient(b, tg.addr(b))
			report := func() {}
			if redis != nil {
				report = scriptTime(b, redis)
			}
			drive(b, 64, func(string) error { return check() })
			report()
			redis = nil
		})
	}
	// The three side by side (see interleaved): per store, its checks/s
	// against the empty handler's.
	b.Run("interleaved/callers=64", func(b *testing.B) {
		checks := make([]func() error, len(targets))
		for i, tg := range targets {
			checks[i] = rlsClient(b, tg.addr(b))
		}
		ratios := interleaved(b, checks)
		for i, tg := range targets[1:] {
			b.ReportMetric(ratios[i+1], tg.name+"-vs-empty")
		}
		b.ReportMetric(0, "ns/op")
	})
}

// BenchmarkRLSTopKeys prices the status page's most-denied-keys sketch:
// the same service, with ui.top_keys 32 and with 0 (no sketch), answering
// checks on 10k addresses that are all over their limit, so that every
// check goes through the sketch; interleaved, the sketch's checks/s
// against no sketch's.
func BenchmarkRLSTopKeys(b *testing.B) {
	dir := b.TempDir()
	addr := func(topKeys int) string {
		path := filepath.Join(dir, fmt.Sprint("top", topKeys, ".yaml"))
		cfg := fmt.Sprintf(`ui:
  top_keys: %d
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: {unit: day, requests_per_unit: 1}
`, topKeys)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			b.Fatal(err)
		}
		return startServer(b, "", path).GRPC
	}
	checks := []func() error{
		rlsClientWant(b, addr(0), rlspb.RateLimitResponse_OVER_LIMIT, 0),
		rlsClientWant(b, addr(32), rlspb.RateLimitResponse_OVER_LIMIT, 0),
	}
	// Spend each address's one allowed check before timing.
	for _, check := range checks {
		for range 10_000 {
			check()
		}
	}
	b.ReportMetric(interleaved(b, checks)[1], "top32-vs-off")
	b.ReportMetric(0, "ns/op")
}

// interleaved runs rounds of b.N checks from 64 callers against each of
// checks in turn, so that this machine's drift over the run moves them
// together, and returns for each the median over rounds of its round's
// checks/s against the first's.
func interleaved(b *testing.B, checks []func() error) []float64 {
	const rounds = 5
	ratios := make([][]float64, len(checks))
	b.ResetTimer()
	for range rounds {
		perSec := make([]float64, len(checks))
		for i, check := range checks {
			el, _, err := load(64, b.N, func(string) error { return check() })
			if err != nil {
				b.Fatal(err)
			}
			perSec[i] = float64(b.N) / el.Seconds()
		}
		for i := range checks {
			ratios[i] = append(ratios[i], perSec[i]/perSec[0])
		}
	}
	b.StopTimer()
	medians := make([]float64, len(checks))
	for i, r := range ratios {
		slices.Sort(r)
		medians[i] = r[len(r)/2]
	}
	return medians
}

// rlsClient returns a function that sends one ShouldRateLimit to addr,
// cycling over 10k descriptors that are always allowed.
func rlsClient(b *testing.B, addr string) func() error {
	return rlsClientWant(b, addr, rlspb.RateLimitResponse_OK, 0)
}

// rlsClientWant is rlsClient for descriptors whose answer is want, each
// call with a deadline timeout away when timeout is not 0, as Envoy sends.
func rlsClientWant(b *testing.B, addr string, want rlspb.RateLimitResponse_Code, timeout time.Duration) func() error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	c := rlspb.NewRateLimitServiceClient(conn)
	reqs := make([]*rlspb.RateLimitRequest, 10_000)
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*extrl.RateLimitDescriptor{{
			Entries: []*extrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: fmt.Sprint("10.0.", i/256, ".", i%256)}},
		}}}
	}
	var n atomic.Int64
	return func() error {
		ctx := context.Background()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		resp, err := c.ShouldRateLimit(ctx, reqs[n.Add(1)%int64(len(reqs))])
		if err == nil && resp.OverallCode != want {
			err = fmt.Errorf("want %v: %v", want, resp)
		}
		return err
	}
}
