package server

import (
	"context"
	"testing"
	"time"
)

// BenchmarkReceiveWatch is what the receive deadline adds to a gRPC call:
// watching it from its headers to its request, beside the stream context
// grpc-go makes for every call anyway (base), for a call without a
// deadline and for one whose own deadline comes first, as Envoy sends.
func BenchmarkReceiveWatch(b *testing.B) {
	for _, deadline := range []bool{false, true} {
		stream := func() (context.Context, context.CancelFunc) {
			if deadline {
				return context.WithTimeout(context.Background(), time.Second)
			}
			return context.WithCancel(context.Background())
		}
		name := map[bool]string{false: "no-deadline", true: "deadline"}[deadline]
		b.Run(name+"/base", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, cancel := stream()
				cancel()
			}
		})
		b.Run(name+"/watched", func(b *testing.B) {
			w := newReceiveWatch(10*time.Second, func(string) {})
			defer w.stop()
			b.ReportAllocs()
			for b.Loop() {
				parent, cancel := stream()
				ctx, _ := w.tap(parent, nil)
				w.arrived(ctx)
				cancel()
			}
		})
	}
}
