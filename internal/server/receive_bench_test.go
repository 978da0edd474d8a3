package server

import (
	"context"
	"testing"
	"time"
)

// BenchmarkReceiveWatch is what the receive deadline adds to a gRPC call:
// watching it from its headers to its request, beside the stream context
// grpc-go makes for every call anyway (base).
func BenchmarkReceiveWatch(b *testing.B) {
	b.Run("base", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, cancel := context.WithCancel(context.Background())
			cancel()
		}
	})
	b.Run("watched", func(b *testing.B) {
		w := newReceiveWatch(10*time.Second, func(string) {})
		defer w.stop()
		b.ReportAllocs()
		for b.Loop() {
			parent, cancel := context.WithCancel(context.Background())
			ctx, _ := w.tap(parent, nil)
			w.arrived(ctx)
			cancel()
		}
	})
}
