package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// A setting changed on a live Redis, with no reconnection, is found by the
// preflight that runs every preflightEvery: one WARN line, and /readyz
// says so; set back, one INFO line, and the warning goes.
func TestPreflightFindsASettingChangedWhileRunning(t *testing.T) {
	defer func(d time.Duration) { preflightEvery = d }(preflightEvery)
	preflightEvery = 20 * time.Millisecond
	redis := redistest.Own(t) // its config is changed
	r := start(t, "policies:\n  - {name: p, limit: 5/1m}\n", redis.URL())
	warned := func() bool { return strings.Contains(r.log.String(), `msg="redis preflight: eviction warn"`) }
	if warned() {
		t.Fatalf("a warning on a noeviction Redis:\n%s", r.log)
	}
	redis.Do("CONFIG", "SET", "maxmemory", "64mb")
	redis.Do("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
	waitFor(t, "the eviction warning", warned)
	_, public, _ := r.readiness(context.Background())
	if !strings.Contains(public, "warning: eviction: warn: maxmemory-policy allkeys-lru") {
		t.Errorf("/readyz without the warning: %q", public)
	}
	// One more "ok" than before the change back. (A preflight between the
	// two CONFIG SETs above can log one more: maxmemory changed, the
	// policy still noeviction.)
	oks := func() int { return strings.Count(r.log.String(), `msg="redis preflight: eviction ok"`) }
	before := oks()
	redis.Do("CONFIG", "SET", "maxmemory-policy", "noeviction")
	waitFor(t, "the all-clear", func() bool { return oks() > before })
	waitFor(t, "/readyz without the warning", func() bool {
		_, public, _ := r.readiness(context.Background())
		return !strings.Contains(public, "warning")
	})
	if n := strings.Count(r.log.String(), `msg="redis preflight: eviction warn"`); n != 1 {
		t.Errorf("%d eviction warnings for one change; want 1:\n%s", n, r.log)
	}
}
