package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

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

// The script runs again after Redis forgets it (restart, failover).
func TestNoScriptFallback(t *testing.T) {
	srv := redistest.Own(t) // it changes the server
	s := redisstore.New(client(t, srv.Addr), redisstore.Options{Prefix: uniquePrefix(t)})
	ctx := context.Background()
	for i := range 3 {
		if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: sluice.PerSecond(10), Cost: 1}); err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		srv.Do("SCRIPT", "FLUSH")
	}
}

// A key of the wrong type or content, left by someone else, is a clear
// error, never a panic or a silent allow.
func TestForeignKeysAreErrors(t *testing.T) {
	srv := redistest.Standalone(t)
	prefix := uniquePrefix(t)
	s := redisstore.New(client(t, srv.Addr), redisstore.Options{Prefix: prefix})
	ctx := context.Background()
	srv.Do("RPUSH", prefix+"{list}:gcra:1000000", "x")
	srv.Do("SET", prefix+"{junk}:gcra:1000000", "hello")
	srv.Do("SET", prefix+"{str}:sliding_log:1000000", "hello")
	for key, mention := range map[string]string{"list": "WRONGTYPE", "junk": "did not write", "str": "WRONGTYPE"} {
		l := sluice.PerSecond(1)
		if key == "str" {
			l.Algorithm = sluice.SlidingLog
		}
		d, err := s.Take(ctx, sluice.Request{Key: key, Limit: l, Cost: 1})
		if err == nil || !strings.Contains(err.Error(), mention) || d.Allowed {
			t.Errorf("key %q: %+v, %v; want an error mentioning %q", key, d, err, mention)
		}
	}
}

// Open returns even when Redis is down, calls fail at once, and the store
// connects when Redis comes up.
func TestOpenWhileRedisIsDown(t *testing.T) {
	srv := redistest.Own(t) // it changes the server
	srv.Kill()
	s, err := redisstore.Open(srv.URL(), redisstore.Options{Prefix: uniquePrefix(t), ReconnectInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open with Redis down: %v", err)
	}
	defer s.Close()
	start := time.Now()
	_, err = s.Take(context.Background(), sluice.Request{Key: "k", Limit: sluice.PerSecond(1), Cost: 1})
	if !errors.Is(err, redisstore.ErrNotConnected) || time.Since(start) > 10*time.Second {
		t.Fatalf("Take while down: %v after %v; want ErrNotConnected, not a wait for Redis", err, time.Since(start))
	}
	srv.Restart()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err = s.Take(context.Background(), sluice.Request{Key: "k", Limit: sluice.PerSecond(1), Cost: 1})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing 5s after Redis came up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Four stores with their own clients, as four app instances, hammer one hot
// key and 1,000 cold keys from 64 goroutines each, all at one instant: each
// key admits exactly min(requests, capacity), never one more.
func TestExactUnderConcurrency(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Standalone(t)
		exactUnderConcurrency(t, func() []string { return []string{srv.Addr} })
	})
	t.Run("cluster", func(t *testing.T) {
		nodes := redistest.Cluster(t)
		exactUnderConcurrency(t, func() []string { return addrsOf(nodes) })
	})
}

func exactUnderConcurrency(t *testing.T, addrs func() []string) {
	const (
		instances = 4
		workers   = 64
		perWorker = 24
		cold      = 1000
		hotCap    = 500
		coldCap   = 2
	)
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			prefix := uniquePrefix(t)
			now := time.Now().Truncate(time.Hour).Add(time.Minute)
			hot := sluice.Limit{Algorithm: alg, Rate: hotCap, Period: time.Hour}
			coldL := sluice.Limit{Algorithm: alg, Rate: coldCap, Period: time.Hour}
			var (
				mu       sync.Mutex
				sent     = map[string]int{}
				admitted = map[string]int{}
				failed   atomic.Value
				wg       sync.WaitGroup
			)
			for i := range instances {
				store := redisstore.New(client(t, addrs()...), redisstore.Options{Prefix: prefix})
				for w := range workers {
					wg.Go(func() {
						for n := range perWorker {
							key, l := "hot", hot
							if n%2 == 1 {
								key, l = fmt.Sprint("cold", (i*workers*perWorker+w*perWorker+n)/2%cold), coldL
							}
							d, err := store.Take(context.Background(), sluice.Request{Key: key, Limit: l, Cost: 1, Now: now})
							if err != nil {
								failed.Store(err)
								return
							}
							mu.Lock()
							sent[key]++
							if d.Allowed {
								admitted[key]++
							}
							mu.Unlock()
						}
					})
				}
			}
			wg.Wait()
			if err, _ := failed.Load().(error); err != nil {
				t.Fatal(err)
			}
			for key, n := range sent {
				want := min(n, coldCap)
				if key == "hot" {
					want = min(n, hotCap)
				}
				if admitted[key] != want {
					t.Errorf("%s: %d requests, %d admitted; want exactly %d", key, n, admitted[key], want)
				}
			}
			t.Logf("%d keys, hot key admitted %d of %d", len(sent), admitted["hot"], sent["hot"])
		})
	}
}

// A Limiter on Redis that is killed mid-load: every call returns within
// the timeout and a margin; fail-open allows, fail-closed denies with
// ErrStoreUnavailable; the store works again within a second of Redis
// coming back; no goroutine leaks.
func TestLimiterSurvivesRedisFailing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := redistest.Own(t) // it changes the server
	s, err := redisstore.Open(srv.URL(), redisstore.Options{Prefix: uniquePrefix(t), ReconnectInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const timeout = 200 * time.Millisecond
	open, _ := sluice.NewLimiter(s, sluice.PerSecond(1e6), sluice.LimiterOptions{Timeout: timeout, FailMode: sluice.FailOpen})
	closed, _ := sluice.NewLimiter(s, sluice.PerSecond(1e6), sluice.LimiterOptions{Timeout: timeout, FailMode: sluice.FailClosed})

	var slowest atomic.Int64
	check := func(l *sluice.Limiter, down bool) error {
		start := time.Now()
		d, err := l.Allow(context.Background(), "k")
		if el := time.Since(start); int64(el) > slowest.Load() {
			slowest.Store(int64(el))
		}
		switch {
		case !down:
			return nil
		case l == open && (err != nil || !d.Allowed):
			return fmt.Errorf("fail-open while down: %+v, %v", d, err)
		case l == closed && err != nil && (d.Allowed || !errors.Is(err, sluice.ErrStoreUnavailable)):
			return fmt.Errorf("fail-closed while down: %+v, %v", d, err)
		}
		return nil
	}
	var down atomic.Bool
	stop := make(chan struct{})
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for i := range 8 {
		l := open
		if i%2 == 1 {
			l = closed
		}
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := check(l, down.Load()); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	down.Store(true)
	srv.Kill()
	time.Sleep(time.Second)
	// Down for a second: the fail-closed limiter must have denied with the
	// sentinel error at least once.
	if _, err := closed.Allow(context.Background(), "k"); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("fail-closed Allow while down: %v; want ErrStoreUnavailable", err)
	}
	srv.Restart()
	back := time.Now()
	down.Store(false)
	for {
		if _, err := s.Take(context.Background(), sluice.Request{Key: "k", Limit: sluice.PerSecond(10), Cost: 1}); err == nil {
			break
		}
		if time.Since(back) > 30*time.Second {
			t.Fatal("the store did not work again within 30s of Redis coming back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("working again %v after Redis came back", time.Since(back))
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if sl := time.Duration(slowest.Load()); sl > timeout+300*time.Millisecond {
		t.Errorf("slowest call took %v; want within the %v timeout and a margin", sl, timeout)
	}
}

// A call retried with the same ID (after a reply lost to the network) is
// applied once.
func TestIdempotentID(t *testing.T) {
	srv := redistest.Standalone(t)
	s := redisstore.New(client(t, srv.Addr), redisstore.Options{Prefix: uniquePrefix(t)})
	ctx := context.Background()
	l := sluice.Limit{Rate: 10, Period: time.Hour}
	for range 3 {
		d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: 4, Force: true, ID: "sync-1"})
		if err != nil || d.Remaining != 6 {
			t.Fatalf("retry of sync-1: %+v, %v; want 6 remaining (applied once)", d, err)
		}
	}
	if d, _ := s.Take(ctx, sluice.Request{Key: "k", Limit: l, Cost: 4, ID: "sync-2"}); d.Remaining != 2 {
		t.Fatalf("sync-2: %+v; want 2 remaining", d)
	}
}

// Open finds the master through Sentinel.
func TestSentinel(t *testing.T) {
	_, sentinel := redistest.Sentinel(t)
	s, err := redisstore.Open("redis-sentinel://"+sentinel+"/mymaster", redisstore.Options{Prefix: uniquePrefix(t), ReconnectInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := sluice.Limit{Rate: 2, Period: time.Hour}
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := s.Take(context.Background(), sluice.Request{Key: "k", Limit: l, Cost: 2})
		if err == nil {
			if !d.Allowed || d.Remaining != 0 {
				t.Fatalf("through Sentinel: %+v", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no master through Sentinel after 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d, err := s.Take(context.Background(), sluice.Request{Key: "k", Limit: l, Cost: 1}); err != nil || d.Allowed {
		t.Fatalf("second take through Sentinel: %+v, %v", d, err)
	}
}

// A sliding log written without its header (one entry per instant, as
// sluice kept logs before the header) decides as the memory store does on
// the same history, and is rewritten with the header on its next write;
// an entry sluice did not write, found where a check reads, is an error.
func TestSlidingLogWithoutHeader(t *testing.T) {
	srv := redistest.Standalone(t)
	prefix := uniquePrefix(t)
	s := redisstore.New(client(t, srv.Addr), redisstore.Options{Prefix: prefix})
	mem := memstore.New(memstore.Options{})
	ctx := context.Background()
	l := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: time.Second}
	t0 := time.Now().Truncate(time.Second)
	key := prefix + "{old}:sliding_log:1000000"
	for _, ms := range []int{-1500, -500, -300, -300, -100} {
		at := t0.Add(time.Duration(ms) * time.Millisecond)
		mem.Take(ctx, sluice.Request{Key: "old", Limit: l, Cost: 1, Now: at})
	}
	srv.Do("RPUSH", key, fmt.Sprint(t0.Add(-1500*time.Millisecond).UnixMicro(), ":1"),
		fmt.Sprint(t0.Add(-500*time.Millisecond).UnixMicro(), ":1"), fmt.Sprint(t0.Add(-300*time.Millisecond).UnixMicro(), ":2"),
		fmt.Sprint(t0.Add(-100*time.Millisecond).UnixMicro(), ":1"))
	for i, ms := range []int{0, 0, 150, 250, 600, 900} {
		req := sluice.Request{Key: "old", Limit: l, Cost: 1, Now: t0.Add(time.Duration(ms) * time.Millisecond)}
		want, _ := mem.Take(ctx, req)
		got, err := s.Take(ctx, req)
		if err != nil || got != want {
			t.Fatalf("check %d: %+v, %v; the memory store says %+v", i, got, err, want)
		}
		if i == 0 {
			want := fmt.Sprint("s:5:4:", t0.UnixMicro(), ":1") // sum, entries, the newest's time and cost
			if head := srv.Do("LINDEX", key, "0"); head != want {
				t.Fatalf("after the first write the log's head is %q; want the header %s", head, want)
			}
		}
	}

	bad := prefix + "{bad}:sliding_log:1000000"
	srv.Do("RPUSH", bad, fmt.Sprint("s:2:2:", t0.UnixMicro(), ":1"), "junk", fmt.Sprint(t0.UnixMicro(), ":1"))
	d, err := s.Take(ctx, sluice.Request{Key: "bad", Limit: l, Cost: 1, Now: t0.Add(2 * time.Second)})
	if err == nil || !strings.Contains(err.Error(), "did not write") || d.Allowed {
		t.Fatalf("a log with a foreign entry: %+v, %v", d, err)
	}
}

// A Sentinel that requires a password of its own, beside the master's:
// the URL's user and password are Redis's, sentinel_password (and
// sentinel_username) the sentinels'.
func TestSentinelWithPasswords(t *testing.T) {
	_, sentinel := redistest.SentinelAuth(t, "redis-s3cret", "sentinel-s3cret")
	for url, works := range map[string]bool{
		"redis-sentinel://:redis-s3cret@" + sentinel + "/mymaster?sentinel_password=sentinel-s3cret": true,
		"redis-sentinel://:redis-s3cret@" + sentinel + "/mymaster":                                   false, // the sentinel refuses
	} {
		s, err := redisstore.Open(url, redisstore.Options{Prefix: uniquePrefix(t), ReconnectInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		l := sluice.Limit{Rate: 2, Period: time.Hour}
		var d sluice.Decision
		for deadline := time.Now().Add(30 * time.Second); ; {
			if d, err = s.Take(context.Background(), sluice.Request{Key: "k", Limit: l, Cost: 1}); err == nil || !works || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond) // polling for the master to be found
		}
		switch {
		case works && (err != nil || !d.Allowed):
			t.Errorf("with the sentinel's password: %+v, %v", d, err)
		case !works && err == nil:
			t.Errorf("without the sentinel's password: decided %+v; want an error", d)
		case !works && strings.Contains(err.Error(), "s3cret"):
			t.Errorf("the error shows a password: %v", err)
		}
		s.Close()
	}
}

// The master changes without a +switch-master event reaching the client
// (its sentinels reconfigured, a missed message): the store asks the
// sentinels again every few seconds and follows the new master, instead of
// failing every check against the old one, now a read-only replica.
func TestSentinelMasterChangesWithoutAnEvent(t *testing.T) {
	master, replica, sentinels := redistest.Sentinels(t, 5000)
	s, err := redisstore.Open("redis-sentinel://"+strings.Join(sentinels, ",")+"/mymaster", redisstore.Options{Prefix: uniquePrefix(t), ReconnectInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := sluice.Limit{Rate: 100, Period: time.Hour}
	take := func() error {
		_, err := s.Take(context.Background(), sluice.Request{Key: "k", Limit: l, Cost: 1})
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); take() != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no master through Sentinel after 30s: %v", take())
		}
	}
	_, rport, _ := net.SplitHostPort(replica.Addr)
	replica.Do("REPLICAOF", "NO", "ONE")
	master.Do("REPLICAOF", "127.0.0.1", rport)
	for _, a := range sentinels {
		redistest.Cli(t, a, "SENTINEL", "REMOVE", "mymaster")
		redistest.Cli(t, a, "SENTINEL", "MONITOR", "mymaster", "127.0.0.1", rport, "2")
	}
	var failed int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := take()
		if err == nil {
			break
		}
		failed++
		if time.Now().After(deadline) {
			t.Fatalf("checks still fail 30 s after the master changed (%d failed): %v", failed, err)
		}
	}
	t.Logf("%d checks failed before the store followed the new master", failed)
	if !strings.Contains(replica.Do("INFO", "replication"), "role:master") {
		t.Fatal("the new master is not one")
	}
}

// A switchover (SENTINEL FAILOVER, as for maintenance) leaves the old
// master up and taking writes until the sentinels demote it, or for good
// if they cannot reach it: a decision there is lost at its next resync.
// Once the client follows the new master, so do lone calls, which go on
// the store's own connection: here the sentinels stop watching right
// after the switch, so the old master is never demoted, and every lone
// check must still reach the new one.
func TestSentinelSwitchoverMovesLoneCalls(t *testing.T) {
	master, replica, sentinels := redistest.Sentinels(t, 1000)
	var logged logbuf.Buffer
	s, err := redisstore.Open("redis-sentinel://"+strings.Join(sentinels, ",")+"/mymaster", redisstore.Options{Prefix: uniquePrefix(t), ReconnectInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	takeUntil(t, s, "the master found through the sentinels", decided)
	for range 20 { // lone calls, on the store's own connection once the clock is measured
		takeUntil(t, s, "a decision", decided)
	}
	redistest.Cli(t, sentinels[0], "SENTINEL", "FAILOVER", "mymaster")
	awaitMaster(t, s, replica)
	for _, a := range sentinels { // nothing will demote the old master now
		redistest.Cli(t, a, "SENTINEL", "REMOVE", "mymaster")
	}
	onOld := decidedOn(t, s, replica, master)
	if !strings.Contains(master.Do("INFO", "replication"), "role:master") {
		t.Fatal("the old master was demoted: the test did not keep it taking writes")
	}
	if !strings.Contains(logged.String(), "the master moved") {
		t.Errorf("the move is not logged:\n%s", logged.String())
	}
	t.Logf("%d lone checks decided on the old master before the store followed", onOld)
}

// awaitMaster returns once store's client has learnt from the sentinels
// that srv is the master.
func awaitMaster(t *testing.T, store *redisstore.Store, srv *redistest.Server) {
	t.Helper()
	client, err := store.Client()
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) { // polling: rueidis reports no event
		if _, ok := client.Nodes()[srv.Addr]; ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s on, the client has not learnt from the sentinels that %s is the master", srv.Addr)
		}
	}
}

// decidedOn takes one from a new key of store at a time until a key is
// on master, the server it should decide on (promoted, so replicating
// none: a key there is a decision there), and returns how many were
// decided on old first.
func decidedOn(t *testing.T, store *redisstore.Store, master, old *redistest.Server) (onOld int) {
	t.Helper()
	limit := sluice.Limit{Rate: 1_000_000, Period: time.Hour}
	for i, deadline := 0, time.Now().Add(30*time.Second); ; i++ {
		key := fmt.Sprint("after-", i)
		_, err := store.Take(context.Background(), sluice.Request{Key: key, Limit: limit, Cost: 1})
		if err == nil && master.Do("KEYS", "*"+key+"*") != "" {
			return onOld
		}
		if old.Do("KEYS", "*"+key+"*") != "" {
			onOld++
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the client followed the new master, checks are still decided elsewhere (%d of %d on the old one); the last error: %v", onOld, i+1, err)
		}
		time.Sleep(10 * time.Millisecond) // polling for the store to follow
	}
}

// A managed Redis's primary endpoint (ElastiCache's, say) is a DNS name
// moved to the replica it promotes, while the old primary, demoted to a
// replica, keeps its clients' connections open and answers every write
// with READONLY. The store drops a connection that answers READONLY, on
// the shared client as on its own, and dials the name again: the checks
// of callers at once, which ride the shared connection, are decided by
// the new primary within seconds, not failed until a restart.
func TestPrimaryEndpointMovesOnFailover(t *testing.T) {
	primary, replica := redistest.Own(t), redistest.Own(t)
	_, pport, _ := net.SplitHostPort(primary.Addr)
	replica.Do("REPLICAOF", "127.0.0.1", pport)
	endpoint := faultproxy.Start(t, primary.Addr) // the name clients dial
	var logged logbuf.Buffer
	s, err := redisstore.Open("redis://"+endpoint.Addr, redisstore.Options{Prefix: uniquePrefix(t), ReconnectInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := sluice.Limit{Rate: 1_000_000, Period: time.Hour}
	// round is 8 checks at once, and how many of them failed.
	round := func() (failed int64, last error) {
		var n atomic.Int64
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				if _, err := s.Take(context.Background(), sluice.Request{Key: "k" + strconv.Itoa(i), Limit: l, Cost: 1}); err != nil {
					n.Add(1)
					mu.Lock()
					last = err
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return n.Load(), last
	}
	if failed, err := round(); failed != 0 {
		t.Fatalf("before the failover, %d of 8 failed: %v", failed, err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(replica.Do("INFO", "replication"), "master_link_status:up"); time.Sleep(10 * time.Millisecond) { // polling for the replica's sync
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not sync in 30 s:\n%s", replica.Do("INFO", "replication"))
		}
	}
	_, rport, _ := net.SplitHostPort(replica.Addr)
	replica.Do("REPLICAOF", "NO", "ONE")
	primary.Do("REPLICAOF", "127.0.0.1", rport)
	endpoint.Retarget(replica.Addr)
	var failed int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n, err := round()
		if n == 0 {
			break
		}
		failed += n
		if time.Now().After(deadline) {
			t.Fatalf("checks still fail 30 s after the endpoint moved (%d failed): %v", failed, err)
		}
	}
	t.Logf("%d checks failed before the store followed the endpoint", failed)
	if !strings.Contains(logged.String(), "the server is a replica now") {
		t.Errorf("the reconnection is not logged:\n%s", logged.String())
	}
	for range 20 {
		if n, err := round(); n != 0 {
			t.Fatalf("after the store followed the endpoint, %d of 8 failed: %v", n, err)
		}
	}
}
