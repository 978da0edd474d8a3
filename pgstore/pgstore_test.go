package pgstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/pgstore"
	"github.com/sluicehq/sluice/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// database is a database of t's own on the shared server, and a pool on
// it that t closes.
func database(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	url := pgtest.Shared(t).DB(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return url, pool
}

var schemas atomic.Int64

// storesOn returns a storetest.NewStore making stores on pool, each in a
// fresh schema.
func storesOn(pool *pgxpool.Pool, opts pgstore.Options) storetest.NewStore {
	return func(t *testing.T) sluice.Store { return newStore(t, pool, opts) }
}

// newStore returns a migrated store on pool in a fresh schema, closed
// when t ends.
func newStore(t testing.TB, pool *pgxpool.Pool, opts pgstore.Options) *pgstore.Store {
	t.Helper()
	if opts.Schema == "" {
		opts.Schema = fmt.Sprintf("s%d", schemas.Add(1))
	}
	s := pgstore.New(pool, opts)
	t.Cleanup(s.Close)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	_, pool := database(t)
	storetest.Run(t, storesOn(pool, pgstore.Options{}))
}
