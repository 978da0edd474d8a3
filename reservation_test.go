package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// reservationStores are the stores a Reservation is tried on: memory, and
// a real redis-server.
func reservationStores(t *testing.T) map[string]sluice.Store {
	rs, err := redisstore.Open(redistest.Standalone(t).URL(), redisstore.Options{Prefix: redistest.UniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return map[string]sluice.Store{"memory": memstore.New(memstore.Options{}), "redis": rs}
}

// A reservation settled for less gives the difference back, one settled
// for more takes it, a cancelled one gives all back, and a second
// settlement changes nothing: on every algorithm and store.
func TestReservationSettlesToTheActualCost(t *testing.T) {
	redistest.HourAhead()
	ctx := context.Background()
	for name, store := range reservationStores(t) {
		for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.TokenBucket, sluice.LeakyBucket, sluice.GCRA} {
			t.Run(name+"/"+alg.String(), func(t *testing.T) {
				// A day: a bucket refills one in 864 s, nothing within the test.
				l, err := sluice.NewLimiter(store, sluice.Limit{Algorithm: alg, Rate: 100, Period: 24 * time.Hour}, sluice.LimiterOptions{})
				if err != nil {
					t.Fatal(err)
				}
				key := "k-" + alg.String()
				left := func() int64 {
					d, err := l.Peek(ctx, key)
					if err != nil {
						t.Fatal(err)
					}
					return d.Remaining
				}
				r, err := l.Reserve(ctx, key, 30)
				if err != nil || !r.Allowed || r.Remaining != 70 {
					t.Fatalf("reserve 30: %+v, %v", r.Decision, err)
				}
				if err := r.Settle(ctx, 12); err != nil {
					t.Fatal(err)
				}
				if got := left(); got != 88 {
					t.Fatalf("settled 30 to 12: %d left, want 88", got)
				}
				if err := r.Settle(ctx, 0); !errors.Is(err, sluice.ErrSettled) {
					t.Fatalf("a second settlement: %v, want ErrSettled", err)
				}
				if got := left(); got != 88 {
					t.Fatalf("after a second settlement: %d left, want 88", got)
				}
				r, _ = l.Reserve(ctx, key, 10)
				if err := r.Settle(ctx, 50); err != nil {
					t.Fatal(err)
				}
				if got := left(); got != 38 {
					t.Fatalf("settled 10 to 50: %d left, want 38", got)
				}
				r, _ = l.Reserve(ctx, key, 20)
				if err := r.Cancel(ctx); err != nil {
					t.Fatal(err)
				}
				if got := left(); got != 38 {
					t.Fatalf("cancelled 20: %d left, want 38", got)
				}
				// An estimate of 0 takes nothing now and its whole cost later.
				r, _ = l.Reserve(ctx, key, 0)
				if !r.Allowed {
					t.Fatalf("an estimate of 0 with room left: %+v", r.Decision)
				}
				before := left()
				if err := r.Settle(ctx, 4); err != nil {
					t.Fatal(err)
				}
				if got := left(); got != before-4 {
					t.Fatalf("estimate 0 settled to 4: %d left, want %d", got, before-4)
				}
				// Settled past what is left: never refused, the key is used up.
				r, _ = l.Reserve(ctx, key, 1)
				if err := r.Settle(ctx, 1000); err != nil {
					t.Fatal(err)
				}
				if d, _ := l.Allow(ctx, key); d.Allowed {
					t.Fatalf("allowed after a settlement past the capacity: %+v", d)
				}
				// A denied reservation took nothing: settling it does nothing.
				r, _ = l.Reserve(ctx, key, 5)
				if r.Allowed {
					t.Fatalf("reserved on a used-up key: %+v", r.Decision)
				}
				if err := r.Settle(ctx, 5); err != nil {
					t.Fatalf("settling a denied reservation: %v", err)
				}
			})
		}
	}
}

// GiveBack returns cost whose take time nobody kept to what each
// algorithm's state holds now, up to the capacity, and is never denied,
// on every algorithm and store: a used-up key given back 30 admits
// exactly 30, and given back more than its capacity admits the capacity.
func TestGuardGiveBack(t *testing.T) {
	redistest.HourAhead()
	ctx := context.Background()
	for name, store := range reservationStores(t) {
		g, err := sluice.NewGuard(store, sluice.GuardOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.TokenBucket, sluice.LeakyBucket, sluice.GCRA} {
			t.Run(name+"/"+alg.String(), func(t *testing.T) {
				l := sluice.Limit{Algorithm: alg, Rate: 100, Period: 24 * time.Hour} // nothing refills within the test
				req := sluice.Request{Key: "give-back-" + alg.String(), Limit: l, Cost: 100}
				var d sluice.Decision
				if v := g.Take(ctx, "p", req, sluice.FailClosed, &d); v.Outcome != sluice.Allowed || d.Remaining != 0 {
					t.Fatalf("100 of 100: %+v %+v", v, d)
				}
				req.Cost = 30
				if v := g.GiveBack(ctx, "p", req, sluice.FailLocal, &d); v.Outcome != sluice.Allowed || !d.Allowed || d.Remaining != 30 {
					t.Fatalf("30 given back: %+v %+v, want allowed with 30 remaining", v, d)
				}
				if v := g.Take(ctx, "p", req, sluice.FailClosed, &d); v.Outcome != sluice.Allowed || d.Remaining != 0 {
					t.Fatalf("30 taken after 30 given back: %+v %+v", v, d)
				}
				req.Cost = 1
				if v := g.Take(ctx, "p", req, sluice.FailClosed, &d); v.Outcome != sluice.Denied {
					t.Fatalf("past what was given back: %+v, want denied", v)
				}
				req.Cost = 1000
				if v := g.GiveBack(ctx, "p", req, sluice.FailLocal, &d); v.Outcome != sluice.Allowed || d.Remaining != 100 {
					t.Fatalf("1000 given back: %+v %+v, want 100 remaining (the capacity)", v, d)
				}
			})
		}
	}
}

// A Wait that gives up during a leaky bucket's shaping delay gives its
// slot back: the next request is shaped as if it had never come.
func TestWaitGivesTheSlotBackWhenItGivesUp(t *testing.T) {
	for name, store := range reservationStores(t) {
		t.Run(name, func(t *testing.T) {
			tell := telling{Store: store, took: make(chan struct{}, 8)}
			l, err := sluice.NewLimiter(tell, sluice.Limit{Algorithm: sluice.LeakyBucket, Rate: 1, Period: time.Hour, Burst: 3}, sluice.LimiterOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := l.Wait(ctx, "k"); err != nil { // the first goes at once
				t.Fatal(err)
			}
			before, _ := l.Peek(ctx, "k")
			short, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := l.Wait(short, "k"); !errors.Is(err, sluice.ErrWouldExceedDeadline) {
				t.Fatalf("a wait of an hour in a minute: %v", err)
			}
			// A caller that goes away while its request waits its turn:
			// gone once the wait has reserved (it then waits out its delay
			// of an hour).
			for len(tell.took) > 0 {
				<-tell.took // the two waits above
			}
			gone, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- l.Wait(gone, "k") }()
			<-tell.took
			if d, _ := l.Peek(ctx, "k"); d.Remaining >= before.Remaining {
				t.Fatalf("%d left while a wait holds its slot, %d before", d.Remaining, before.Remaining)
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("a wait whose caller went away: %v", err)
			}
			if after, _ := l.Peek(ctx, "k"); after.Remaining != before.Remaining {
				t.Fatalf("%d left after two waits that gave up, %d before: their slots were kept", after.Remaining, before.Remaining)
			}
		})
	}
}

// telling is a Store that tells on took each request its Store admitted
// that takes (not a peek, not a refund), once it has.
type telling struct {
	sluice.Store
	took chan struct{}
}

func (s telling) Take(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	d, err := s.Store.Take(ctx, req)
	if err == nil && d.Allowed && req.Cost > 0 && req.Refund.IsZero() {
		s.took <- struct{}{}
	}
	return d, err
}

func (s telling) TakeAll(ctx context.Context, reqs []sluice.Request, dst []sluice.Decision) error {
	err := s.Store.TakeAll(ctx, reqs, dst)
	for i, req := range reqs {
		if err == nil && dst[i].Allowed && req.Cost > 0 && req.Refund.IsZero() {
			s.took <- struct{}{}
		}
	}
	return err
}

// A refund goes alone: a batch of several requests that holds one is
// refused, and changes nothing.
func TestRefundInABatchIsRefused(t *testing.T) {
	ctx := context.Background()
	limit := sluice.Limit{Rate: 10, Period: time.Hour}
	for name, store := range reservationStores(t) {
		t.Run(name, func(t *testing.T) {
			if _, err := store.Take(ctx, sluice.Request{Key: "a", Limit: limit, Cost: 4}); err != nil {
				t.Fatal(err)
			}
			reqs := []sluice.Request{
				{Key: "a", Limit: limit, Cost: 4, Refund: time.Now().Add(-time.Second)},
				{Key: "b", Limit: limit, Cost: 1},
			}
			if err := store.TakeAll(ctx, reqs, make([]sluice.Decision, 2)); !errors.Is(err, sluice.ErrRefundInBatch) {
				t.Fatalf("a refund in a batch of two: %v, want ErrRefundInBatch", err)
			}
			if d, _ := store.Take(ctx, sluice.Request{Key: "a", Limit: limit}); d.Remaining != 6 {
				t.Fatalf("%d left after a refused batch, want 6", d.Remaining)
			}
		})
	}
}

// A reservation allowed because the store failed (FailOpen) took nothing:
// settling it for less once the store is back gives nothing back, where a
// refund of that take would have given the key room it never used.
func TestReservationFailedOpenSettlesNothing(t *testing.T) {
	c := newChaos(t, sluice.GuardOptions{Timeout: 200 * time.Millisecond})
	limit := sluice.Limit{Rate: 10000, Period: 720 * time.Hour} // GCRA: a refund is room, whatever took it
	l, err := sluice.NewLimiter(c.store, limit, sluice.LimiterOptions{Guard: c.guard, FailMode: sluice.FailOpen})
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
	c.recovered(t, func(sluice.Health) bool { return true })
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
