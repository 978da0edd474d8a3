package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/storetest"
)

// uniquePrefix isolates each store on a shared server.
func uniquePrefix(t testing.TB) string {
	return redistest.UniquePrefix(t)
}

func client(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestConformanceStandalone(t *testing.T) {
	srv := redistest.Standalone(t)
	c := client(t, srv.Addr)
	storetest.Run(t, func(t *testing.T) sluice.Store {
		return redisstore.New(c, redisstore.Options{Prefix: uniquePrefix(t)})
	})
	storetest.RunSlots(t, func(t *testing.T) guard.Slots {
		return redisstore.New(c, redisstore.Options{Prefix: uniquePrefix(t)})
	})
	assertEveryKeyHasTTL(t, srv)
}

// assertEveryKeyHasTTL fails for any sluice key left without a TTL.
func assertEveryKeyHasTTL(t *testing.T, srv *redistest.Server) {
	t.Helper()
	// One script scans the test's keys on the server and returns how many
	// it saw, then those without a TTL: one redis-cli, not one a key.
	out := strings.Fields(srv.Do("EVAL", `local seen, none, cursor = 0, {}, "0"
repeat
  local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = r[1]
  for _, k in ipairs(r[2]) do
    seen = seen + 1
    if redis.call('PTTL', k) == -1 then none[#none + 1] = k end
  end
until cursor == "0"
table.insert(none, 1, seen)
return none`, "0", redistest.KeysOf(t)))
	if len(out) == 0 {
		t.Fatalf("no answer from the TTL scan on %s", srv.Addr)
	}
	for _, k := range out[1:] {
		t.Errorf("key %q has no TTL", k)
	}
	t.Logf("%s keys checked for a TTL on %s", out[0], srv.Addr)
}

// commandCalls returns how many times srv ran cmd since its statistics
// were last reset.
func commandCalls(t *testing.T, srv *redistest.Server, cmd string) int {
	t.Helper()
	for _, line := range strings.Split(srv.Do("INFO", "commandstats"), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

// A call finding the library missing (a new server, a restart, a
// FUNCTION FLUSH) loads it and is decided, once: no request is lost or
// counted twice.
func TestFunctionReloadedWhenMissing(t *testing.T) {
	srv := redistest.Own(t) // it changes the server
	store := redisstore.New(client(t, srv.Addr), redisstore.Options{Prefix: uniquePrefix(t)})
	limit := sluice.Limit{Rate: 10, Period: time.Minute, Algorithm: sluice.FixedWindow}
	now := time.Now().Truncate(limit.Period).Add(time.Second) // one window throughout, whenever the test runs
	ctx := context.Background()
	srv.Do("CONFIG", "RESETSTAT")
	for i := range 10 {
		if i%3 == 0 {
			srv.Do("FUNCTION", "FLUSH")
		}
		d, err := store.Take(ctx, sluice.Request{Key: "k", Limit: limit, Cost: 1, Now: now})
		if err != nil || !d.Allowed || d.Remaining != int64(9-i) {
			t.Fatalf("take %d: %+v, %v; want allowed with %d remaining", i, d, err, 9-i)
		}
	}
	if d, err := store.Take(ctx, sluice.Request{Key: "k", Limit: limit, Cost: 1, Now: now}); err != nil || d.Allowed {
		t.Fatalf("11th take: %+v, %v; want denied", d, err)
	}
	_, name := redisstore.Library()
	if !strings.Contains(srv.Do("FUNCTION", "LIST"), name) {
		t.Errorf("library %s not loaded", name)
	}
	if n := commandCalls(t, srv, "evalsha") + commandCalls(t, srv, "eval"); n != 0 {
		t.Errorf("%d script calls, want every call by FCALL", n)
	}
	if n := commandCalls(t, srv, "function|load"); n != 4 {
		t.Errorf("library loaded %d times, want 4 (first call and after each of 3 flushes)", n)
	}
}

// A user whose ACL forbids some keys gets a clear error for them, and
// keeps FCALL for the keys it may use: a refused key does not turn
// functions off.
func TestForbiddenKeyKeepsFunctions(t *testing.T) {
	srv := redistest.Own(t) // it changes the server
	srv.Do("ACL", "SETUSER", "somekeys", "on", ">pw", "~p:{a*", "+@all")
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, Username: "somekeys", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	store := redisstore.New(c, redisstore.Options{Prefix: "p:"})
	limit := sluice.Limit{Rate: 10, Period: time.Minute}
	ctx := context.Background()
	srv.Do("CONFIG", "RESETSTAT")
	if _, err := store.Take(ctx, sluice.Request{Key: "b", Limit: limit, Cost: 1}); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("forbidden key: err %v, want NOPERM", err)
	}
	for i := range 3 {
		if d, err := store.Take(ctx, sluice.Request{Key: "a", Limit: limit, Cost: 1}); err != nil || d.Remaining != int64(9-i) {
			t.Fatalf("allowed key, take %d: %+v, %v", i, d, err)
		}
	}
	if n := commandCalls(t, srv, "evalsha") + commandCalls(t, srv, "eval"); n != 0 {
		t.Errorf("%d script calls after a forbidden key, want every call by FCALL", n)
	}
}

// A user whose ACL forbids FUNCTION LOAD, or FCALL, gets the same
// decisions, by EVALSHA.
func TestConformanceScriptsWhenFunctionsDenied(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite again, by scripts")
	}
	for _, denied := range []string{"-function", "-fcall"} {
		t.Run(denied, func(t *testing.T) { conformanceAsUser(t, denied) })
	}
}

func conformanceAsUser(t *testing.T, denied string) {
	srv := redistest.Own(t) // it changes the server
	srv.Do("ACL", "SETUSER", "nofunc", "on", ">pw", "~*", "+@all", denied)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, Username: "nofunc", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	srv.Do("CONFIG", "RESETSTAT")
	storetest.Run(t, func(t *testing.T) sluice.Store {
		return redisstore.New(c, redisstore.Options{Prefix: uniquePrefix(t)})
	})
	if n := commandCalls(t, srv, "evalsha"); n == 0 {
		t.Error("no EVALSHA: calls did not fall back to the script")
	}
	assertEveryKeyHasTTL(t, srv)
}

// Callers that give up while their call is queued (deadlines of 0 to 2
// ms) and reuse their requests and decisions at once must not
// race with the batch that still runs their call (run under -race), and
// every call that did return a decision counted exactly once.
func TestGivingUpWhileQueued(t *testing.T) {
	redistest.HourAhead()
	srv := redistest.Standalone(t)
	store := redisstore.New(client(t, srv.Addr), redisstore.Options{Prefix: uniquePrefix(t)})
	limit := sluice.Limit{Rate: 1_000_000, Period: time.Hour, Algorithm: sluice.FixedWindow}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			reqs := make([]sluice.Request, 2)
			dst := make([]sluice.Decision, 2)
			for i := range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%50)*40*time.Microsecond)
				if g%2 == 0 {
					if d, err := store.Take(ctx, sluice.Request{Key: "hot", Limit: limit, Cost: 1}); err == nil && d.Allowed {
						allowed.Add(1)
					}
				} else {
					reqs[0] = sluice.Request{Key: fmt.Sprint("a", g), Limit: limit, Cost: 1}
					reqs[1] = sluice.Request{Key: fmt.Sprint("b", g), Limit: limit, Cost: 1}
					_ = store.TakeAll(ctx, reqs, dst)
					reqs[0], reqs[1] = sluice.Request{}, sluice.Request{} // reused at once
					dst[0], dst[1] = sluice.Decision{}, sluice.Decision{}
				}
				cancel()
			}
		})
	}
	wg.Wait()
	// Calls whose callers gave up may still have counted; none counted twice.
	d, err := store.Take(context.Background(), sluice.Request{Key: "hot", Limit: limit, Cost: 0})
	if err != nil {
		t.Fatal(err)
	}
	used := limit.Rate - d.Remaining
	if used < allowed.Load() || used > 16*200 {
		t.Errorf("hot key used %d, callers saw %d allowed of %d calls", used, allowed.Load(), 16*200)
	}
	t.Logf("%d of %d hot-key calls returned a decision; %d counted", allowed.Load(), 16*200, used)
}

// A URL that does not parse is refused with an error that does not quote
// its password.
func TestOpenErrorHidesPassword(t *testing.T) {
	for _, u := range []string{"redis://user:s3cret@host:port/0", "rediss://u:s3cret@[::1:6379", "redis-sentinel://u:s3cret@h:port/m",
		"redis://:s3cret@h:6379/notanumber", "redis://u:s3cret@h,h2:port"} {
		_, err := redisstore.Open(u, redisstore.Options{})
		if err == nil {
			t.Errorf("%s: opened", u)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error shows the password: %v", u, err)
		}
	}
}

// namedClient returns a client of addr on one pipelined connection, and
// its name, its own, so that CLIENT LIST can be read for this client's
// connections alone: a shared server (SLUICE_REDIS_ADDR) holds other
// tests' stores, whose clocks refresh on connections whose last command
// is TIME too. By default rueidis spreads keyed commands over
// log2(GOMAXPROCS) connections at random, and sends TIME, which has no
// key, on the first.
func namedClient(t *testing.T, addr string) (rueidis.Client, string) {
	t.Helper()
	name := strings.NewReplacer(":", "-", ".", "-").Replace(strings.TrimSuffix(uniquePrefix(t), ":"))
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ClientName: name, PipelineMultiplex: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, name
}

// refreshClock makes a measurement of s's Redis clock due, as every
// clockRefresh does, calls take, which starts it beside its call, and
// waits for it to end.
func refreshClock(t *testing.T, s *redisstore.Store, take func()) {
	t.Helper()
	idle := redisstore.ClockDue(s)
	take()
	for give := time.Now().Add(time.Minute); !idle(); runtime.Gosched() {
		if time.Now().After(give) {
			t.Fatal("the clock's refresh never ended")
		}
	}
}

// The store knows Redis's clock from its first call on: that call
// measures it, before it is sent, on the connection the calls share. Later
// measurements run on a connection of their own, and once one has worked
// there a lone call goes on it too: after calls overlapped on the shared
// connection (rueidis then writes its calls from a goroutine of its own,
// for good), a lone caller's calls are still written and read from its
// own goroutine (see Store.send). Every call is counted once, whichever
// connection it went on.
func TestClockFirstInlineThenOnItsOwnConnection(t *testing.T) {
	srv := redistest.Standalone(t)
	c, name := namedClient(t, srv.Addr)
	s := redisstore.New(c, redisstore.Options{Prefix: uniquePrefix(t)})
	// A burst of 10,000, refilled at one an hour: what the calls take
	// is what remains, give or take the one an hour may refill.
	limit := sluice.Limit{Rate: 1, Period: time.Hour, Burst: 10_000}
	take := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: limit, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// A refresh with no call beside it, which could land on the clock's
	// connection after its TIME.
	refresh := func() {
		t.Helper()
		if err := redisstore.MeasureClock(s); err != nil {
			t.Fatal(err)
		}
	}
	// CLIENT LIST names each connection's last command.
	lastOn := func() map[string]string {
		last := map[string]string{}
		for line := range strings.SplitSeq(srv.Do("CLIENT", "LIST"), "\n") {
			var id, cmd, named string
			for field := range strings.FieldsSeq(line) {
				if v, ok := strings.CutPrefix(field, "id="); ok {
					id = v
				}
				if v, ok := strings.CutPrefix(field, "cmd="); ok {
					cmd = v
				}
				if v, ok := strings.CutPrefix(field, "name="); ok {
					named = v
				}
			}
			if named == name {
				last[id] = cmd
			}
		}
		return last
	}
	on := func(last map[string]string, cmd string) (ids []string) {
		for id, c := range last {
			if c == cmd {
				ids = append(ids, id)
			}
		}
		return ids
	}
	if redisstore.ClockKnown(s) {
		t.Fatal("Redis's clock known before any call")
	}
	take()
	if !redisstore.ClockKnown(s) {
		t.Fatal("Redis's clock not known after the first call")
	}
	last := lastOn()
	shared := on(last, "fcall")
	if len(last) != 1 || len(shared) != 1 {
		t.Fatalf("last commands by connection after the first call %v: want TIME then FCALL on one connection", last)
	}
	if redisstore.OwnConnection(s) {
		t.Fatal("a lone call would go on a connection never used")
	}
	refresh()
	last = lastOn()
	own := on(last, "time")
	if len(own) != 1 || last[shared[0]] != "fcall" {
		t.Fatalf("last commands by connection after a refresh %v: want TIME last on a connection, and FCALL on connection %s", last, shared[0])
	}
	if !redisstore.OwnConnection(s) {
		t.Fatal("after a measurement on its own connection, lone calls do not go on it")
	}
	take()
	if last = lastOn(); last[own[0]] != "fcall" || last[shared[0]] != "fcall" {
		t.Fatalf("last commands by connection after a lone call %v: want FCALL on %s, the clock's", last, own[0])
	}

	// Calls at once, then one alone: it goes on the clock's connection
	// again, whatever the calls at once did to the shared one.
	const callers, each = 16, 32
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				take()
			}
		})
	}
	wg.Wait()
	refresh() // TIME last on the clock's connection, to see the next call move it
	if last = lastOn(); last[own[0]] != "time" {
		t.Fatalf("last commands by connection after calls at once and a refresh %v: want TIME on %s", last, own[0])
	}
	take()
	if last = lastOn(); last[own[0]] != "fcall" {
		t.Fatalf("last commands by connection after calls at once, then one alone %v: want FCALL on %s, the clock's", last, own[0])
	}
	ctx := context.Background()
	d, err := s.Take(ctx, sluice.Request{Key: "k", Limit: limit}) // a peek
	if want := limit.Burst - 4 - callers*each; err != nil || d.Remaining < want || d.Remaining > want+1 {
		t.Fatalf("after %d calls: remaining %d, %v; want %d (or one more, refilled)", 4+callers*each, d.Remaining, err, want)
	}
}

// The store's own connection killed (CLIENT KILL here; a restart or an
// idle timeout alike): the call on it when it went may fail, and is then
// logged, and the calls after it go on the shared connection until the
// clock's next measurement opens another, which lone calls use again.
func TestOwnConnectionKilled(t *testing.T) {
	srv := redistest.Standalone(t)
	c, name := namedClient(t, srv.Addr)
	var logged logbuf.Buffer
	prefix := uniquePrefix(t)
	s := redisstore.New(c, redisstore.Options{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	take := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := s.Take(ctx, sluice.Request{Key: "k", Limit: sluice.Limit{Rate: 1000, Period: time.Hour}, Cost: 1})
		return err
	}
	mustTake := func() {
		t.Helper()
		if err := take(); err != nil {
			t.Fatal(err)
		}
	}
	// A refresh with no call beside it, which could land on the clock's
	// connection after its TIME.
	refresh := func() {
		t.Helper()
		if err := redisstore.MeasureClock(s); err != nil {
			t.Fatal(err)
		}
	}
	// clockConn returns the id of the connection whose last command was
	// TIME: the clock's own, after a refresh.
	clockConn := func() string {
		t.Helper()
		for line := range strings.SplitSeq(srv.Do("CLIENT", "LIST"), "\n") {
			if strings.Contains(line, " name="+name+" ") && strings.Contains(line, " cmd=time ") {
				id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
				return id
			}
		}
		t.Fatalf("no connection of %s ran TIME last:\n%s", name, srv.Do("CLIENT", "LIST"))
		return ""
	}
	mustTake()
	refresh()
	killed := clockConn()
	if !redisstore.OwnConnection(s) {
		t.Fatal("after a measurement on its own connection, lone calls do not go on it")
	}

	// Redis answering with an error is not the connection failing: the
	// call fails, and the connection stays, unlogged.
	keys := strings.Fields(srv.Do("KEYS", prefix+"*"))
	if len(keys) != 1 {
		t.Fatalf("keys of the test: %v, want one", keys)
	}
	srv.Do("DEL", keys[0])
	srv.Do("SADD", keys[0], "not a state")
	if err := take(); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("a call on a key of another type: %v, want WRONGTYPE", err)
	}
	if !redisstore.OwnConnection(s) || logged.String() != "" {
		t.Fatalf("Redis's error turned the own connection off (%v) or was logged as its failure:\n%s", redisstore.OwnConnection(s), logged.String())
	}
	srv.Do("DEL", keys[0])
	mustTake()
	if list := srv.Do("CLIENT", "LIST"); !strings.Contains(list, "id="+killed+" ") {
		t.Fatalf("the clock's connection %s is gone after Redis's error:\n%s", killed, list)
	}

	srv.Do("CLIENT", "KILL", "ID", killed)
	if err := take(); err != nil {
		t.Logf("the call on the killed connection failed: %v", err)
		// It was on the killed connection: logged, and off it.
		if out := logged.String(); !strings.Contains(out, "own connection failed") || redisstore.OwnConnection(s) {
			t.Fatalf("a call failed on the killed connection (%v), and the store goes on with it; log:\n%s", err, out)
		}
	}
	for range 3 {
		mustTake() // on the shared connection, or on a new own one
	}
	refresh()
	if !redisstore.OwnConnection(s) {
		t.Fatal("after a measurement on a new connection, lone calls do not go on it")
	}
	again := clockConn()
	if again == killed {
		t.Fatalf("the clock measured on connection %s, which was killed", killed)
	}
	mustTake()
	if list := srv.Do("CLIENT", "LIST"); !strings.Contains(list, "id="+again+" ") || strings.Contains(list, "id="+again+" ") && !strings.Contains(strings.SplitN(list[strings.Index(list, "id="+again+" "):], "\n", 2)[0], " cmd=fcall ") {
		t.Fatalf("a lone call after the clock's new connection %s worked did not go on it:\n%s", again, list)
	}
}

// A user that may not run TIME cannot decide on Redis's clock: the
// preflight says so as a failure, naming the fix.
func TestPreflightFailsWithoutTime(t *testing.T) {
	srv := redistest.Own(t) // it changes the server
	srv.Do("ACL", "SETUSER", "notime", "on", ">pw", "~*", "&*", "+@all", "-time")
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, Username: "notime", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r, err := redisstore.New(c, redisstore.Options{Prefix: uniquePrefix(t)}).Preflight(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"decide", "commands"} {
		if c, _ := r.Check(name); c.Result != redisstore.ResultFail || !strings.Contains(c.Fix, "+time") {
			t.Errorf("preflight %s for a user without TIME: %+v; want a failure whose fix grants +time", name, c)
		}
	}
}

// A failed measurement of Redis's clock is counted and logged, sampled,
// and the calls go on with the last measurement; the one that succeeds
// again is logged too. Here the measurement's own connection is refused,
// at maxclients, while the calls' connection serves. A caller's own
// context ending is not counted.
func TestClockFailuresCountedAndLogged(t *testing.T) {
	srv := redistest.Own(t) // it changes the server
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, PipelineMultiplex: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var logged logbuf.Buffer
	s := redisstore.New(c, redisstore.Options{Prefix: uniquePrefix(t), Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	ctx := context.Background()
	take := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := s.Take(ctx, sluice.Request{Key: "k", Limit: sluice.Limit{Rate: 1000, Period: time.Hour}, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	refresh := func() {
		t.Helper()
		refreshClock(t, s, take)
	}
	setMaxClients := func(n string) {
		t.Helper()
		if err := c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxclients", n).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	take()
	if n := s.ClockErrors(); n != 0 || !redisstore.ClockKnown(s) {
		t.Fatalf("after the first call: %d clock errors, known %v; want 0, known", n, redisstore.ClockKnown(s))
	}
	setMaxClients("1") // the calls' connection only: no other is let in
	defer setMaxClients("10000")
	refresh()
	if n := s.ClockErrors(); n != 1 {
		t.Fatalf("after a refused connection: %d clock errors, want 1", n)
	}
	if out := logged.String(); strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "error=") || !strings.Contains(out, "keep the last measurement") {
		t.Fatalf("log after a refused connection:\n%s", out)
	}
	refresh()
	take() // the calls go on meanwhile
	if n := s.ClockErrors(); n != 2 {
		t.Fatalf("after a second refused connection: %d clock errors, want 2", n)
	}
	if out := logged.String(); strings.Count(out, "level=WARN") != 1 {
		t.Fatalf("the second failure in a row was logged too:\n%s", out)
	}
	setMaxClients("10000")
	refresh()
	if n := s.ClockErrors(); n != 2 {
		t.Fatalf("after the connection was let in: %d clock errors, want 2", n)
	}
	if out := logged.String(); !strings.Contains(out, "level=INFO") || !strings.Contains(out, "measured again") || !strings.Contains(out, "failures=2") {
		t.Fatalf("log after the connection was let in:\n%s", out)
	}

	// A caller that gave up before its call: its error, not the store's.
	fresh := redisstore.New(c, redisstore.Options{Prefix: uniquePrefix(t)})
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := fresh.Take(cancelled, sluice.Request{Key: "k", Limit: sluice.Limit{Rate: 1000, Period: time.Hour}, Cost: 1}); err == nil {
		t.Fatal("a call with its context cancelled succeeded")
	}
	if n := fresh.ClockErrors(); n != 0 {
		t.Fatalf("a cancelled caller counted %d clock errors, want 0", n)
	}
}

// When Redis's clock moves from under the store's measure of it (a
// failover to a host whose clock is elsewhere), calls reach Redis past
// their deadlines by its clock, though well within them by the caller's.
// The first such answer has the clock measured again, so calls do not go
// on expiring until the next refresh.
func TestClockMeasuredAgainWhenRedisExpiresCallsInTime(t *testing.T) {
	srv := redistest.Standalone(t)
	s := redisstore.New(client(t, srv.Addr), redisstore.Options{Prefix: uniquePrefix(t)})
	take := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := s.Take(ctx, sluice.Request{Key: "k", Limit: sluice.Limit{Rate: 1000, Period: time.Hour}, Cost: 1})
		return err
	}
	if err := take(); err != nil {
		t.Fatal(err)
	}
	redisstore.SkewClock(s, time.Minute)
	if err := take(); !errors.Is(err, redisstore.ErrExpired) {
		t.Fatalf("with Redis's clock a minute ahead of the measure: %v, want ErrExpired", err)
	}
	for give := time.Now().Add(time.Minute); !redisstore.ClockIdle(s); runtime.Gosched() {
		if time.Now().After(give) {
			t.Fatal("the clock's measurement never ended")
		}
	}
	if err := take(); err != nil {
		t.Fatalf("after the clock was measured again: %v", err)
	}
}
