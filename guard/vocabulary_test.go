package guard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// The package's names no other test reaches.
func TestVocabulary(t *testing.T) {
	if err := guard.CheckSlot("k", "", 1); !errors.Is(err, sluice.ErrEmptyLease) {
		t.Errorf("CheckSlot without a lease: %v", err)
	}
	if err := guard.CheckSlot("k", "l", 0); !errors.Is(err, sluice.ErrInvalidConcurrency) {
		t.Errorf("CheckSlot with max 0: %v", err)
	}
	if err := guard.CheckSlot("", "l", 1); !errors.Is(err, sluice.ErrEmptyKey) {
		t.Errorf("CheckSlot with an empty key: %v", err)
	}

	var ms sluice.Store = memstore.New(memstore.Options{})
	if ip, ok := ms.(guard.InProcess); !ok || !ip.InProcess() {
		t.Error("the memory store is not InProcess")
	}
	closed, err := redisstore.Open("redis://127.0.0.1:1", redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := any(closed).(guard.InProcess); ok {
		t.Error("the Redis store claims to be InProcess")
	}
	closed.Close()

	if _, err := guard.New(nil, guard.Options{}); err == nil {
		t.Error("New with a nil store")
	}
	if _, err := guard.New(ms, guard.Options{Local: ms}); err == nil {
		t.Error("New with the store as its own stand-in")
	}
	g, err := guard.New(ms, guard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if g.Store() != ms {
		t.Error("Store is not the store the Guard was made on")
	}
	ds := make([]sluice.Decision, 1)
	v := g.Decide(context.Background(), &guard.Check{Enforced: []sluice.Request{{Key: "", Limit: sluice.PerSecond(1), Cost: 1}}, Modes: []sluice.FailMode{sluice.FailOpen}}, ds, nil)
	if v.Outcome != guard.Invalid || v.Err == nil {
		t.Errorf("a check with an empty key: %+v; want Invalid", v)
	}
	if got := guard.Closest(nil); got != -1 {
		t.Errorf("Closest of no decisions: %d", got)
	}
}
