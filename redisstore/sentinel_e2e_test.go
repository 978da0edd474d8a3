//go:build e2e

package redisstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// Tests on Sentinel and failovers: a primary, its replica and sentinels
// (redistest.Sentinels), switchovers and promoted replicas. Behind the e2e
// build tag: go test -tags e2e ./redisstore.

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

// With Sentinel the password file is the master's: the store finds the
// master through a sentinel that requires a password of its own (the
// URL's sentinel_password), authenticates to the master as the URL's user
// with the file's password, and follows the file as it is rotated. A
// sentinel given the file's credentials, or the master the sentinel's,
// would refuse them or let the store in as another user.
func TestPasswordFileWithSentinel(t *testing.T) {
	master, sentinel := redistest.SentinelAuth(t, "", "sentinel-s3cret")
	master.Do("ACL", "SETUSER", "limiter", "on", ">first", "~*", "&*", "+@all")
	file := filepath.Join(t.TempDir(), "password")
	write := func(contents string) { t.Helper(); swapFile(t, file, []byte(contents)) }
	write("first\n")
	store, err := redisstore.Open("redis-sentinel://limiter@"+sentinel+"/mymaster?sentinel_password=sentinel-s3cret&password_file="+url.QueryEscape(file),
		redisstore.Options{Prefix: uniquePrefix(t), ReconnectInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	until := func(what string, want func(error) bool) error { t.Helper(); return takeUntil(t, store, what, want) }
	until("the master found through the sentinel, the file's password", decided)

	rotate(t, file, "first", "second", master)
	until("the password rotated in its file, the old one removed", decided)
	storeConnectedAs(t, master, "limiter")
}

// Both passwords in files, as a deployment mounts its secrets: Redis's
// (password_file) and the sentinel's own (sentinel_password_file). Each is
// rotated on disk while the store runs, the old password removed and the
// connections that used it broken; then the master fails over. The store
// learns of the new master from the sentinel, with the sentinel's new
// password, and decides on it as the URL's user with Redis's new one.
func TestCredentialFilesAcrossFailover(t *testing.T) {
	master, replica, sentinel := redistest.SentinelAuthFailover(t, "sentinel-first")
	servers := []*redistest.Server{master, replica}
	for _, s := range servers { // an ACL user is not replicated
		s.Do("ACL", "SETUSER", "limiter", "on", ">first", "~*", "&*", "+@all")
	}
	dir := t.TempDir()
	redisFile, sentinelFile := filepath.Join(dir, "redis"), filepath.Join(dir, "sentinel")
	swapFile(t, redisFile, []byte("first\n"))
	swapFile(t, sentinelFile, []byte("sentinel-first\n"))
	store, err := redisstore.Open("redis-sentinel://limiter@"+sentinel+"/mymaster?password_file="+url.QueryEscape(redisFile)+"&sentinel_password_file="+url.QueryEscape(sentinelFile),
		redisstore.Options{Prefix: uniquePrefix(t), ReconnectInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	until := func(what string, want func(error) bool) error { t.Helper(); return takeUntil(t, store, what, want) }
	until("the master found through the sentinel, both passwords from their files", decided)

	asSentinel := func(password string, args ...string) string {
		t.Helper()
		return redistest.Cli(t, sentinel, append([]string{"--no-auth-warning", "-a", password}, args...)...)
	}
	asSentinel("sentinel-first", "ACL", "SETUSER", "default", ">sentinel-second")
	swapFile(t, sentinelFile, []byte("sentinel-second\n"))
	asSentinel("sentinel-second", "ACL", "SETUSER", "default", "<sentinel-first")
	rotate(t, redisFile, "first", "second", servers...)
	for _, kind := range []string{"normal", "pubsub"} { // the store's, not this one's
		asSentinel("sentinel-second", "CLIENT", "KILL", "TYPE", kind)
	}
	until("both passwords rotated in their files, the old ones removed", decided)

	asSentinel("sentinel-second", "SENTINEL", "FAILOVER", "mymaster")
	awaitMaster(t, store, replica)
	// Nothing demotes the old master now: it takes writes, and a key the
	// promoted replica holds is the store's decision there.
	asSentinel("sentinel-second", "SENTINEL", "REMOVE", "mymaster")
	decidedOn(t, store, replica, master)
	storeConnectedAs(t, replica, "limiter")
}

// storeConnectedAs fails t unless srv has a connection of the store's,
// and every one of them is user's: every connection but redis-cli's own
// and a sentinel's (named sentinel-…).
func storeConnectedAs(t *testing.T, srv *redistest.Server, user string) {
	t.Helper()
	clients := strings.Split(srv.Do("CLIENT", "LIST"), "\n")
	stores := 0
	for _, line := range clients {
		if strings.Contains(line, " cmd=client|list ") || strings.Contains(line, " name=sentinel-") {
			continue
		}
		if stores++; !strings.Contains(line, " user="+user+" ") {
			t.Fatalf("a connection of the store's to %s is not user %s: %s", srv.Addr, user, line)
		}
	}
	if stores == 0 {
		t.Fatalf("no connection of the store's to %s:\n%s", srv.Addr, strings.Join(clients, "\n"))
	}
}
