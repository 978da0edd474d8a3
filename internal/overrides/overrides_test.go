package overrides_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

func shared(t *testing.T, srv *redistest.Server) *overrides.Registry {
	t.Helper()
	store, err := redisstore.Open(srv.URL(), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); store.Close() })
	start := time.Now()
	r := overrides.NewShared(ctx, store.Client, store.Prefix(), nil)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("NewShared took %v with Redis up: it waited, and should not", took)
	}
	return r
}

// TestSharedAppliesOnEveryInstance: an override set on one of three
// instances is in force on all three when Set returns; removed, likewise.
func TestSharedAppliesOnEveryInstance(t *testing.T) {
	srv := redistest.Standalone(t)
	rs := []*overrides.Registry{shared(t, srv), shared(t, srv), shared(t, srv)}
	ctx := context.Background()
	for round := range 20 {
		limit := sluice.Limit{Rate: int64(100 + round), Period: time.Minute}
		key := fmt.Sprintf("vip%d", round%3)
		a, err := rs[round%3].Set(ctx, "api", key, []sluice.Limit{limit})
		if err != nil {
			t.Fatal(err)
		}
		if a.Instances != 3 || a.AppliedBy != 3 {
			t.Fatalf("round %d: %+v; want 3 of 3 instances", round, a)
		}
		for i, r := range rs {
			if ls, ok := r.Lookup("api\x00" + key); !ok || ls[0].String() != limit.String() {
				t.Fatalf("round %d: instance %d has %v, %v; want %v at once", round, i, ls, ok, limit)
			}
		}
	}
	if _, err := rs[1].Set(ctx, "api", "vip0", nil); err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if _, ok := r.Lookup("api\x00vip0"); ok {
			t.Fatalf("instance %d still has the removed override", i)
		}
	}
	// A newcomer loads what is there.
	late := shared(t, srv)
	if _, ok := late.Lookup("api\x00vip1"); !ok {
		t.Fatal("an instance started later does not see the overrides already set")
	}
}

func TestBadOverrideChangesNothing(t *testing.T) {
	r := overrides.New()
	ctx := context.Background()
	good := sluice.Limit{Rate: 5, Period: time.Second}
	for _, tc := range []struct {
		key    string
		limits []sluice.Limit
	}{
		{"", []sluice.Limit{good}},
		{"k", []sluice.Limit{{Rate: 0, Period: time.Second}}},
		{"k", []sluice.Limit{good, {Rate: 9, Period: time.Second}}}, // one state twice
	} {
		if _, err := r.Set(ctx, "p", tc.key, tc.limits); !errors.Is(err, overrides.ErrInvalid) {
			t.Errorf("Set(%q, %v) = %v; want ErrInvalid", tc.key, tc.limits, err)
		}
	}
	if len(r.List()) != 0 {
		t.Fatalf("bad input left %v", r.List())
	}
}

// With Redis unreachable, a registry starts at once, holds nothing, and a
// change is an error, not a silent local one.
func TestSharedWithRedisDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := time.Now()
	r := shared(t, &redistest.Server{Addr: addr})
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("started in %v with Redis down; want no wait for Redis", took)
	}
	if _, ok := r.Lookup("api\x00vip"); ok {
		t.Fatal("an override out of nowhere")
	}
	if _, err := r.Set(context.Background(), "api", "vip", []sluice.Limit{{Rate: 1, Period: time.Second}}); err == nil || errors.Is(err, overrides.ErrInvalid) {
		t.Fatalf("Set with Redis down: %v; want the store's error", err)
	}
	if len(r.List()) != 0 {
		t.Fatal("a change that failed was kept")
	}
}

// An override written to Redis by hand that does not parse is skipped by
// every instance's reload, and counted, not only logged.
func TestUnparsedOverrideCounted(t *testing.T) {
	srv := redistest.Standalone(t)
	store, err := redisstore.Open(srv.URL(), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); store.Close() })
	r := overrides.NewShared(ctx, store.Client, store.Prefix(), nil)
	client, err := store.Client()
	if err != nil {
		t.Fatal(err)
	}
	hset := client.B().Hset().Key(store.Prefix()+"{overrides}").FieldValue().FieldValue("api\x00broken", "not a limit").Build()
	if err := client.Do(ctx, hset).Error(); err != nil {
		t.Fatal(err)
	}
	// A change elsewhere reloads every instance before Set returns.
	if _, err := r.Set(context.Background(), "api", "vip", []sluice.Limit{{Rate: 5, Period: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup("api\x00vip"); !ok {
		t.Fatal("the good override was not applied")
	}
	if r.Errors().Unparsed == 0 {
		t.Fatal("the override that does not parse was not counted")
	}
}
