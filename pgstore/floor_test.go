package pgstore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/pgstore"
)

// TestTakeTx charges a quota in 8 transactions, commits 4 and rolls 4
// back: only the committed takes count.
func TestTakeTx(t *testing.T) {
	ctx := context.Background()
	_, pool := database(t)
	s := newStore(t, pool, pgstore.Options{})
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Hour}
	for i := range 8 {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := s.TakeTx(ctx, tx, sluice.Request{Key: "plan:acme", Limit: l, Cost: 1})
		if err != nil || !ds[0].Allowed {
			t.Fatalf("transaction %d: %+v, %v; want allowed", i, ds, err)
		}
		if i%2 == 0 {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	d, err := s.Take(ctx, sluice.Request{Key: "plan:acme", Limit: l, Cost: 1})
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after 4 commits and 4 rollbacks: %+v, %v; want allowed, 0 left", d, err)
	}
	if d, err := s.Take(ctx, sluice.Request{Key: "plan:acme", Limit: l, Cost: 1}); err != nil || d.Allowed {
		t.Fatalf("the sixth: %+v, %v; want refused", d, err)
	}
}

// TestTakeTxWithTheCallersWork is the projects-per-plan example: the
// project's row and the quota's charge commit together.
func TestTakeTxWithTheCallersWork(t *testing.T) {
	ctx := context.Background()
	_, pool := database(t)
	s := newStore(t, pool, pgstore.Options{})
	if _, err := pool.Exec(ctx, "CREATE TABLE projects (id serial PRIMARY KEY, plan text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	l := sluice.Limit{Algorithm: sluice.Calendar, Rate: 3, Period: sluice.CalendarMonth}
	created := 0
	for i := range 5 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO projects (plan) VALUES ('acme')"); err != nil {
				return err
			}
			ds, err := s.TakeTx(ctx, tx, sluice.Request{Key: "projects:acme", Limit: l, Cost: 1})
			if err != nil {
				return err
			}
			if !ds[0].Allowed {
				return errQuota
			}
			return nil
		})
		switch {
		case err == nil:
			created++
		case !errors.Is(err, errQuota):
			t.Fatalf("project %d: %v", i, err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM projects").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if created != 3 || n != 3 {
		t.Fatalf("created %d, %d rows; want 3 and 3", created, n)
	}
}

var errQuota = errors.New("quota used up")

// TestHotKeyExact has 64 callers check one key 40 times each under a
// limit of 1000: exactly 1000 are admitted, coalesced or not.
func TestHotKeyExact(t *testing.T) {
	_, pool := database(t)
	for _, inFlight := range []int{0, 64} {
		s := newStore(t, pool, pgstore.Options{MaxInFlight: inFlight})
		for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.GCRA} {
			l := sluice.Limit{Algorithm: alg, Rate: 1000, Period: time.Hour}
			if got := hammer(t, s, l, 64, 40); got != 1000 {
				t.Errorf("%v, MaxInFlight %d: admitted %d; want 1000", alg, inFlight, got)
			}
		}
	}
}

// hammer has callers take one from key "hot" under l n times each, and
// returns how many were admitted.
func hammer(t testing.TB, s *pgstore.Store, l sluice.Limit, callers, n int) int64 {
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			for range n {
				d, err := s.Take(context.Background(), sluice.Request{Key: "hot", Limit: l, Cost: 1})
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return admitted.Load()
}

// TestSchemaNewerRefused: a schema migrated by a newer binary is refused
// and left as it is.
func TestSchemaNewerRefused(t *testing.T) {
	ctx := context.Background()
	url, pool := database(t)
	newStore(t, pool, pgstore.Options{Schema: "sluice"})
	if _, err := pool.Exec(ctx, "INSERT INTO sluice.schema_version (version) VALUES ($1)", pgstore.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	_, err := pgstore.Open(ctx, url, pgstore.Options{})
	if !errors.Is(err, pgstore.ErrSchemaNewer) {
		t.Fatalf("Open on a newer schema: %v; want ErrSchemaNewer", err)
	}
}

// TestSweep: rows back to full are deleted, live ones kept.
func TestSweep(t *testing.T) {
	ctx := context.Background()
	_, pool := database(t)
	s := newStore(t, pool, pgstore.Options{SweepEvery: -1, SweepBlocks: 1})
	now := time.Now()
	short := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1000, Period: time.Millisecond * 10}
	long := sluice.Limit{Algorithm: sluice.Calendar, Rate: 5, Period: sluice.CalendarMonth}
	for i := range 300 {
		key := "k" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		// Back to full 10µs after the take: the row expires a second
		// of margin later.
		if _, err := s.Take(ctx, sluice.Request{Key: key, Limit: short, Cost: 1, Now: now.Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Take(ctx, sluice.Request{Key: "keep", Limit: long, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	count := func(table string) (n int) {
		t.Helper()
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+`"`+s.Schema()+`".`+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count("state"); n != 300 {
		t.Fatalf("%d rows in state; want 300", n)
	}
	// Their expiry is a second of margin after their reset: wait for it.
	deadline := time.Now().Add(30 * time.Second)
	for count("state") > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows left in state", count("state"))
		}
		if err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := count("quota"); n != 1 {
		t.Fatalf("%d rows in quota; want the live one", n)
	}
}

// TestIdempotentID: a call repeated with its ID is applied once.
func TestIdempotentID(t *testing.T) {
	ctx := context.Background()
	_, pool := database(t)
	s := newStore(t, pool, pgstore.Options{})
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}
	for range 3 {
		if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: 4, Force: true, ID: "sync-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if d, _ := s.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: 4, ID: "sync-2"}); d.Remaining != 2 {
		t.Fatalf("after sync-1 three times and sync-2: %+v; want 2 remaining", d)
	}
}
