//go:build e2e

package server

import (
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The busy-host floor: default settings beside two CPU-bound processes.
// Behind the e2e build tag; .ci/run runs it without the race detector.

// The floor for default settings on a busy host: 64 callers on one hot
// key, fixed_window 1000/1m, Redis healthy, two CPU-bound processes beside
// them on the machine: exactly 1,000 admitted, none decided by the failure
// policy. The race detector makes every check several times slower than
// it is, so under it the test proves the count at the same concurrency
// without the two hogs.
func TestBusyHostDefaultSettingsExact(t *testing.T) {
	redis := redistest.Standalone(t)
	r := start(t, "store: {type: redis, url: \""+redis.URL()+"\"}\npolicies:\n  - {name: hot, limit: fixed_window 1000/1m}\n", "")
	if !raceEnabled {
		for range 2 {
			hog := exec.Command("sh", "-c", "while :; do :; done")
			if err := hog.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { hog.Process.Kill(); hog.Wait() })
		}
	}
	// The window is aligned to the minute: start in a fresh one.
	redistest.WindowAhead(time.Minute, 20*time.Second)
	before := r.checks(t)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 24 {
				res, code := r.check(t, "hot", "one")
				if code != 200 {
					t.Errorf("status %d: %s", code, res.Error)
					return
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	after := r.checks(t)
	t.Logf("store calls: p99.9 under %v, slowest under %v", r.storeQuantile(t, 0.999), r.storeQuantile(t, 1))
	if n := admitted.Load(); n != 1000 {
		t.Errorf("admitted %d of %d; want exactly 1000", n, 64*24)
	}
	for _, failed := range []string{"local_allowed", "local_denied", "failed_open", "failed_closed"} {
		if d := after[failed] - before[failed]; d != 0 {
			t.Errorf("%v checks %s on a healthy Redis (GOMAXPROCS %d)", d, failed, runtime.GOMAXPROCS(0))
		}
	}
}

// storeQuantile returns the upper bound of the sluice_store_duration_seconds
// bucket that holds quantile q of the store calls so far.
func (r *running) storeQuantile(t testing.TB, q float64) time.Duration {
	t.Helper()
	data := r.metrics(t)
	type bucket struct{ le, n float64 }
	var buckets []bucket
	for _, line := range strings.Split(data, "\n") {
		rest, ok := strings.CutPrefix(line, `sluice_store_duration_seconds_bucket{operation="take",le="`)
		if !ok {
			continue
		}
		le, count, _ := strings.Cut(rest, `"} `)
		l, _ := strconv.ParseFloat(le, 64) // +Inf parses as Inf
		n, _ := strconv.ParseFloat(count, 64)
		buckets = append(buckets, bucket{l, n})
	}
	if len(buckets) == 0 {
		return 0
	}
	all := buckets[len(buckets)-1].n
	for _, b := range buckets {
		if b.n >= q*all {
			return time.Duration(b.le * float64(time.Second))
		}
	}
	return -1
}
