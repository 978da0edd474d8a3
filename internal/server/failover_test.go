//go:build e2e

package server

import (
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/redistest"
)

// traffic checks key under policy from 8 callers until stop is closed,
// recording when each check was last decided locally and the slowest
// check.
type traffic struct {
	lastLocal atomic.Int64 // Unix ns of the last check decided locally
	slowest   atomic.Int64
	checks    atomic.Int64
	admitted  atomic.Int64
	wg        sync.WaitGroup
	stop      chan struct{}
}

func startLoad(t *testing.T, r *running, policy, key string) *traffic {
	l := &traffic{stop: make(chan struct{})}
	for range 8 {
		l.wg.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				begin := time.Now()
				res, code, err := r.tryCheck(policy, key)
				if err != nil || code != 200 {
					t.Errorf("status %d: %s %v", code, res.Error, err)
					return
				}
				if d := int64(time.Since(begin)); d > l.slowest.Load() {
					l.slowest.Store(d)
				}
				if res.Local {
					l.lastLocal.Store(time.Now().UnixNano())
				}
				if res.Allowed {
					l.admitted.Add(1)
				}
				l.checks.Add(1)
			}
		})
	}
	return l
}

func (l *traffic) end() {
	close(l.stop)
	l.wg.Wait()
}

// The primary of a key's slots killed under load on a Redis Cluster with
// replicas: every check is answered within the timeout and a margin
// (fail_mode local decides during the failover), /readyz says which share
// of the slots is reachable, Redis decides again within a second of the
// replica's promotion, and no goroutine is left behind.
func TestClusterFailover(t *testing.T) {
	defer noLeaks(t, goleak.IgnoreCurrent())
	nodes := redistest.ClusterWithReplicas(t, 1000)
	seeds := nodes[0].Addr + "," + nodes[1].Addr + "," + nodes[2].Addr
	r := start(t, "store: {type: redis, url: redis://127.0.0.1:1, timeout: 500ms}\npolicies:\n  - {name: p, limit: 1000000/1h}\n", "redis://"+seeds)
	if res, _ := r.check(t, "p", "k"); res.Local || !res.Allowed {
		t.Fatalf("healthy: %+v", res)
	}
	if code, body := r.readyz(t); code != 200 || !strings.Contains(body, "16384 of 16384 slots") {
		t.Fatalf("/readyz healthy: %d %s", code, body)
	}
	var victim *redistest.Server
	for _, n := range nodes[:3] {
		if n.Do("DBSIZE") != "0" {
			victim = n
		}
	}
	if victim == nil {
		t.Fatal("no primary holds the key")
	}
	l := startLoad(t, r, "p", "k")
	time.Sleep(200 * time.Millisecond)
	killed := time.Now()
	victim.Kill()
	for deadline := time.Now().Add(time.Second); ; {
		code, body := r.readyz(t)
		if code == 503 && strings.Contains(body, "of 16384 slots reachable") && !strings.Contains(body, "16384 of 16384") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("/readyz 1s after a primary died: %d %s; want 503 with the share of slots reachable", code, body)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The replica is promoted once the others agree the primary failed.
	var promoted time.Time
	for deadline := time.Now().Add(20 * time.Second); promoted.IsZero(); {
		for _, n := range nodes[3:] {
			if strings.Contains(n.Do("INFO", "replication"), "role:master") {
				promoted = time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no replica promoted 20s after its primary was killed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Redis again within a second of the promotion.
	time.Sleep(1500 * time.Millisecond)
	l.end()
	last := time.Unix(0, l.lastLocal.Load())
	t.Logf("primary killed; replica promoted after %v; last local decision %v after the promotion; %d checks, slowest %v",
		promoted.Sub(killed).Round(time.Millisecond), last.Sub(promoted).Round(time.Millisecond), l.checks.Load(), time.Duration(l.slowest.Load()))
	if last.Sub(promoted) > time.Second {
		t.Errorf("checks still decided locally %v after the promotion; want Redis again within 1s", last.Sub(promoted))
	}
	if d := time.Duration(l.slowest.Load()); d > 500*time.Millisecond+500*time.Millisecond {
		t.Errorf("the slowest check took %v; want within the 500ms timeout and a margin", d)
	}
	if res, _ := r.check(t, "p", "k"); res.Local || !res.Allowed {
		t.Fatalf("after the failover: %+v", res)
	}
	client.CloseIdleConnections()
	r.Shutdown(t.Context())
}

// noLeaks fails t if goroutines other than opts' are still running 10s
// later: the Redis client closes a failed-over node's connections 5s after
// it learns the new topology, by design; what runs longer has leaked.
func noLeaks(t *testing.T, opts ...goleak.Option) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := goleak.Find(opts...)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Error(err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The master killed under load behind Sentinel: every check is answered
// within the timeout and a margin, and Redis decides again within a second
// of the sentinels promoting the replica.
func TestSentinelFailover(t *testing.T) {
	defer noLeaks(t, goleak.IgnoreCurrent())
	master, replica, sentinels := redistest.Sentinels(t, 1000)
	r := start(t, "store: {type: redis, url: redis://127.0.0.1:1, timeout: 500ms}\npolicies:\n  - {name: p, limit: 1000000/1h}\n",
		"redis-sentinel://"+strings.Join(sentinels, ",")+"/mymaster")
	if res, _ := r.check(t, "p", "k"); res.Local || !res.Allowed {
		t.Fatalf("healthy: %+v", res)
	}
	l := startLoad(t, r, "p", "k")
	time.Sleep(200 * time.Millisecond)
	killed := time.Now()
	master.Kill()
	// Promoted when the sentinels name the replica as the master: that is
	// when clients can learn of it.
	var promoted time.Time
	for deadline := time.Now().Add(30 * time.Second); promoted.IsZero(); {
		if out := redistest.Cli(t, sentinels[0], "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"); strings.HasSuffix(out, replica.Addr[strings.LastIndex(replica.Addr, ":")+1:]) {
			promoted = time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica not promoted 30s after the master was killed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond)
	l.end()
	last := time.Unix(0, l.lastLocal.Load())
	t.Logf("master killed; replica promoted after %v; last local decision %v after the promotion; %d checks, slowest %v",
		promoted.Sub(killed).Round(time.Millisecond), last.Sub(promoted).Round(time.Millisecond), l.checks.Load(), time.Duration(l.slowest.Load()))
	if last.Sub(promoted) > time.Second {
		t.Errorf("checks still decided locally %v after the promotion; want Redis again within 1s", last.Sub(promoted))
	}
	if d := time.Duration(l.slowest.Load()); d > time.Second {
		t.Errorf("the slowest check took %v; want within the 500ms timeout and a margin", d)
	}
	client.CloseIdleConnections()
	r.Shutdown(t.Context())
}

// readyz returns /readyz's status and body.
func (r *running) readyz(t *testing.T) (int, string) {
	resp, err := client.Get(r.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
