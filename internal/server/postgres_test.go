package server

import (
	"context"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/pgtest"
)

// The service on PostgreSQL is exact on a hot key: 64 callers × 40 checks
// of one key under fixed_window 1000/1h and under gcra 1000/1h admit
// exactly 1,000 each, every one decided by PostgreSQL. The store timeout
// is generous: the test proves the count, not a latency, on a busy host.
func TestPostgresHotKeyExact(t *testing.T) {
	url := pgtest.Own(t).DB(t)
	r := start(t, "store: {type: postgres, url: \""+url+"\", timeout: 30s}\npolicies:\n"+
		"  - {name: fixed, limit: fixed_window 1000/1h}\n  - {name: gcra, limit: gcra 1000/1h}\n", "")
	before := r.checks(t)
	for _, policy := range []string{"fixed", "gcra"} {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for range 40 {
					res, code, err := r.tryCheck(policy, "one")
					if err != nil || code != 200 {
						t.Errorf("status %d, %v: %s", code, err, res.Error)
						return
					}
					if res.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if n := admitted.Load(); n != 1000 {
			t.Errorf("%s: admitted %d of %d; want exactly 1000", policy, n, 64*40)
		}
	}
	after := r.checks(t)
	for _, failed := range []string{"local_allowed", "local_denied", "failed_open", "failed_closed"} {
		if d := after[failed] - before[failed]; d != 0 {
			t.Errorf("%v checks %s on a healthy PostgreSQL", d, failed)
		}
	}
	resp, err := client.Get(r.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "store: postgres, schema sluice at version 1 of 1") {
		t.Errorf("/readyz: %d %s", resp.StatusCode, body)
	}
}

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
