package localsync_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/localsync"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/storetest"
)

func TestDecidesLocallyAndSyncs(t *testing.T) {
	redistest.HourAhead()
	shared := memstore.New(memstore.Options{})
	s, err := localsync.New(localsync.Options{Shared: shared, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}
	for i := range 12 {
		d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: 1})
		if err != nil || d.Allowed != (i < 10) {
			t.Fatalf("take %d: %+v, %v", i, d, err)
		}
	}
	// Nothing reached the shared store yet; a sync pushes the 10.
	if d, _ := shared.Take(ctx, sluice.Request{Key: "k", Limit: l}); d.Remaining != 10 {
		t.Fatalf("shared before sync: %d remaining", d.Remaining)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _ := shared.Take(ctx, sluice.Request{Key: "k", Limit: l}); d.Remaining != 0 {
		t.Fatalf("shared after sync: %d remaining, want 0", d.Remaining)
	}
	// Another instance's traffic is seen at its next sync. Before its
	// first sync of a key it assumes the key full (capacity / Instances):
	// part of the documented bound.
	other, _ := localsync.New(localsync.Options{Shared: shared, Interval: time.Hour})
	defer other.Close()
	other.Take(ctx, sluice.Request{Key: "k", Limit: l})
	other.Sync(ctx)
	if d, _ := other.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: 1}); d.Allowed {
		t.Fatal("the second instance admitted after syncing the first's 10")
	}
	if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: sluice.Limit{Algorithm: sluice.LeakyBucket, Rate: 1, Period: time.Second}, Cost: 1}); !errors.Is(err, localsync.ErrLeakyBucket) {
		t.Fatalf("leaky bucket: %v", err)
	}
}

// Three instances on one Redis, a hot key hammered at twice its limit
// through all three: the global over-admission stays within the bound.
func TestOvershootWithThreeInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("3 s of load through three instances")
	}
	srv := redistest.Standalone(t)
	over := overshoot(t, srv.Addr, 100*time.Millisecond, 3*time.Second)
	t.Logf("over-admission at a 100ms interval, 3 instances, 2x load: %.1f%% of the limit", over)
	if over > 20 {
		t.Errorf("over-admission %.1f%%; the documented bound at 100ms is 10%% (20%% tolerated under test load)", over)
	}
}

// overshoot runs 3 localsync instances on one Redis against a GCRA limit of
// 300/s for d, each offering 200/s (2x in all), and returns how much more
// than the limit allowed they admitted, in percent.
func overshoot(t testing.TB, addr string, interval, d time.Duration) float64 {
	limit := sluice.Limit{Rate: 300, Period: time.Second}
	prefix := "localsync:" + t.Name() + ":"
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 3 {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := localsync.New(localsync.Options{Shared: redisstore.New(c, redisstore.Options{Prefix: prefix}), Interval: interval, Instances: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Millisecond) // 200/s
			defer tick.Stop()
			for time.Since(start) < d {
				<-tick.C
				if dec, err := s.Take(context.Background(), sluice.Request{Key: "hot", Limit: limit, Cost: 1}); err == nil && dec.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	allowed := float64(limit.Capacity()) + float64(limit.Rate)*elapsed
	return max(float64(admitted.Load())-allowed, 0) / allowed * 100
}

// With the shared store down, instances keep deciding and keep what they
// admitted; when it is back, every admission reaches it exactly once.
func TestSharedStoreDownAndBack(t *testing.T) {
	redistest.HourAhead()
	srv := redistest.Own(t) // it changes the server
	shared, err := redisstore.Open(srv.URL(), redisstore.Options{ReconnectInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	s, err := localsync.New(localsync.Options{Shared: shared, Interval: 50 * time.Millisecond, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Hour}
	take := func(n int) {
		for range n {
			if d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: 1}); err != nil || !d.Allowed {
				t.Fatalf("%+v, %v", d, err)
			}
		}
	}
	take(10)
	s.Sync(ctx)
	srv.Kill()
	take(25) // decided locally while Redis is down
	time.Sleep(200 * time.Millisecond)
	srv.Restart() // empty: only what is pushed now counts
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.Sync(ctx)
		d, err := shared.Take(ctx, sluice.Request{Key: "k", Limit: l})
		if err == nil && d.Remaining == 1000-25 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shared store after the outage: %+v, %v; want exactly the 25 admitted while it was down", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Further syncs push nothing more: nothing counted twice.
	s.Sync(ctx)
	s.Sync(ctx)
	if d, _ := shared.Take(ctx, sluice.Request{Key: "k", Limit: l}); d.Remaining != 1000-25 {
		t.Fatalf("after more syncs: %d remaining, want %d", d.Remaining, 1000-25)
	}
}

// The store keeps copies of its keys, never the caller's bytes (the leaky
// bucket is refused: it shapes through one central queue).
func TestKeysCopied(t *testing.T) {
	storetest.RunKeysCopied(t, func(t *testing.T) sluice.Store {
		s, err := localsync.New(localsync.Options{Shared: memstore.New(memstore.Options{}), Interval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.TokenBucket, sluice.GCRA)
}

// A refund gives back first what was admitted here and not pushed yet,
// and sends the rest to the shared store: the key ends where one store
// would have it.
func TestRefundLocalThenShared(t *testing.T) {
	redistest.HourAhead()
	shared := memstore.New(memstore.Options{})
	s, err := localsync.New(localsync.Options{Shared: shared, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}
	taken := time.Now().Add(-time.Millisecond)
	if d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: 6}); err != nil || !d.Allowed {
		t.Fatalf("take 6: %+v, %v", d, err)
	}
	if err := s.Sync(ctx); err != nil { // the 6 pushed
		t.Fatal(err)
	}
	if d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: 3}); err != nil || !d.Allowed {
		t.Fatalf("take 3: %+v, %v", d, err)
	}
	// 5 back: the 3 not pushed yet here, 2 from the shared store.
	if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: 5, Refund: taken}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _ := shared.Take(ctx, sluice.Request{Key: "k", Limit: l}); d.Remaining != 6 {
		t.Fatalf("shared after the refund: %d remaining, want 6 (9 taken, 5 given back)", d.Remaining)
	}
	if err := s.TakeAll(ctx, []sluice.Request{{Key: "k", Limit: l, Cost: 1, Refund: taken}, {Key: "j", Limit: l, Cost: 1}}, make([]sluice.Decision, 2)); !errors.Is(err, sluice.ErrRefundInBatch) {
		t.Fatalf("a refund in a batch: %v", err)
	}
}
