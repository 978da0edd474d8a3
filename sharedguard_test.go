package sluice_test

import (
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// Limiters on one store share its Guard (one breaker, one prober, one
// stand-in) when their Guard settings agree, and have their own when
// those differ, when they ask (OwnGuard) or set a hook of their own
// (OnStoreError). The registry keeps nothing alive: once no Limiter uses
// a Guard, its entry goes.
func TestLimitersShareTheStoresGuard(t *testing.T) {
	srv := redistest.Standalone(t)
	store, err := redisstore.Open(srv.URL(), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	local := memstore.New(memstore.Options{})
	logger := slog.New(slog.DiscardHandler)
	opts := sluice.LimiterOptions{Local: local, Logger: logger}
	limiter := func(l sluice.Limit, o sluice.LimiterOptions) *sluice.Limiter {
		t.Helper()
		lim, err := sluice.NewLimiter(store, l, o)
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	a := limiter(sluice.PerSecond(10), opts)
	b := limiter(sluice.PerMinute(100), opts)
	if sluice.GuardOf(a) != sluice.GuardOf(b) {
		t.Error("two Limiters on one store with the same settings have two Guards")
	}
	for name, o := range map[string]sluice.LimiterOptions{
		"OwnGuard":        {Local: local, Logger: logger, OwnGuard: true},
		"OnStoreError":    {Local: local, Logger: logger, OnStoreError: func(error) {}},
		"another timeout": {Local: local, Logger: logger, Timeout: 3 * time.Second},
		"another Local":   {Local: memstore.New(memstore.Options{}), Logger: logger},
		"no Local":        {Logger: logger},
	} {
		if sluice.GuardOf(limiter(sluice.PerSecond(10), o)) == sluice.GuardOf(a) {
			t.Errorf("%s: shares the Guard of other settings", name)
		}
	}
	before := sluice.SharedGuards()
	a, b = nil, nil
	// Collected, the Guard's entry goes: wait for the cleanup, which runs
	// after a collection on a goroutine of the runtime's, with a deadline
	// no busy machine reaches.
	for deadline := time.Now().Add(time.Minute); sluice.SharedGuards() >= before; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("%d shared Guards after their Limiters went; want fewer than %d", sluice.SharedGuards(), before)
		}
		runtime.GC()
	}
	runtime.KeepAlive(local)
}
