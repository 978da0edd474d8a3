//go:build e2e

package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/pgstore"
)

// TestQuotaSurvivesRestart uses a calendar quota 3 times of 5 and
// restarts PostgreSQL, cleanly and then as after a crash: 2 are left
// each time. A rate limit in the unlogged table survives the clean
// restart and is back to full after the crash.
func TestQuotaSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: restarts PostgreSQL")
	}
	ctx := context.Background()
	srv := pgtest.Own(t)
	url := srv.DB(t)
	s, err := pgstore.Open(ctx, url, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	month := sluice.Limit{Algorithm: sluice.Calendar, Rate: 5, Period: sluice.CalendarMonth}
	rate := sluice.Limit{Algorithm: sluice.GCRA, Rate: 5, Period: time.Hour}
	for range 3 {
		for _, l := range []sluice.Limit{month, rate} {
			if d, err := s.Take(ctx, sluice.Request{Key: "acme", Limit: l, Cost: 1}); err != nil || !d.Allowed {
				t.Fatalf("%v: %+v, %v", l, d, err)
			}
		}
	}
	left := func(l sluice.Limit) int64 {
		t.Helper()
		// The pool's connections died with the server: retry until a
		// new one answers.
		deadline := time.Now().Add(30 * time.Second)
		for {
			d, err := s.Take(ctx, sluice.Request{Key: "acme", Limit: l})
			if err == nil {
				return d.Remaining
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the restart: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	srv.Restart(t, "fast")
	if got := left(month); got != 2 {
		t.Errorf("calendar 5/month used 3 times, after pg_ctl restart -m fast: %d left; want 2", got)
	}
	if got := left(rate); got != 2 {
		t.Errorf("gcra 5/h used 3 times, after pg_ctl restart -m fast: %d left; want 2", got)
	}
	srv.Restart(t, "immediate")
	if got := left(month); got != 2 {
		t.Errorf("calendar 5/month used 3 times, after pg_ctl restart -m immediate: %d left; want 2", got)
	}
	if got := left(rate); got != 5 {
		t.Errorf("gcra 5/h in the unlogged table, after pg_ctl restart -m immediate: %d left; want 5 (emptied)", got)
	}
}
