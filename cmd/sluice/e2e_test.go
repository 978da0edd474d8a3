//go:build e2e

package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/freeport"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/shard"
)

// SIGTERM during load: /readyz answers 503 for at least a second while
// checks are still answered, then the listener closes; every request sent
// gets a whole reply, and the process exits 0.
func TestGracefulShutdown(t *testing.T) {
	p := start(t, nil)
	var sent, answered, broken atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			c := &http.Client{Transport: &http.Transport{DisableKeepAlives: false}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				resp, err := c.Post("http://"+p.http+"/v1/check", "application/json", strings.NewReader(`{"checks":[{"policy":"default","key":"k"}]}`))
				if err != nil {
					sent.Add(-1) // refused: never reached the server
					return
				}
				var r checkResp
				if json.NewDecoder(resp.Body).Decode(&r) != nil || len(r.Results) != 1 {
					broken.Add(1)
				}
				resp.Body.Close()
				answered.Add(1)
			}
		})
	}
	// When /readyz first says 503, and when the listener first refuses.
	var notReady, refused atomic.Int64
	wg.Go(func() {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		for refused.Load() == 0 {
			resp, err := c.Get("http://" + p.http + "/readyz")
			if err != nil {
				refused.Store(time.Now().UnixNano())
				return
			}
			if resp.StatusCode == 503 && notReady.Load() == 0 {
				notReady.Store(time.Now().UnixNano())
			}
			resp.Body.Close()
			time.Sleep(20 * time.Millisecond)
		}
	})
	time.Sleep(300 * time.Millisecond)
	p.cmd.Process.Signal(syscall.SIGTERM)
	err := p.wait()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Errorf("exit: %v", err)
	}
	if broken.Load() != 0 || answered.Load() == 0 {
		t.Fatalf("%d answered, %d cut mid-reply", answered.Load(), broken.Load())
	}
	if notReady.Load() == 0 {
		t.Fatal("/readyz never answered 503 before the listener closed")
	}
	if d := time.Duration(refused.Load() - notReady.Load()); d < time.Second {
		t.Fatalf("/readyz answered 503 for %v before the listener closed; want at least 1s", d)
	}
}

// The proxy shapes bursty input to the configured rate: the upstream sees
// the bursts spread evenly, never earlier than the rate allows.
func TestProxyShapesBursts(t *testing.T) {
	var mu sync.Mutex
	var arrivals []time.Time
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
	}))
	defer upstream.Close()
	file := filepath.Join(t.TempDir(), "proxy.yaml")
	os.WriteFile(file, []byte(`policies:
  - name: shaped
    limit: leaky_bucket 20/1s burst 400
    key: client_ip
    match: "/shaped"
    shape: true
`), 0o644)
	addr := startProxy(t, file, upstream.URL).addr

	// Bursty input: 4 bursts of 50, every 2.5s, for 10s. Shaped to 20/s,
	// the upstream sees them spread evenly.
	var wg sync.WaitGroup
	start := time.Now()
	for burst := range 4 {
		time.Sleep(time.Until(start.Add(time.Duration(burst) * 2500 * time.Millisecond)))
		for range 50 {
			wg.Go(func() {
				resp, err := http.Get("http://" + addr + "/shaped")
				if err == nil {
					resp.Body.Close()
				}
			})
		}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != 200 {
		t.Fatalf("%d of 200 shaped requests reached the upstream", len(arrivals))
	}
	span := arrivals[len(arrivals)-1].Sub(arrivals[0]).Seconds()
	t.Logf("shaped: 200 requests in 4 bursts reached the upstream at %.2f/s over %.2fs (configured 20/s)", float64(len(arrivals)-1)/span, span)
	// Never early: the i-th request to reach the upstream left the queue
	// no sooner than i emission intervals (50ms) after the first burst was
	// sent. A busy host can only make it later, never earlier, so this
	// holds there too; 5ms is for the clocks of two processes.
	slices.SortFunc(arrivals, time.Time.Compare)
	for i, at := range arrivals {
		if due := start.Add(time.Duration(i)*50*time.Millisecond - 5*time.Millisecond); at.Before(due) {
			t.Fatalf("request %d reached the upstream %v after the first burst; shaped to 20/s it leaves no sooner than %v", i, at.Sub(start), due.Sub(start))
		}
	}
}

// Three `sluice serve` processes in local-sync mode on one Redis: a hot
// key hammered through all three is admitted within the bound.
func TestLocalSyncThreeInstances(t *testing.T) {
	redistest.HourAhead()
	srv := redistest.Standalone(t)
	file := filepath.Join(t.TempDir(), "ls.yaml")
	os.WriteFile(file, []byte(`store:
  type: redis
  url: `+srv.URL()+`
  mode: local-sync
  sync_interval: 100ms
  instances: 3
policies:
  - name: hot
    limit: fixed_window 100/1h
`), 0o644)
	var procs []*proc
	for range 3 {
		procs = append(procs, start(t, nil, "-config", file))
	}
	if !strings.Contains(procs[0].out.String(), "local-sync") {
		t.Fatalf("not in local-sync mode:\n%s", procs[0].out)
	}
	admitted := 0
	for range 20 {
		for _, p := range procs {
			for range 5 {
				if _, r := postCheck(t, p.http, "hot", "k"); r.Allowed {
					admitted++
				}
			}
		}
		// Let them sync: each pushes, then each pulls what all pushed, so
		// that every round starts from the one remaining. Only a sync that
		// falls inside a round (every 100ms, in the background) lets an
		// instance see part of another's round.
		for range 2 {
			for _, p := range procs {
				waitSyncs(t, p, 1)
			}
		}
	}
	// 300 offered against 100 per hour: between syncs each instance admits
	// at most a third of what it last saw remaining.
	t.Logf("admitted %d of 300 against a limit of 100", admitted)
	if admitted > 110 || admitted < 60 {
		t.Fatalf("admitted %d; want 100 within the local-sync bound (10%%), and not far under", admitted)
	}
}

// waitSyncs waits until p has made n more successful local-sync calls to
// Redis than when it was called.
func waitSyncs(t *testing.T, p *proc, n float64) {
	t.Helper()
	const series = `sluice_store_calls_total{operation="sync",result="ok"}`
	from := metric(t, p.http, series)
	waitFor(t, func() bool { return metric(t, p.http, series) >= from+n })
}

// Three `sluice serve` processes in shard mode: each key is decided
// exactly by its owner whichever instance is asked, and when one instance
// dies its keys move to the survivors within a membership interval.
func TestShardThreeInstances(t *testing.T) {
	needBinary(t)
	grpcs := []string{freeport.Addr(t), freeport.Addr(t), freeport.Addr(t)}
	file := filepath.Join(t.TempDir(), "shard.yaml")
	os.WriteFile(file, []byte(shardConfig(t, grpcs, "30/1h")), 0o644)
	var procs []*proc
	for _, g := range grpcs {
		p := &proc{http: freeport.Addr(t), grpc: freeport.Addr(t), admin: freeport.Addr(t), out: &logbuf.Buffer{}}
		p.cmd = exec.Command(binary, "serve", "-config", file, "-http", p.http, "-grpc", p.grpc, "-admin", p.admin, "-peer-listen", g)
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
		procs = append(procs, p)
	}
	for _, p := range procs {
		waitFor(t, func() bool {
			r, err := http.Get("http://" + p.http + "/healthz")
			if err == nil {
				r.Body.Close()
			}
			return err == nil
		})
	}
	waitFor(t, func() bool { return membersSeen(procs, grpcs) })
	for k := range 6 {
		key := fmt.Sprint("key-", k)
		admitted := 0
		for i := range 45 {
			if _, r := postCheck(t, procs[i%3].http, "p", key); r.Allowed {
				admitted++
			}
		}
		if admitted != 30 {
			t.Errorf("%s: %d admitted across three instances, want exactly 30", key, admitted)
		}
	}
	// Forwarding happened somewhere: every instance was asked about keys
	// that other instances own.
	forwarded := 0
	for _, p := range procs {
		forwarded += int(metric(t, p.http, "sluice_shard_forwarded_total"))
	}
	if forwarded == 0 {
		t.Error("no forwarding counted on any instance")
	}
	// Keys owned by the instance about to die (the service keys state by
	// policy, NUL, key).
	ring := shard.NewRing(grpcs, 128, nil)
	var orphans []string
	for i := 0; len(orphans) < 5; i++ {
		if k := fmt.Sprint("after-", i); ring.Owner("p\x00"+k) == grpcs[2] {
			orphans = append(orphans, k)
		}
	}
	procs[2].cmd.Process.Kill()
	procs[2].cmd.Wait()
	died := time.Now()
	for k, key := range orphans {
		waitFor(t, func() bool {
			code, r := postCheck(t, procs[k%2].http, "p", key)
			return code == 200 && len(r.Results) == 1 && !r.Results[0].FailedOpen && r.Results[0].Remaining == 29
		})
	}
	t.Logf("all keys answered %v after an instance died (membership interval 200ms)", time.Since(died))
}

// membersSeen reports whether every instance logged a ring of all three
// peer addresses.
func membersSeen(procs []*proc, peers []string) bool {
	for _, p := range procs {
		seen := false
		for _, line := range strings.Split(p.out.String(), "\n") {
			if strings.Contains(line, "membership changed") && strings.Contains(line, peers[0]) &&
				strings.Contains(line, peers[1]) && strings.Contains(line, peers[2]) {
				seen = true
			}
		}
		if !seen {
			return false
		}
	}
	return true
}

// Local-sync with the shared Redis down and back: three processes keep
// deciding while it is down, keep what they admitted, and push it when it
// is back: the shared count is exactly what they admitted since it came
// back empty, nothing lost and nothing counted twice.
func TestLocalSyncRedisDownAndBack(t *testing.T) {
	redistest.HourAhead()
	srv := redistest.Own(t) // it changes the server
	file := filepath.Join(t.TempDir(), "ls.yaml")
	os.WriteFile(file, []byte(`store:
  type: redis
  url: `+srv.URL()+`
  mode: local-sync
  sync_interval: 50ms
  instances: 3
policies:
  - name: p
    limit: fixed_window 3000/1h
`), 0o644)
	var procs []*proc
	for range 3 {
		procs = append(procs, start(t, nil, "-config", file))
	}
	srv.Kill()
	admitted := 0
	for i := range 90 { // 30 per instance, well within each one's share
		if code, r := postCheck(t, procs[i%3].http, "p", "k"); code == 200 && r.Allowed {
			admitted++
		}
	}
	if admitted != 90 {
		t.Fatalf("admitted %d of 90 while Redis was down; local decisions must go on", admitted)
	}
	time.Sleep(300 * time.Millisecond) // several failed syncs
	// Each failed sync is counted; its lines are sampled, not one each.
	const syncErrors = `sluice_store_calls_total{operation="sync",result="error"}`
	for i, p := range procs {
		waitFor(t, func() bool { return metric(t, p.http, syncErrors) >= 2 })
		failed := metric(t, p.http, syncErrors)
		if lines := strings.Count(p.out.String(), "local-sync: sync failed"); failed < 2 || float64(lines) >= failed {
			t.Fatalf("instance %d: %v failed syncs counted, %d lines; want several, and fewer lines", i, failed, lines)
		}
	}
	srv.Restart()
	waitFor(t, func() bool { return redisCount(t, srv) >= 0 })
	time.Sleep(300 * time.Millisecond) // more syncs: nothing may be pushed twice
	count := redisCount(t, srv)
	if count != 90 {
		t.Fatalf("Redis holds a count of %d after coming back; want exactly the 90 admitted", count)
	}
}

// redisCount reads the count of policy p's key k (the second packed double
// of sluice:{p\x00k}:fixed_window:...) with struct.unpack, as the store
// does; -1 when it is not there. The key holds a NUL, so it is found by
// pattern inside Redis rather than passed on a command line.
func redisCount(t *testing.T, srv *redistest.Server) int {
	out := srv.Do("EVAL", `local ks = redis.call('KEYS', 'sluice:{p?k}:fixed_window:*')
if #ks ~= 1 then return -1 end
local a, b = struct.unpack('<d<d', redis.call('GET', ks[1]))
return b`, "0")
	var n int
	fmt.Sscan(out, &n)
	return n
}

// The proxy reloads its file on SIGHUP under load: 100 of them, no request
// fails, and the new policies apply.
func TestProxyReloadsUnderLoad(t *testing.T) {
	var dials atomic.Int64
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "up") }))
	upstream.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	upstream.Start()
	defer upstream.Close()
	file := filepath.Join(t.TempDir(), "proxy.yaml")
	// Idle connections kept an hour: what is counted is the reloads' dials,
	// not a busy machine's pauses past the default second.
	os.WriteFile(file, []byte("listeners: {upstream_idle_timeout: 1h}\npolicies: [{name: p, limit: 1000000/1h, key: client_ip, match: /}]\n"), 0o644)
	px := startProxy(t, file, upstream.URL)
	addr, cmd, out := px.addr, px.cmd, px.out
	var ok, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Get("http://" + addr + "/x")
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	for range 100 {
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Fatalf("%d requests failed, %d answered across 100 SIGHUPs:\n%s", failed.Load(), ok.Load(), out)
	}
	// The connections to the upstream outlive each reload: at most one or
	// two per client, where each reload's proxy dialled its own and left
	// the last one's idle.
	t.Logf("%d connections to the upstream", dials.Load())
	if n := dials.Load(); n > 16 {
		t.Fatalf("%d connections to the upstream from 8 clients across 100 reloads; want at most 16", n)
	}
	// A changed file takes effect: a limit of 1 now.
	os.WriteFile(file, []byte("policies: [{name: p, limit: 1/1h, key: client_ip, match: /}]\n"), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + addr + "/x")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 429
	})
}
