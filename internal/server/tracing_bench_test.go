package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkCheckTracing is one /v1/check decision on the memory store with
// tracing off (the default: nothing installed) and on (spans to an
// in-memory exporter), so that what tracing costs, and that off costs
// nothing, are measured.
//
//	go test -run '^$' -bench CheckTracing -benchmem ./internal/server
func BenchmarkCheckTracing(b *testing.B) {
	path := filepath.Join(b.TempDir(), "sluice.yaml")
	os.WriteFile(path, []byte("policies: [{name: p, limit: 1000000000/1s}]"), 0o644)
	for _, on := range []bool{false, true} {
		b.Run("tracing="+strconv.FormatBool(on), func(b *testing.B) {
			s, err := New(Options{Config: path, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			if on {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
				s.tracing = &tracing{provider: tp, tracer: tp.Tracer("bench")}
			}
			cfg := s.state().cfg
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				n, err := s.resolve(cfg, Check{Policy: "p", Key: "key-" + strconv.Itoa(i%10_000)})
				if err != nil {
					b.Fatal(err)
				}
				if out := s.checkPolicy(ctx, n); out.Err != nil {
					b.Fatal(out.Err)
				}
			}
		})
	}
}
