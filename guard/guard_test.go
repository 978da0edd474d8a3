package guard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// chaos is a Guard on a real redis-server reached through a fault proxy.
type chaos struct {
	redis *redistest.Server
	proxy *faultproxy.Proxy
	store *redisstore.Store
	guard *guard.Guard
	log   *logbuf.Buffer
}

func newChaos(t *testing.T, opts guard.Options) *chaos {
	t.Helper()
	c := &chaos{redis: redistest.Standalone(t), log: &logbuf.Buffer{}}
	c.proxy = faultproxy.Start(t, c.redis.Addr)
	s, err := redisstore.Open(c.redis.URLVia(c.proxy.Addr), redisstore.Options{ReconnectInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c.store = s
	opts.Logger = slog.New(slog.NewTextHandler(c.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if opts.Local == nil {
		opts.Local = memstore.New(memstore.Options{})
	}
	if c.guard, err = guard.New(s, opts); err != nil {
		t.Fatal(err)
	}
	return c
}

// answered bounds a check in these tests: it is answered, not hung. How
// soon (within the timeout, with the breaker open at once) is for the
// benchmarks: a busy machine stretches any bound a test could assert.
const answered = 10 * time.Second

// take decides one request of key under limit and mode, within bound.
func (c *chaos) take(t *testing.T, key string, limit sluice.Limit, mode sluice.FailMode, bound time.Duration) (guard.Verdict, sluice.Decision) {
	t.Helper()
	var d sluice.Decision
	start := time.Now()
	v := c.guard.TakeLabeled(context.Background(), "p", sluice.Request{Key: key, Limit: limit, Cost: 1}, mode, &d)
	if took := time.Since(start); took > bound {
		t.Fatalf("a check took %v; want at most %v", took, bound)
	}
	return v, d
}

// A hung store under fail_mode local: the stand-in starts each key where
// the store left it, so the outage admits what the key had left and no
// more; the breaker opens so checks stop waiting for the timeout; the log
// says so once; the store decides again within a second of coming back.
func TestGuardLocalDuringHang(t *testing.T) {
	redistest.HourAhead()
	c := newChaos(t, guard.Options{Timeout: 200 * time.Millisecond})
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Hour}
	for range 2 {
		if v, d := c.take(t, "k", limit, sluice.FailLocal, answered); v.Outcome != guard.Allowed {
			t.Fatalf("healthy: %v %+v", v.Outcome, d)
		}
	}
	c.proxy.Stall(true)
	admitted := 0
	for i := range 20 {
		v, _ := c.take(t, "k", limit, sluice.FailLocal, answered)
		if v.Outcome != guard.LocalAllowed && v.Outcome != guard.LocalDenied {
			t.Fatalf("check %d during the hang: %v, want decided locally", i, v.Outcome)
		}
		if v.Allowed() {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("the hang admitted %d; want 3, what the store had left", admitted)
	}
	// A key the store never saw starts at its limit.
	fresh := 0
	for range 8 {
		if v, _ := c.take(t, "new", limit, sluice.FailLocal, answered); v.Allowed() {
			fresh++
		}
	}
	if fresh != 5 {
		t.Fatalf("a key never seen admitted %d during the hang; want 5", fresh)
	}
	if h := c.guard.Health(); !h.Failing || h.Breaker == "closed" {
		t.Fatalf("health during the hang: %+v; want failing, breaker not closed", h)
	}
	// With the breaker open a check costs no timeout: it is decided without
	// a store call (the probe aside, one at a time).
	spared := 0
	for range 50 {
		if v, _ := c.take(t, "other", limit, sluice.FailLocal, answered); errors.Is(v.Err, guard.ErrBreakerOpen) {
			spared++
		}
	}
	if spared < 40 {
		t.Fatalf("%d of 50 checks with the breaker open were spared the store; want nearly all", spared)
	}
	c.proxy.Stall(false)
	back := time.Now()
	for i := 0; ; i++ {
		// A fresh key each time: one the stand-in admitted is told to the
		// store as it recovers, and may then be denied.
		v, _ := c.take(t, fmt.Sprint("back-", i), limit, sluice.FailLocal, answered)
		if v.Outcome == guard.Allowed {
			break
		}
		if time.Since(back) > 10*time.Second {
			t.Fatalf("not decided by the store again 10 s after it came back (%v)", v.Outcome)
		}
		time.Sleep(10 * time.Millisecond)
	}
	log := c.log.String()
	for _, want := range []string{"rate limit store failing", "breaker open", "half-open", "rate limit store recovered"} {
		if strings.Count(log, want) < 1 {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
	if n := strings.Count(log, "rate limit store failing"); n != 1 {
		t.Errorf("the store's failure logged %d times; want once", n)
	}
}

// Redis down at start, then up: open and closed decide as they say, the
// store's error is reported, and nothing is charged to the stand-in under
// open or closed.
func TestGuardOpenAndClosed(t *testing.T) {
	c := newChaos(t, guard.Options{Timeout: 200 * time.Millisecond})
	c.proxy.Down()
	limit := sluice.PerMinute(1)
	for i := range 3 {
		v, d := c.take(t, "o", limit, sluice.FailOpen, answered)
		if v.Outcome != guard.FailedOpen || !d.Allowed || !errors.Is(v.Err, sluice.ErrStoreUnavailable) {
			t.Fatalf("open, check %d: %v %+v %v", i, v.Outcome, d, v.Err)
		}
		v, d = c.take(t, "c", limit, sluice.FailClosed, answered)
		if v.Outcome != guard.FailedClosed || d.Allowed || d.RetryAfter != time.Second {
			t.Fatalf("closed, check %d: %v %+v", i, v.Outcome, d)
		}
	}
	if h := c.guard.Health(); h.FailedChecks != 6 || h.LastError == "" {
		t.Fatalf("health: %+v; want 6 failed checks and the error", h)
	}
}

// A batch whose requests have different fail modes: closed wins; local
// decides the rest all-or-nothing.
func TestGuardMixedModes(t *testing.T) {
	c := newChaos(t, guard.Options{Timeout: 200 * time.Millisecond})
	c.proxy.Down()
	l1, l2 := sluice.PerMinute(1), sluice.Limit{Rate: 10, Period: time.Hour}
	check := &guard.Check{Label: "mix", Enforced: []sluice.Request{{Key: "a", Limit: l1, Cost: 1}, {Key: "a", Limit: l2, Cost: 1}},
		Modes: []sluice.FailMode{sluice.FailLocal, sluice.FailOpen}}
	ds := make([]sluice.Decision, 2)
	want := []guard.Outcome{guard.LocalAllowed, guard.LocalDenied}
	for i, w := range want {
		if v := c.guard.Decide(context.Background(), check, ds, nil); v.Outcome != w {
			t.Fatalf("check %d: %v, want %v", i, v.Outcome, w)
		}
	}
	check.Modes[1] = sluice.FailClosed
	if v := c.guard.Decide(context.Background(), check, ds, nil); v.Outcome != guard.FailedClosed || v.Allowed() {
		t.Fatalf("with a closed request: %v", v.Outcome)
	}
}

// A caller that gives up says nothing about the store: the breaker stays
// closed however many do.
func TestGuardCallerCancelDoesNotTrip(t *testing.T) {
	c := newChaos(t, guard.Options{Timeout: time.Second})
	c.proxy.SetLatency(100 * time.Millisecond)
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		var d sluice.Decision
		c.guard.TakeLabeled(ctx, "p", sluice.Request{Key: "k", Limit: sluice.PerSecond(100), Cost: 1}, sluice.FailLocal, &d)
		cancel()
	}
	if h := c.guard.Health(); h.Breaker != "closed" || h.Failing {
		t.Fatalf("after callers gave up: %+v; want closed and healthy", h)
	}
}

// Many callers while the store hangs: one probe at a time reaches it once
// the breaker is half-open, and the rest are decided at once.
func TestGuardOneProbeAtATime(t *testing.T) {
	c := newChaos(t, guard.Options{Timeout: 300 * time.Millisecond, BreakerBackoff: 50 * time.Millisecond, BreakerMaxBackoff: 50 * time.Millisecond})
	var calls atomic.Int64
	g, err := guard.New(c.store, guard.Options{Timeout: 300 * time.Millisecond, BreakerBackoff: 50 * time.Millisecond,
		BreakerMaxBackoff: 50 * time.Millisecond, Local: memstore.New(memstore.Options{}),
		OnStoreCall: func(time.Duration, error) { calls.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	c.proxy.Stall(true)
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Second)
	for range 16 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				var d sluice.Decision
				g.TakeLabeled(context.Background(), "p", sluice.Request{Key: "k", Limit: sluice.PerSecond(100), Cost: 1}, sluice.FailLocal, &d)
			}
		})
	}
	wg.Wait()
	// 16 at once, up to 4 more from callers back before the fifth failure
	// opened the breaker, then at most one probe per backoff plus timeout.
	if n := calls.Load(); n > 16+4+int64(time.Second/(300*time.Millisecond+50*time.Millisecond))+1 {
		t.Fatalf("%d store calls in a second of hang; want one probe at a time", n)
	}
}

// The end of an outage is exact: with no checks after the store comes
// back, the Guard's own probe closes the breaker, and what the stand-in
// admitted during the outage is told to the store, so the key's count in
// the store is what was admitted in all.
func TestGuardOutageEndsExactly(t *testing.T) {
	redistest.HourAhead()
	c := newChaos(t, guard.Options{Timeout: 200 * time.Millisecond})
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}
	for range 2 {
		if v, _ := c.take(t, "k", limit, sluice.FailLocal, answered); v.Outcome != guard.Allowed {
			t.Fatalf("healthy: %v", v.Outcome)
		}
	}
	c.proxy.Stall(true)
	local := map[string]int64{}
	for range 30 {
		for _, key := range []string{"k", "fresh"} {
			v, _ := c.take(t, key, limit, sluice.FailLocal, answered)
			if v.Outcome == guard.LocalAllowed {
				local[key]++
			}
		}
	}
	if local["k"] != 8 || local["fresh"] != 10 {
		t.Fatalf("the stand-in admitted %v; want k 8 (what the store had left), fresh 10", local)
	}
	c.proxy.Stall(false)
	// No check from here on: the Guard finds the store back by itself.
	if h := c.recovered(t, func(h guard.Health) bool { return h.Replayed >= 18 }); h.Replayed != 18 {
		t.Fatalf("told the store %d; want 18", h.Replayed)
	}
	for key, want := range map[string]int64{"k": 0, "fresh": 0} {
		d, err := c.store.Take(context.Background(), sluice.Request{Key: key, Limit: limit})
		if err != nil || d.Remaining != want {
			t.Fatalf("%s in the store after the outage: %+v, %v; want %d remaining (healthy and local admissions told)", key, d, err, want)
		}
	}
	if log := c.log.String(); !strings.Contains(log, "told what was admitted locally") {
		t.Fatalf("no log line for the replay:\n%s", log)
	}
}

// The stand-in's record of what the store last said grows with the keys
// seen: 20,000 keys used up while the store was healthy are each still
// used up when it fails, where a record of a fixed small size would have
// forgotten most of them; and a Guard that has seen no key holds little.
func TestStandinRecordGrowsWithKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 keys through a store that fails")
	}
	redistest.HourAhead()
	// The store fails by refusing at once, not by stalling: a timeout far
	// past a healthy call's time keeps a busy machine from failing a
	// healthy one.
	c := newChaos(t, guard.Options{Timeout: 5 * time.Second})
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Hour}
	const keys = 20_000
	for i := range keys {
		if v, _ := c.take(t, fmt.Sprint("k", i), limit, sluice.FailLocal, answered); v.Outcome != guard.Allowed {
			t.Fatalf("healthy: %v", v.Outcome)
		}
	}
	// The same keys seen again and again do not grow it further: two keys
	// that share a slot overwrite each other every time, however large.
	slots := guard.SeenSlots(c.guard)
	for range 2 {
		for i := range keys {
			c.take(t, fmt.Sprint("k", i), limit, sluice.FailLocal, answered)
		}
	}
	if got := guard.SeenSlots(c.guard); got != slots || got > 4*keys {
		t.Fatalf("the record holds %d slots for %d keys after they were seen twice more (%d before); want %d, at most %d", got, keys, slots, slots, 4*keys)
	}

	c.proxy.Refuse(true)
	c.proxy.Reset()
	remembered := 0
	for i := range keys {
		if v, _ := c.take(t, fmt.Sprint("k", i), limit, sluice.FailLocal, answered); v.Outcome == guard.LocalDenied {
			remembered++
		}
	}
	t.Logf("the stand-in knew %d of %d used-up keys", remembered, keys)
	if remembered < keys*97/100 {
		t.Fatalf("the stand-in knew %d of %d used-up keys; want at least 97%%", remembered, keys)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var held []*guard.Guard
	for range 10 {
		g, err := guard.New(c.store, guard.Options{Local: memstore.New(memstore.Options{})})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, g)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if heap := int64(after.HeapAlloc) - int64(before.HeapAlloc); heap > 10<<20 {
		t.Errorf("10 Guards with Local hold %d bytes before any key is seen; want under 10 MiB", heap)
	}
	runtime.KeepAlive(held)
}

// ctxStore is a store that records the context of its last Take.
type ctxStore struct {
	sluice.Store
	mu  sync.Mutex
	ctx context.Context
}

func (s *ctxStore) Take(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	s.mu.Lock()
	s.ctx = ctx
	s.mu.Unlock()
	return s.Store.Take(ctx, req)
}

// A store call is bounded by the Guard's timeout, or by the caller's own
// deadline when that comes first, without a context of the Guard's.
func TestGuardTimeoutOrCallersDeadline(t *testing.T) {
	store := &ctxStore{Store: memstore.New(memstore.Options{})}
	g, err := guard.New(store, guard.Options{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	req := sluice.Request{Key: "k", Limit: sluice.Limit{Rate: 10, Period: time.Second}, Cost: 1}
	var d sluice.Decision
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: none
		own      bool          // the store sees the caller's context itself
	}{
		{"no deadline", 0, false},
		{"a later deadline", 2 * time.Hour, false},
		{"an earlier deadline", time.Minute, true},
	} {
		ctx := context.Background()
		if tc.deadline > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, tc.deadline)
			defer cancel()
		}
		if v := g.TakeLabeled(ctx, "p", req, sluice.FailOpen, &d); v.Outcome != guard.Allowed {
			t.Fatalf("%s: %+v", tc.name, v)
		}
		got := store.ctx
		if own := got == ctx; own != tc.own {
			t.Errorf("%s: the store got the caller's context: %v; want %v", tc.name, own, tc.own)
		}
		if end, ok := got.Deadline(); !ok || end.After(time.Now().Add(time.Hour)) {
			t.Errorf("%s: the store call ends at %v (%v); want within the hour", tc.name, end, ok)
		}
	}
}

// recovered waits for the breaker to close and the replay to have told the
// store at least cost, with no check meanwhile: the Guard finds the store
// back by itself. 30 s guards against a hang.
func (c *chaos) recovered(t *testing.T, ok func(guard.Health) bool) guard.Health {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for h := c.guard.Health(); ; h = c.guard.Health() {
		if h.Breaker == "closed" && ok(h) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the store came back, with no checks: %+v", h)
		}
		time.Sleep(10 * time.Millisecond) // polling for the event
	}
}

// Hits given back during an outage under fail_mode local (GiveBack, or a
// reservation settled for less) are given back to the stand-in, which
// admits them again, and to the store when it recovers, net of what the
// stand-in admitted: a key given back more than it took meanwhile is
// refunded in the store, not left charged.
func TestGuardGiveBackDuringOutage(t *testing.T) {
	redistest.HourAhead()
	c := newChaos(t, guard.Options{Timeout: 200 * time.Millisecond})
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: 24 * time.Hour}
	for _, key := range []string{"spent", "net-back"} {
		for range 8 {
			if v, _ := c.take(t, key, limit, sluice.FailLocal, answered); v.Outcome != guard.Allowed {
				t.Fatalf("healthy: %v", v.Outcome)
			}
		}
	}
	ctx := context.Background()
	taken := time.Now()
	var d sluice.Decision
	if v := c.guard.TakeLabeled(ctx, "p", sluice.Request{Key: "settled", Limit: limit, Cost: 8}, sluice.FailLocal, &d); v.Outcome != guard.Allowed {
		t.Fatalf("8 reserved while healthy: %v", v.Outcome)
	}
	c.proxy.Stall(true)
	for _, key := range []string{"spent", "net-back"} {
		v := c.guard.GiveBack(ctx, "p", sluice.Request{Key: key, Limit: limit, Cost: 5}, sluice.FailLocal, &d)
		if v.Outcome != guard.LocalAllowed || d.Remaining != 7 {
			t.Fatalf("%s given back 5 during the outage: %v %+v; want local_allowed with 7 remaining (2 the store left, and 5)", key, v.Outcome, d)
		}
	}
	admitted := map[string]int{}
	for key, tries := range map[string]int{"spent": 20, "net-back": 2} {
		for range tries {
			if v, _ := c.take(t, key, limit, sluice.FailLocal, answered); v.Outcome == guard.LocalAllowed {
				admitted[key]++
			}
		}
	}
	if admitted["spent"] != 7 || admitted["net-back"] != 2 {
		t.Fatalf("the stand-in admitted %v; want spent 7 (2 left and 5 given back), net-back 2", admitted)
	}
	// A reservation taken before the outage and settled for less during
	// it: the refund of that take is given back to the store too.
	if v := c.guard.Settle(ctx, "p", sluice.Request{Key: "settled", Limit: limit}, taken, 8, 3, sluice.FailLocal); v.Outcome != guard.LocalAllowed {
		t.Fatalf("settled 8 to 3 during the outage: %v; want local_allowed", v.Outcome)
	}
	// Given back under fail_mode open, nothing was counted locally and
	// nothing is given back.
	if v := c.guard.GiveBack(ctx, "p", sluice.Request{Key: "open", Limit: limit, Cost: 5}, sluice.FailOpen, &d); v.Outcome != guard.FailedOpen {
		t.Fatalf("given back under fail_mode open: %v; want failed_open", v.Outcome)
	}
	c.proxy.Stall(false)
	h := c.recovered(t, func(h guard.Health) bool { return h.Replayed >= 2 && h.ReplayedBack >= 8 })
	if h.Replayed != 2 || h.ReplayedBack != 8 {
		t.Fatalf("told the store %d taken and %d given back; want 2 (spent: 7 admitted less 5 given back) and 8 (net-back: 5 less 2; settled: 5)", h.Replayed, h.ReplayedBack)
	}
	for key, want := range map[string]int64{"spent": 0, "net-back": 5, "settled": 7} {
		d, err := c.store.Take(ctx, sluice.Request{Key: key, Limit: limit})
		if err != nil || d.Remaining != want {
			t.Fatalf("%s in the store after the outage: %+v, %v; want %d remaining", key, d, err, want)
		}
	}
}

// An outage longer than a window lets the stand-in admit more than the
// capacity in all; the store is told the capacity, in the window current
// at the recovery, and nothing stays owed: a forced take of more than the
// capacity would be refused as input, and kept owed at every recovery.
func TestGuardOutageLongerThanAWindow(t *testing.T) {
	c := newChaos(t, guard.Options{Timeout: 200 * time.Millisecond})
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: 100 * time.Millisecond}
	c.proxy.Stall(true)
	admitted := 0
	for deadline := time.Now().Add(answered); admitted <= 2*10; {
		if v, _ := c.take(t, "k", limit, sluice.FailLocal, answered); v.Outcome == guard.LocalAllowed {
			admitted++
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stand-in admitted %d in %v; want more than 20 (windows of 100 ms)", admitted, answered)
		}
	}
	c.proxy.Stall(false)
	h := c.recovered(t, func(h guard.Health) bool { return h.Replayed > 0 })
	if h.Replayed != 10 {
		t.Fatalf("told the store %d; want 10, the capacity", h.Replayed)
	}
	if log := c.log.String(); !strings.Contains(log, "keys_left_owed=0") {
		t.Fatalf("something stayed owed:\n%s", log)
	}
}

// What a check took, by its verdict and a request's fail mode: a request
// the store decided took its cost when allowed; one the store failed on
// took only where the stand-in decided it (fail_mode local).
func TestVerdictTook(t *testing.T) {
	down := fmt.Errorf("%w: refused", sluice.ErrStoreUnavailable)
	for _, tc := range []struct {
		v    guard.Verdict
		mode sluice.FailMode
		want bool
	}{
		{guard.Verdict{Outcome: guard.Allowed}, sluice.FailOpen, true},
		{guard.Verdict{Outcome: guard.ShadowDenied}, sluice.FailClosed, true},
		{guard.Verdict{Outcome: guard.Denied}, sluice.FailLocal, false},
		{guard.Verdict{Outcome: guard.LocalAllowed}, sluice.FailOpen, true}, // the concurrency slots failed; the store decided
		{guard.Verdict{Outcome: guard.LocalAllowed, Err: down}, sluice.FailLocal, true},
		{guard.Verdict{Outcome: guard.LocalAllowed, Err: down}, sluice.FailOpen, false},
		{guard.Verdict{Outcome: guard.LocalDenied, Err: down}, sluice.FailLocal, false},
		{guard.Verdict{Outcome: guard.FailedOpen, Err: down}, sluice.FailOpen, false},
		{guard.Verdict{Outcome: guard.FailedOpen, Err: down}, sluice.FailLocal, false}, // no stand-in
		{guard.Verdict{Outcome: guard.FailedClosed, Err: down}, sluice.FailClosed, false},
	} {
		if got := tc.v.Took(tc.mode); got != tc.want {
			t.Errorf("%v (err %v) under %v: Took %v, want %v", tc.v.Outcome, tc.v.Err, tc.mode, got, tc.want)
		}
	}
}

// A shadow request the store failed on is decided as one that fails open:
// allowed, under its limit, never what the caller's reused slice held from
// an earlier check (which a front door would report, and log as a denial).
func TestShadowDecidedAsFailingOpenWhenTheStoreFails(t *testing.T) {
	c := newChaos(t, guard.Options{Timeout: 200 * time.Millisecond})
	c.proxy.Down()
	limit := sluice.Limit{Rate: 10, Period: time.Hour}
	sds := []sluice.Decision{{Allowed: false, Limit: sluice.Limit{Rate: 1, Period: time.Second}, RetryAfter: time.Minute}} // an earlier check's
	v := c.guard.Decide(context.Background(), &guard.Check{Label: "p", Shadow: []sluice.Request{{Key: "k", Limit: limit, Cost: 1}}}, nil, sds)
	if want := (sluice.Decision{Allowed: true, Limit: limit, Remaining: 9}); sds[0] != want || v.Shadow != guard.ShadowFailed || v.Outcome != guard.Allowed {
		t.Fatalf("shadow on a store that is down: %+v, %+v; want %+v, its shadow failed", sds[0], v, want)
	}
	if !strings.Contains(c.log.String(), "rate limit store failed (shadow)") {
		t.Fatalf("the failure is not logged:\n%s", c.log)
	}
}

// A check's shadow requests are decided apart from its enforced ones and
// never deny: the Verdict says what became of them, and the Outcome
// carries a shadow denial only when the enforced requests were allowed.
func TestGuardShadowResults(t *testing.T) {
	g, err := guard.New(memstore.New(memstore.Options{}), guard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	enforced := sluice.Request{Key: "e", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}, Cost: 1}
	shadow := sluice.Request{Key: "s", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Hour}, Cost: 1}
	ds, sds := make([]sluice.Decision, 1), make([]sluice.Decision, 1)
	for i, want := range []struct {
		shadow  guard.ShadowResult
		outcome guard.Outcome
	}{
		{guard.ShadowAllowed, guard.Allowed},
		{guard.ShadowWouldDeny, guard.ShadowDenied},
	} {
		v := g.Decide(context.Background(), &guard.Check{Label: "p", Enforced: []sluice.Request{enforced}, Modes: []sluice.FailMode{sluice.FailLocal}, Shadow: []sluice.Request{shadow}}, ds, sds)
		if v.Shadow != want.shadow || v.Outcome != want.outcome || !ds[0].Allowed {
			t.Fatalf("check %d: %+v, enforced %+v; want shadow %v, outcome %v", i+1, v, ds[0], want.shadow, want.outcome)
		}
	}
}
