package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"unsafe"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/memstore"
)

// stackBudget is what an Envoy check may use of its goroutine's stack
// above the store. grpc-go's stream workers keep the stack a call grew to,
// and a check on the Redis store must fit the 8 KiB a stack starts at,
// less the runtime's guard of 928 bytes, with grpc-go's frames below it
// (about 1.6 KiB) and the Redis store's and rueidis' above it (about
// 2.9 KiB). At 4.8 KiB above the store, every worker's stack doubled to
// 16 KiB (docs/performance.md, "A check's stack"); it is 2.5 KiB.
const stackBudget = 2560

// TestRLSCheckStackAboveTheStore measures the stack a check uses between
// the handler and the store: the distance between a local of the caller
// and one of the store's Take, on a goroutine whose stack was grown
// first, with the collector off, so that the stack does not move between
// the two.
func TestRLSCheckStackAboveTheStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(path, []byte("domains: [{domain: edge, descriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1000000}}]}]\n"), 0o644)
	s, err := New(Options{Config: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	store := &deepest{Store: memstore.New(memstore.Options{})}
	if s.guard, err = guard.New(store, guard.Options{}); err != nil {
		t.Fatal(err)
	}
	r := &rls{s: s}
	req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*extrl.RateLimitDescriptor{{
		Entries: []*extrl.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	done := make(chan uintptr)
	go func() {
		grow(64)
		var top byte
		from := uintptr(unsafe.Pointer(&top))
		if _, err := r.ShouldRateLimit(context.Background(), req); err != nil {
			t.Error(err)
		}
		done <- from - store.at
	}()
	used := <-done
	t.Logf("a check used %d bytes of stack above the store", used)
	switch {
	case raceEnabled:
		// The race detector's instrumentation makes every frame larger:
		// the budget is the real build's, which .ci/run tests too.
	case used > stackBudget:
		t.Fatalf("a check used %d bytes of stack above the store; the budget is %d", used, stackBudget)
	}
}

// deepest is the memory store, recording where on its caller's stack a
// decision of one request runs.
type deepest struct {
	*memstore.Store
	at uintptr
}

func (d *deepest) Take(ctx context.Context, req sluice.Request) (dec sluice.Decision, err error) {
	var here byte
	d.at = uintptr(unsafe.Pointer(&here))
	err = d.Store.TakeInto(ctx, &req, &dec) // no copy of its own: the store's Take is where the stack ends
	return dec, err
}

// grow grows the goroutine's stack by at least kib KiB.
//
//go:noinline
func grow(kib int) byte {
	var pad [1024]byte
	pad[kib%1024] = byte(kib)
	if kib > 0 {
		return grow(kib-1) + pad[(kib+1)%1024]
	}
	return pad[0]
}
