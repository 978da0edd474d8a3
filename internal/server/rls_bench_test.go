package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// BenchmarkShouldRateLimit is one Envoy RLS check on the memory store,
// the handler called directly: one remote_address descriptor of 10,000
// values, under a limit that never denies. What a
// check allocates beside gRPC's own work (allocs/op, B/op) is the figure
// to watch; the gRPC service's CPU per check is bench's RLSServerCPU.
//
//	go test -run '^$' -bench ShouldRateLimit -benchmem ./internal/server
func BenchmarkShouldRateLimit(b *testing.B) {
	path := filepath.Join(b.TempDir(), "sluice.yaml")
	os.WriteFile(path, []byte(`domains:
- domain: edge
  descriptors:
  - {key: remote_address, rate_limit: {unit: second, requests_per_unit: 1000000000}}
`), 0o644)
	s, err := New(Options{Config: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	r := &rls{s: s}
	reqs := make([]*rlspb.RateLimitRequest, 10_000)
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*extrl.RateLimitDescriptor{{
			Entries: []*extrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)}},
		}}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		resp, err := r.ShouldRateLimit(ctx, reqs[i%len(reqs)])
		if err != nil {
			b.Fatal(err)
		}
		if resp.OverallCode != rlspb.RateLimitResponse_OK {
			b.Fatal(resp)
		}
	}
}
