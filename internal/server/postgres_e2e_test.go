//go:build e2e

package server

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/pgtest"
)

// A calendar 5/month key used 3 times has 2 left after the service
// restarts, and after PostgreSQL restarts (pg_ctl restart -m fast).
func TestPostgresQuotaAcrossRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: restarts PostgreSQL")
	}
	pg := pgtest.Own(t)
	url := pg.DB(t)
	config := "store: {type: postgres, url: \"" + url + "\", timeout: 30s, fail_mode: closed}\npolicies:\n  - {name: month, limit: calendar 5/month}\n"
	r := start(t, config, "")
	for i := range 3 {
		if res, code := r.check(t, "month", "acme"); code != 200 || !res.Allowed {
			t.Fatalf("use %d: %d %+v", i, code, res)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.Shutdown(ctx)
	r = start(t, config, "")
	// The fourth use: allowed, with 1 left, so 2 were.
	if res, code := r.check(t, "month", "acme"); code != 200 || !res.Allowed || res.Remaining != 1 {
		t.Fatalf("after sluice serve restarted, the fourth use: %d %+v; want allowed with 1 left", code, res)
	}
	pg.Restart(t, "fast")
	// The pool's connections died with the server; the breaker may open
	// on the first checks after it: ask until PostgreSQL answers.
	for {
		res, code := r.check(t, "month", "acme")
		if code == 200 && res.Error == "" {
			if !res.Allowed || res.Remaining != 0 {
				t.Fatalf("after PostgreSQL restarted, the fifth use: %+v; want allowed with 0 left", res)
			}
			break
		}
		if t.Context().Err() != nil {
			t.Fatal("PostgreSQL never answered after its restart")
		}
	}
}
