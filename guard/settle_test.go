package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// stores are the stores a Guard is tried on: memory, and a real
// redis-server.
func stores(t *testing.T) map[string]sluice.Store {
	rs, err := redisstore.Open(redistest.Standalone(t).URL(), redisstore.Options{Prefix: redistest.UniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return map[string]sluice.Store{"memory": memstore.New(memstore.Options{}), "redis": rs}
}

// GiveBack returns cost whose take time nobody kept to what each
// algorithm's state holds now, up to the capacity, and is never denied,
// on every algorithm and store: a used-up key given back 30 admits
// exactly 30, and given back more than its capacity admits the capacity.
func TestGuardGiveBack(t *testing.T) {
	redistest.HourAhead()
	ctx := context.Background()
	for name, store := range stores(t) {
		g, err := guard.New(store, guard.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.TokenBucket, sluice.LeakyBucket, sluice.GCRA} {
			t.Run(name+"/"+alg.String(), func(t *testing.T) {
				l := sluice.Limit{Algorithm: alg, Rate: 100, Period: 24 * time.Hour} // nothing refills within the test
				req := sluice.Request{Key: "give-back-" + alg.String(), Limit: l, Cost: 100}
				var d sluice.Decision
				if v := g.TakeLabeled(ctx, "p", req, sluice.FailClosed, &d); v.Outcome != guard.Allowed || d.Remaining != 0 {
					t.Fatalf("100 of 100: %+v %+v", v, d)
				}
				req.Cost = 30
				if v := g.GiveBack(ctx, "p", req, sluice.FailLocal, &d); v.Outcome != guard.Allowed || !d.Allowed || d.Remaining != 30 {
					t.Fatalf("30 given back: %+v %+v, want allowed with 30 remaining", v, d)
				}
				if v := g.TakeLabeled(ctx, "p", req, sluice.FailClosed, &d); v.Outcome != guard.Allowed || d.Remaining != 0 {
					t.Fatalf("30 taken after 30 given back: %+v %+v", v, d)
				}
				req.Cost = 1
				if v := g.TakeLabeled(ctx, "p", req, sluice.FailClosed, &d); v.Outcome != guard.Denied {
					t.Fatalf("past what was given back: %+v, want denied", v)
				}
				req.Cost = 1000
				if v := g.GiveBack(ctx, "p", req, sluice.FailLocal, &d); v.Outcome != guard.Allowed || d.Remaining != 100 {
					t.Fatalf("1000 given back: %+v %+v, want 100 remaining (the capacity)", v, d)
				}
			})
		}
	}
}

// A reservation allowed because the store failed (FailOpen) took nothing:
// settling it for less once the store is back gives nothing back, where a
// refund of that take would have given the key room it never used.
func TestReservationFailedOpenSettlesNothing(t *testing.T) {
	c := newChaos(t, guard.Options{Timeout: 200 * time.Millisecond})
	limit := sluice.Limit{Rate: 10000, Period: 720 * time.Hour} // GCRA: a refund is room, whatever took it
	// A guarded store without a stand-in: the store's failure reaches the
	// Limiter, whose FailOpen decides it.
	g, err := guard.New(c.store, guard.Options{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.guard = g
	l, err := sluice.NewLimiter(g, limit, sluice.LimiterOptions{FailMode: sluice.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d, err := l.AllowN(ctx, "alice", 9000); err != nil || !d.Allowed || d.Remaining != 1000 {
		t.Fatalf("healthy: %+v, %v", d, err)
	}
	c.proxy.Down()
	r, err := l.Reserve(ctx, "alice", 500)
	if err != nil || !r.Allowed {
		t.Fatalf("reserved during the outage: %+v, %v; want allowed (fail open)", r.Decision, err)
	}
	c.proxy.Up()
	c.recovered(t, func(guard.Health) bool { return true })
	peek := func() (sluice.Decision, error) {
		d, err := c.store.Take(ctx, sluice.Request{Key: "alice", Limit: limit})
		for deadline := time.Now().Add(answered); err != nil && time.Now().Before(deadline); {
			d, err = c.store.Take(ctx, sluice.Request{Key: "alice", Limit: limit}) // a connection the outage broke fails once
		}
		return d, err
	}
	if d, err := peek(); err != nil || d.Remaining != 1000 {
		t.Fatalf("after the outage: %+v, %v; want 1000 left", d, err)
	}
	if err := r.Settle(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if d, err := peek(); err != nil || d.Remaining != 1000 {
		t.Fatalf("after settling it to 100: %+v, %v; want 1000 left, as before it", d, err)
	}
}
