package server

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/redistest"
)

// A Redis hang (the process stopped) with default settings: a 5/1m key
// admits between 1 and 5 of the 40 checks made during it, every check is
// answered while Redis is still hung, and the log says the store is
// failing.
func TestRedisHangDefaultSettings(t *testing.T) {
	redis := redistest.Own(t) // it changes the server
	r := start(t, "store: {type: redis, url: \""+redis.URL()+"\"}\npolicies:\n  - {name: p, limit: 5/1m}\n", "")
	if res, _ := r.check(t, "p", "warm"); !res.Allowed {
		t.Fatalf("healthy: %+v", res)
	}
	redis.Pause()
	var admitted, answered atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				res, code := r.check(t, "p", "hung")
				if code != 200 {
					t.Errorf("status %d: %s", code, res.Error)
					return
				}
				answered.Add(1)
				if res.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	// Redis answers nothing until resumed: a check that waited for it
	// would never be answered.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		redis.Resume()
		t.Fatalf("%d of 40 checks answered in 2 minutes of a hung Redis: the rest wait for it", answered.Load())
	}
	redis.Resume()
	if n := admitted.Load(); n < 1 || n > 5 {
		t.Fatalf("%d of %d checks admitted during the hang; want 1 to 5", n, answered.Load())
	}
	if !strings.Contains(r.log.String(), "rate limit store failing") {
		t.Fatalf("no log line says the store is failing:\n%s", r.log)
	}
}

// Redis killed and restarted empty five times under checks: every check is
// answered, Redis decides again after each restart, and no goroutine is
// left behind once the server is shut down.
func TestRedisRestartsLeakNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis killed and restarted five times")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	redis := redistest.Own(t) // it changes the server
	r := start(t, "store: {type: redis, url: \""+redis.URL()+"\"}\npolicies:\n  - {name: p, limit: 1000/1m}\n", "")
	for cycle := range 5 {
		redis.Kill()
		for range 10 {
			if res, code := r.check(t, "p", "k"); code != 200 || !res.Allowed || !res.Local {
				t.Fatalf("cycle %d, Redis down: %d %+v", cycle, code, res)
			}
		}
		redis.Restart()
		deadline := time.Now().Add(3 * time.Second)
		for {
			res, _ := r.check(t, "p", "k")
			if !res.Local {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cycle %d: not decided by Redis 3s after its restart", cycle)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	client.CloseIdleConnections()
	r.Shutdown(t.Context())
}

// The end of a Redis hang is exact, with default settings: checks during a
// hang (the process stopped) are decided locally; once it is over, with
// no check in between, the service finds Redis back by itself and tells it
// what was admitted locally; then 64 callers on a fresh fixed_window
// 1000/1h key get exactly 1,000, all from Redis, and on the key the
// stand-in admitted k times exactly 1,000 − k.
func TestRedisHangEndsExactly(t *testing.T) {
	if testing.Short() {
		t.Skip("a Redis hang, then 3,072 checks")
	}
	redis := redistest.Own(t) // it changes the server
	r := start(t, "store: {type: redis, url: \""+redis.URL()+"\"}\npolicies:\n  - {name: hot, limit: fixed_window 1000/1h}\n", "")
	if res, _ := r.check(t, "hot", "warm"); !res.Allowed || res.Local {
		t.Fatalf("healthy: %+v", res)
	}
	// The window is aligned to the hour: none of its ends within the
	// test.
	redistest.HourAhead()
	redis.Pause()
	waitFor(t, "checks decided locally during the hang", func() bool {
		res, _ := r.check(t, "hot", "probe")
		return res.Local
	})
	var local atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if res, _ := r.check(t, "hot", "during"); res.Allowed && res.Local {
					local.Add(1)
				}
			}
		})
	}
	wg.Wait()
	redis.Resume()
	k := local.Load()
	if k == 0 {
		t.Fatal("nothing was admitted locally during the hang: the test proves nothing")
	}
	// Quiet: no check until Redis is used again and told.
	waitFor(t, fmt.Sprintf("after the hang, with no checks: the breaker closed and %d replayed", k), func() bool {
		h := r.Guard().Health()
		return h.Breaker == "closed" && h.Replayed >= k
	})
	burst := func(key string) (admitted, fromStandin int64) {
		var a, l atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for range 24 {
					res, code := r.check(t, "hot", key)
					if code != 200 {
						t.Errorf("status %d: %s", code, res.Error)
						return
					}
					if res.Allowed {
						a.Add(1)
					}
					if res.Local {
						l.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return a.Load(), l.Load()
	}
	if n, l := burst("after"); n != 1000 || l != 0 {
		t.Errorf("a fresh key after the hang: %d admitted, %d decided locally; want exactly 1000, none locally", n, l)
	}
	if n, l := burst("during"); n != 1000-k || l != 0 {
		t.Errorf("the key admitted %d times locally: %d more admitted by Redis (%d locally); want exactly %d", k, n, l, 1000-k)
	}
}
