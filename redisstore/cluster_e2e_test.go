//go:build e2e

package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/storetest"
)

// Tests on Redis Cluster: three primaries (redistest.Cluster), slots and
// cross-slot batches, the conformance suite and exactness across them.
// Behind the e2e build tag: go test -tags e2e ./redisstore.

// slot agrees with Redis's own CLUSTER KEYSLOT, including keys with braces.
func TestSlotMatchesRedis(t *testing.T) {
	nodes := redistest.Cluster(t)
	for _, k := range []string{"123456789", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "sluice:{a\\(b}:gcra:1000000", "\xff\xfe"} {
		want, _ := strconv.Atoi(nodes[0].Do("CLUSTER", "KEYSLOT", k))
		if got := redisstore.Slot(k); int(got) != want {
			t.Errorf("slot(%q) = %d, Redis says %d", k, got, want)
		}
	}
}

// A batch across slots on Cluster is decided slot by slot: allowed, it
// takes from every slot; denied in one slot, it takes from none.
func TestCrossSlotBatch(t *testing.T) {
	redistest.HourAhead()
	nodes := redistest.Cluster(t)
	s := redisstore.New(client(t, addrsOf(nodes)...), redisstore.Options{Prefix: uniquePrefix(t)})
	ctx := context.Background()
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Hour}
	reqs := []sluice.Request{{Key: "alice", Limit: l, Cost: 1}, {Key: "bob", Limit: l, Cost: 1}}
	if redisstore.Slot("sluice:{alice}") == redisstore.Slot("sluice:{bob}") {
		t.Fatal("alice and bob share a slot: the test proves nothing")
	}
	ds := make([]sluice.Decision, 2)
	if err := s.TakeAll(ctx, reqs, ds); err != nil || !ds[0].Allowed || !ds[1].Allowed || ds[0].Remaining != 2 || ds[1].Remaining != 2 {
		t.Fatalf("first batch: %+v, %v; want both allowed, 2 left each", ds, err)
	}
	for range 2 { // bob runs out
		if _, err := s.Take(ctx, reqs[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.TakeAll(ctx, reqs, ds); err != nil || ds[1].Allowed || ds[1].RetryAfter <= 0 {
		t.Fatalf("batch with bob out: %+v, %v; want bob denied with a RetryAfter", ds, err)
	}
	if d, err := s.Take(ctx, sluice.Request{Key: "alice", Limit: l}); err != nil || d.Remaining != 2 {
		t.Fatalf("alice after the denied batch: %+v, %v; want 2 left (nothing taken)", d, err)
	}
	idem := slices.Clone(reqs)
	idem[0].ID = "push-1"
	if err := s.TakeAll(ctx, idem, ds); !errors.Is(err, redisstore.ErrCrossSlot) {
		t.Fatalf("an idempotent batch across slots: %v; want ErrCrossSlot", err)
	}
}

// Many callers at once on two keys of two slots, one batch each: the key
// both share admits exactly its limit, and every admission is charged to
// both keys.
func TestCrossSlotBatchExact(t *testing.T) {
	redistest.HourAhead()
	nodes := redistest.Cluster(t)
	s := redisstore.New(client(t, addrsOf(nodes)...), redisstore.Options{Prefix: uniquePrefix(t)})
	ctx := context.Background()
	shared := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Hour}
	own := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Hour}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for c := range 64 {
		wg.Go(func() {
			for range 5 {
				ds := make([]sluice.Decision, 2)
				reqs := []sluice.Request{{Key: "ip-1", Limit: shared, Cost: 1}, {Key: fmt.Sprint("user-", c%4), Limit: own, Cost: 1}}
				if err := s.TakeAll(ctx, reqs, ds); err != nil {
					t.Error(err)
					return
				}
				if ds[0].Allowed && ds[1].Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 100 {
		t.Fatalf("admitted %d on a limit of 100", admitted.Load())
	}
	var used int64
	for u := range 4 {
		d, err := s.Take(ctx, sluice.Request{Key: fmt.Sprint("user-", u), Limit: own})
		if err != nil {
			t.Fatal(err)
		}
		used += own.Rate - d.Remaining
	}
	if used != 100 {
		t.Fatalf("the users' keys were charged %d for 100 admissions; want 100 (the shared key, first in the batch, is taken first)", used)
	}
}

func TestConformanceCluster(t *testing.T) {
	nodes := redistest.Cluster(t)
	c := client(t, addrsOf(nodes)...)
	if c.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("client mode %v, want cluster", c.Mode())
	}
	storetest.Run(t, func(t *testing.T) sluice.Store {
		return redisstore.New(c, redisstore.Options{Prefix: uniquePrefix(t)})
	})
	storetest.RunSlots(t, func(t *testing.T) guard.Slots {
		return redisstore.New(c, redisstore.Options{Prefix: uniquePrefix(t)})
	})
	for _, n := range nodes {
		assertEveryKeyHasTTL(t, n)
	}
}

// On Cluster the library is loaded on every primary: a flush of all of
// them mid-run loses nothing, whichever node each key lives on.
func TestFunctionReloadedOnCluster(t *testing.T) {
	nodes := redistest.Cluster(t)
	store := redisstore.New(client(t, addrsOf(nodes)...), redisstore.Options{Prefix: uniquePrefix(t)})
	limit := sluice.Limit{Rate: 3, Period: time.Minute, Algorithm: sluice.FixedWindow}
	now := time.Now().Truncate(limit.Period).Add(time.Second) // one window throughout, whenever the test runs
	ctx := context.Background()
	for round := range 4 {
		if round > 0 {
			for _, n := range nodes {
				n.Do("FUNCTION", "FLUSH")
			}
		}
		for k := range 30 { // keys on every node
			d, err := store.Take(ctx, sluice.Request{Key: fmt.Sprint("k", k), Limit: limit, Cost: 1, Now: now})
			want := round < 3
			if err != nil || d.Allowed != want {
				t.Fatalf("round %d key %d: %+v, %v; want allowed=%v", round, k, d, err, want)
			}
		}
	}
	_, name := redisstore.Library()
	for _, n := range nodes {
		if !strings.Contains(n.Do("FUNCTION", "LIST"), name) {
			t.Errorf("%s: library %s not loaded", n.Addr, name)
		}
	}
}

// A key's slot moves to another master while callers decide on it, as
// redis-cli --cluster reshard moves it: IMPORTING and MIGRATING, the key
// moved by MIGRATE (calls then follow ASK), the slot given to its new
// master (MOVED). Every call is decided, none refused, and the key's state
// moves with it: what remains is what the calls took. A lone caller's
// calls follow the slot too: on Cluster they never go on a connection
// bound to one node.
func TestClusterSlotMovesUnderCalls(t *testing.T) {
	nodes := redistest.Cluster(t)
	s := redisstore.New(client(t, addrsOf(nodes)...), redisstore.Options{Prefix: uniquePrefix(t)})
	// A burst of 100,000, refilled at one an hour: what the calls take
	// is what remains, give or take the one an hour may refill. The
	// callers below take as fast as Redis answers until the slot has
	// moved, several thousand here; they stop short of the burst, so that
	// on a slow host they cannot use it up and see a denial that is the
	// limit's, not the move's.
	limit := sluice.Limit{Rate: 1, Period: time.Hour, Burst: 100_000}
	const callersStop = 90_000
	var taken atomic.Int64
	take := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: limit, Cost: 1})
		if err == nil && !d.Allowed {
			err = fmt.Errorf("denied: %+v", d)
		}
		if err == nil {
			taken.Add(1)
		}
		return err
	}
	mustTake := func() {
		t.Helper()
		if err := take(); err != nil {
			t.Fatal(err)
		}
	}
	mustTake()
	refreshClock(t, s, mustTake) // as a store that has run a while

	// The slot's master, the one it moves to, and the third.
	slotOf := nodes[0].Do("CLUSTER", "KEYSLOT", "{k}")
	slot, err := strconv.Atoi(slotOf)
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT: %q", slotOf)
	}
	ids := map[*redistest.Server]string{}
	var src, dst, other *redistest.Server
	for _, n := range nodes {
		ids[n] = n.Do("CLUSTER", "MYID")
	}
	for line := range strings.SplitSeq(nodes[0].Do("CLUSTER", "NODES"), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "master") {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, _ := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b, err := strconv.Atoi(hi)
			if err != nil {
				b = a
			}
			if a <= slot && slot <= b {
				for _, n := range nodes {
					if ids[n] == f[0] {
						src = n
					}
				}
			}
		}
	}
	if src == nil {
		t.Fatalf("no master holds slot %d:\n%s", slot, nodes[0].Do("CLUSTER", "NODES"))
	}
	for _, n := range nodes {
		switch {
		case n == src:
		case dst == nil:
			dst = n
		default:
			other = n
		}
	}

	// Callers all along, until the slot has moved.
	var moved atomic.Bool
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 8 {
		wg.Go(func() {
			for !moved.Load() && taken.Load() < callersStop {
				if err := take(); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	step := func(n *redistest.Server, args ...string) {
		t.Helper()
		for range 50 {
			mustTake() // a lone caller's among the others'
		}
		if out := n.Do(args...); out != "OK" {
			t.Fatalf("%v on %s: %s", args, n.Addr, out)
		}
	}
	_, dstPort, _ := net.SplitHostPort(dst.Addr)
	sl := strconv.Itoa(slot)
	step(dst, "CLUSTER", "SETSLOT", sl, "IMPORTING", ids[src])
	step(src, "CLUSTER", "SETSLOT", sl, "MIGRATING", ids[dst])
	keys := strings.Fields(src.Do("CLUSTER", "GETKEYSINSLOT", sl, "100"))
	if len(keys) == 0 {
		t.Fatalf("no keys in slot %d on its master %s", slot, src.Addr)
	}
	step(src, append([]string{"MIGRATE", "127.0.0.1", dstPort, "", "0", "5000", "KEYS"}, keys...)...)
	step(dst, "CLUSTER", "SETSLOT", sl, "NODE", ids[dst])
	step(src, "CLUSTER", "SETSLOT", sl, "NODE", ids[dst])
	step(other, "CLUSTER", "SETSLOT", sl, "NODE", ids[dst])
	for range 50 {
		mustTake()
	}
	moved.Store(true)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("a call failed while slot %d moved: %v", slot, err)
	}
	if n := dst.Do("EXISTS", keys[0]); n != "1" {
		t.Fatalf("the key is not on its new master %s (EXISTS %s = %s)", dst.Addr, keys[0], n)
	}
	d, err := s.Take(context.Background(), sluice.Request{Key: "k", Limit: limit}) // a peek
	want := limit.Burst - taken.Load()
	if err != nil || d.Remaining < want || d.Remaining > want+1 {
		t.Fatalf("after %d calls: remaining %d, %v; want %d (or one more, refilled)", taken.Load(), d.Remaining, err, want)
	}
}

// TestExactUnderConcurrency on a Cluster of three primaries.
func TestExactUnderConcurrencyOnCluster(t *testing.T) {
	nodes := redistest.Cluster(t)
	exactUnderConcurrency(t, func() []string { return addrsOf(nodes) })
}

// TestTLSClientCertificate on a Cluster of three primaries.
func TestTLSClientCertificateOnCluster(t *testing.T) {
	certs := redistest.NewCerts(t)
	cluster := addrsOf(redistest.ClusterTLS(t, certs))
	tlsClientCertificate(t, []tlsCase{
		{"cluster, URL", tlsURL(certs, true, cluster...), redisstore.TLS{}},
		{"cluster, options, redis:// turned to TLS", "redis://" + strings.Join(cluster, ","), redisstore.TLS{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey, ServerName: "localhost"}},
	})
}

func addrsOf(nodes []*redistest.Server) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Addr)
	}
	return out
}
