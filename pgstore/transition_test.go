package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/pgstore"
)

// A transaction whose connection is killed (pg_terminate_backend) after
// TakeTx charged nothing: the take went with it.
func TestTakeTxConnectionKilled(t *testing.T) {
	ctx := context.Background()
	_, pool := database(t)
	s := newStore(t, pool, pgstore.Options{})
	l := sluice.Limit{Algorithm: sluice.Calendar, Rate: 5, Period: sluice.CalendarMonth}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TakeTx(ctx, tx, sluice.Request{Key: "k", Limit: l, Cost: 3}); err != nil {
		t.Fatal(err)
	}
	pid := tx.Conn().PgConn().PID()
	var killed bool
	if err := pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend: %v, %v", killed, err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the killed transaction committed")
	}
	// The killed backend's locks go with it: the row is free at once.
	d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: l})
	if err != nil || d.Remaining != 5 {
		t.Fatalf("after the kill: %+v, %v; want 5 left", d, err)
	}
}

// A database in read-only mode makes checks fail with an error, never
// decide: a Guard then decides by its fail mode.
func TestReadOnlyDatabase(t *testing.T) {
	ctx := context.Background()
	url, pool := database(t)
	s := newStore(t, pool, pgstore.Options{})
	l := sluice.Limit{Algorithm: sluice.GCRA, Rate: 5, Period: time.Hour}
	if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ALTER DATABASE "+pool.Config().ConnConfig.Database+" SET default_transaction_read_only = on"); err != nil {
		t.Fatal(err)
	}
	ro, err := pgxpool.New(ctx, url) // new connections read the setting
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	rs := pgstore.New(ro, pgstore.Options{Schema: s.Schema(), SweepEvery: -1})
	defer rs.Close()
	if d, err := rs.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: 1}); err == nil {
		t.Fatalf("a take on a read-only database: %+v, no error", d)
	}
	if _, err := pool.Exec(ctx, "ALTER DATABASE "+pool.Config().ConnConfig.Database+" SET default_transaction_read_only = off"); err != nil {
		t.Fatal(err)
	}
	d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: l})
	if err != nil || d.Remaining != 4 {
		t.Fatalf("after read-only: %+v, %v; want 4 left (the failed take charged nothing)", d, err)
	}
}
