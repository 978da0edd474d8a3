package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/pgstore"
)

func TestZZ(t *testing.T) {
	_, pool := database(t)
	s := newStore(t, pool, pgstore.Options{})
	ctx := context.Background()
	for _, q := range []string{"SELECT 1", "SELECT " + `"` + s.Schema() + `"` + ".clock()"} {
		start := time.Now()
		for range 300 {
			var x int64
			pool.QueryRow(ctx, q).Scan(&x)
		}
		t.Logf("%s: %v", q, time.Since(start)/300)
	}
	l := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1000000, Period: time.Hour}
	for _, c := range []int64{0, 1} {
		start := time.Now()
		for range 300 {
			s.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: c})
		}
		t.Logf("cost %d: %v", c, time.Since(start)/300)
	}
	var x int64
	start := time.Now()
	for range 300 {
		pool.QueryRow(ctx, "SELECT ("+`"`+s.Schema()+`"`+".status(6, 0, 0, 0, 1000, 3600000000, 1000, '{0,0,0,0}', 1000000000000, 1)).remaining").Scan(&x)
	}
	t.Logf("status: %v", time.Since(start)/300)
	start = time.Now()
	for range 300 {
		pool.QueryRow(ctx, "SELECT ("+`"`+s.Schema()+`"`+".muldiv(6, 7, 5)).q").Scan(&x)
	}
	t.Logf("muldiv: %v", time.Since(start)/300)
}
