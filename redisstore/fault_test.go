package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

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
// On standalone here; on Cluster in TestExactUnderConcurrencyOnCluster.
func TestExactUnderConcurrency(t *testing.T) {
	if testing.Short() {
		t.Skip("24,576 checks from four clients")
	}
	srv := redistest.Standalone(t)
	exactUnderConcurrency(t, func() []string { return []string{srv.Addr} })
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

// A Limiter on Redis that is killed mid-load: every caller goes on being
// answered while Redis is down; fail-open allows, fail-closed denies with
// ErrStoreUnavailable; the store works again once Redis is back; no
// goroutine leaks. How soon a call returns (its timeout) is for the
// benchmarks and the guard's tests: a busy machine stretches any bound.
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

	check := func(l *sluice.Limiter, down bool) error {
		d, err := l.Allow(context.Background(), "k")
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
	const callers = 8
	var answered, answeredDown [callers]atomic.Int64 // each caller's answers, and those while down
	stop := make(chan struct{})
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for i := range callers {
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
				wasDown := down.Load()
				if err := check(l, wasDown); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
				answered[i].Add(1)
				if wasDown {
					answeredDown[i].Add(1)
				}
			}
		})
	}
	every := func(counts *[callers]atomic.Int64, n int64) func() bool {
		return func() bool {
			for i := range counts {
				if counts[i].Load() < n {
					return false
				}
			}
			return true
		}
	}
	eventually(t, "every caller answered on a healthy Redis", every(&answered, 5))
	down.Store(true)
	srv.Kill()
	// Every caller answered several times with Redis down: none waits
	// for it.
	eventually(t, "every caller answered 5 times with Redis down", every(&answeredDown, 5))
	if _, err := closed.Allow(context.Background(), "k"); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("fail-closed Allow while down: %v; want ErrStoreUnavailable", err)
	}
	srv.Restart()
	down.Store(false)
	eventually(t, "the store working again after Redis came back", func() bool {
		_, err := s.Take(context.Background(), sluice.Request{Key: "k", Limit: sluice.PerSecond(10), Cost: 1})
		return err == nil
	})
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// eventually polls cond until it holds, failing t after 30 seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30s: %s", what)
		}
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
