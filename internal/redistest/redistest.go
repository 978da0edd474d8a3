// Package redistest starts throw-away redis-server processes for tests:
// standalone servers and 3-master Clusters on free loopback ports, stopped
// when the test ends.
//
// SLUICE_REDIS_ADDR points the tests that only decide (Standalone) at an
// existing server instead: each then works under a prefix of its own
// (Server.URL, UniquePrefix), so that tests, and packages run at once,
// never see each other's keys or channels. Tests that change the server
// (its config, its users, restarts) start one of their own (Own) even
// then. Without redis-server on PATH, those skip with a message, unless
// SLUICE_REQUIRE_REDIS=1 (set by .ci/run), where they fail.
package redistest

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/freeport"
)

// Server is one redis-server process.
type Server struct {
	Addr string
	t    testing.TB
	dir  string
	args []string
	cmd  *exec.Cmd
	tls  *Certs // the server speaks only TLS, with these

	prefix string // on an external server, this test's own; else ""
}

// URL is the server's redis:// URL, with the test's prefix on an
// external server.
func (s *Server) URL() string {
	if s.prefix == "" {
		return "redis://" + s.Addr
	}
	return "redis://" + s.Addr + "?prefix=" + url.QueryEscape(s.prefix)
}

// URLVia is URL with addr (a fault proxy in front of the server, say)
// for the server's address.
func (s *Server) URLVia(addr string) string {
	return strings.Replace(s.URL(), s.Addr, addr, 1)
}

// run tells apart the processes that share an external server: each run
// of a test keys its state apart from the runs before it.
var run = strconv.FormatUint(rand.Uint64(), 36)

var prefixes atomic.Int64

// UniquePrefix is a key prefix no other test, nor another run of t, uses:
// sluicetest:<run>:<n>:<t's name>:.
func UniquePrefix(t testing.TB) string {
	return fmt.Sprintf("sluicetest:%s:%d:%s:", run, prefixes.Add(1), strings.ReplaceAll(t.Name(), "/", "."))
}

// KeysOf is the SCAN pattern of the keys under the prefixes UniquePrefix
// gave t and its subtests in this run.
func KeysOf(t testing.TB) string {
	top, _, _ := strings.Cut(t.Name(), "/")
	return fmt.Sprintf("sluicetest:%s:*:%s[.:]*", run, top)
}

// binary returns the path of name, skipping or failing t when it is missing.
func binary(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("SLUICE_REQUIRE_REDIS") == "1" {
		t.Fatalf("%s is not on PATH and SLUICE_REQUIRE_REDIS=1", name)
	}
	t.Skipf("%s is not on PATH: skipping (install Redis, or set SLUICE_REDIS_ADDR)", name)
	return ""
}

// External returns the address in SLUICE_REDIS_ADDR, or "".
func External() string { return os.Getenv("SLUICE_REDIS_ADDR") }

// Standalone starts a redis-server on a free port, or returns a Server for
// SLUICE_REDIS_ADDR (which Kill and Restart then refuse).
func Standalone(t testing.TB) *Server {
	t.Helper()
	if addr := External(); addr != "" {
		return &Server{Addr: addr, t: t, prefix: UniquePrefix(t)}
	}
	return start(t, nil)
}

// Own starts a redis-server of the test's own on a free port, even with
// SLUICE_REDIS_ADDR set: for tests that kill it, restart it, or change
// its config or users.
func Own(t testing.TB) *Server {
	t.Helper()
	return start(t, nil)
}

// StandaloneWith starts a redis-server on a free port with extra
// arguments after sluice's (which turn persistence off): for example
// "--appendonly", "yes".
func StandaloneWith(t testing.TB, extra ...string) *Server {
	t.Helper()
	return start(t, extra)
}

func start(t testing.TB, extra []string) *Server {
	t.Helper()
	return startServer(t, nil, extra)
}

// StandaloneTLS starts a redis-server on a free port that speaks only
// TLS, with certs' server certificate, and asks clients for a
// certificate signed by certs' CA (tls-auth-clients yes).
func StandaloneTLS(t testing.TB, certs *Certs) *Server {
	t.Helper()
	return startServer(t, certs, nil)
}

func startServer(t testing.TB, certs *Certs, extra []string) *Server {
	t.Helper()
	bin := binary(t, "redis-server")
	port := freeport.Port(t, 10000) // and its Cluster bus port
	dir := t.TempDir()
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), t: t, dir: dir, tls: certs}
	listen := []string{"--port", strconv.Itoa(port)}
	if certs != nil {
		listen = []string{"--port", "0", "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", certs.ServerCert, "--tls-key-file", certs.ServerKey,
			"--tls-ca-cert-file", certs.CA, "--tls-auth-clients", "yes",
			"--tls-cluster", "yes", "--tls-replication", "yes"}
	}
	s.args = append(append(listen,
		"--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"),
		"--enable-debug-command", "local", // DEBUG SLEEP: a hung server, for fault tests
	), extra...)
	s.cmd = exec.Command(bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("redistest: starting redis-server: %v", err)
	}
	t.Cleanup(s.Kill)
	s.waitReady()
	return s
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Restart starts a killed server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	if s.args == nil {
		s.t.Skip("redistest: cannot restart an external server")
	}
	s.Kill()
	s.cmd = exec.Command(binary(s.t, "redis-server"), s.args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redistest: restarting redis-server: %v", err)
	}
	s.waitReady()
}

// Do sends one command with redis-cli and returns its output, trimmed.
func (s *Server) Do(args ...string) string {
	s.t.Helper()
	return cli(s.t, s.Addr, append(s.tls.cliFlags(), args...)...)
}

// Cli sends one command with redis-cli to addr (a sentinel, say) and
// returns its output, trimmed.
func Cli(t testing.TB, addr string, args ...string) string {
	t.Helper()
	return cli(t, addr, args...)
}

func cli(t testing.TB, addr string, args ...string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command(binary(t, "redis-cli"), append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (s *Server) waitReady() {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ping(s.Addr, s.tls) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	s.t.Fatalf("redistest: redis-server on %s not ready after 10s:\n%s", s.Addr, log)
}

// ping reports whether a server answers PING on addr.
func ping(addr string, certs *Certs) bool {
	var c net.Conn
	var err error
	if certs != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: 200 * time.Millisecond}, "tcp", addr, certs.Config())
	} else {
		c, err = net.DialTimeout("tcp", addr, 200*time.Millisecond)
	}
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && (strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH")) // up, and asks for a password
}

// Cluster starts a 3-master Redis Cluster and returns its nodes once every
// node reports cluster_state:ok.
func Cluster(t testing.TB) []*Server {
	t.Helper()
	return cluster(t, nil, 0, 2000)
}

// ClusterTLS starts a 3-master Redis Cluster whose nodes speak only TLS,
// to clients and to each other, as StandaloneTLS's server does.
func ClusterTLS(t testing.TB, certs *Certs) []*Server {
	t.Helper()
	return cluster(t, certs, 0, 2000)
}

// ClusterWithReplicas starts a Redis Cluster of 3 masters with a replica
// each, with cluster-node-timeout nodeTimeoutMS (a master that does not
// answer for that long is failed over), and returns its nodes, masters
// first, once every node reports cluster_state:ok.
func ClusterWithReplicas(t testing.TB, nodeTimeoutMS int) []*Server {
	t.Helper()
	return cluster(t, nil, 1, nodeTimeoutMS)
}

func cluster(t testing.TB, certs *Certs, replicas, nodeTimeoutMS int) []*Server {
	t.Helper()
	var nodes []*Server
	var addrs []string
	for range 3 * (1 + replicas) {
		s := startServer(t, certs, []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", strconv.Itoa(nodeTimeoutMS)})
		nodes = append(nodes, s)
		addrs = append(addrs, s.Addr)
	}
	args := append(append(certs.cliFlags(), "--cluster", "create"), addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command(binary(t, "redis-cli"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v: %s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range nodes {
		for !strings.Contains(n.Do("CLUSTER", "INFO"), "cluster_state:ok") || replicas > 0 && !clusterSynced(n) {
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster not ok after 20s: %s", n.Do("CLUSTER", "INFO"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nodes
}

// Sentinel starts a standalone master and one redis-sentinel monitoring it
// as "mymaster", and returns the sentinel's address.
func Sentinel(t testing.TB) (master *Server, sentinelAddr string) {
	t.Helper()
	master = start(t, nil)
	_, mport, _ := net.SplitHostPort(master.Addr)
	return master, startSentinel(t, "sentinel monitor mymaster 127.0.0.1 "+mport+" 1\nsentinel down-after-milliseconds mymaster 1000\n")
}

// SentinelAuth is Sentinel with passwords, as operators run it: the
// master requires redisPass, and the sentinel sentinelPass (its
// requirepass), with which clients authenticate to each separately. With
// redisPass empty the master's default user needs none, and a test adds
// the users it authenticates as (Do runs as the default user).
func SentinelAuth(t testing.TB, redisPass, sentinelPass string) (master *Server, sentinelAddr string) {
	t.Helper()
	var args []string
	monitor := "requirepass " + sentinelPass + "\n"
	if redisPass != "" {
		args = []string{"--requirepass", redisPass}
		monitor += "sentinel auth-pass mymaster " + redisPass + "\n"
	}
	master = start(t, args)
	_, mport, _ := net.SplitHostPort(master.Addr)
	return master, startSentinel(t, "sentinel monitor mymaster 127.0.0.1 "+mport+" 1\n"+monitor+"sentinel down-after-milliseconds mymaster 1000\n")
}

// startSentinel starts a redis-sentinel with the config lines monitor
// (after its port, bind and dir) and returns its address once it answers.
func startSentinel(t testing.TB, monitor string) string {
	t.Helper()
	port := freeport.Port(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n%s", port, dir, monitor)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), t: t, dir: dir, args: []string{conf, "--sentinel", "--logfile", filepath.Join(dir, "redis.log")}}
	s.cmd = exec.Command(binary(t, "redis-server"), s.args...)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("redistest: starting redis-sentinel: %v", err)
	}
	t.Cleanup(s.Kill)
	s.waitReady()
	return s.Addr
}

// clusterSynced reports whether a node of a Cluster with replicas sees
// every node and every replica in sync with its master.
func clusterSynced(n *Server) bool {
	info := n.Do("INFO", "replication")
	if strings.Contains(info, "role:slave") {
		return strings.Contains(info, "master_link_status:up")
	}
	return strings.Contains(info, "connected_slaves:1")
}

// Sentinels starts a master, a replica of it, and three sentinels that
// monitor it as "mymaster" with a quorum of 2 and down-after-milliseconds
// downAfterMS, and returns the master, the replica and the sentinels'
// addresses once the replica is in sync and every sentinel sees it.
func Sentinels(t testing.TB, downAfterMS int) (master, replica *Server, sentinels []string) {
	t.Helper()
	return sentinelsOf(t, 3, 2, downAfterMS, "")
}

// SentinelAuthFailover is one sentinel with a password of its own
// (requirepass sentinelPass) monitoring a master and its replica, neither
// with a password for the default user: a test adds the users it
// authenticates as on both (an ACL user is not replicated) and fails over
// with SENTINEL FAILOVER, which one sentinel may do alone.
func SentinelAuthFailover(t testing.TB, sentinelPass string) (master, replica *Server, sentinel string) {
	t.Helper()
	master, replica, sentinels := sentinelsOf(t, 1, 1, 1000, sentinelPass)
	return master, replica, sentinels[0]
}

// sentinelsOf starts a master, a replica of it, and n sentinels, with a
// requirepass of pass unless it is empty, that monitor it as "mymaster"
// with quorum and down-after-milliseconds downAfterMS, and returns them
// once the replica is in sync and every sentinel sees it.
func sentinelsOf(t testing.TB, n, quorum, downAfterMS int, pass string) (master, replica *Server, sentinels []string) {
	t.Helper()
	master = start(t, nil)
	_, mport, _ := net.SplitHostPort(master.Addr)
	replica = start(t, []string{"--replicaof", "127.0.0.1", mport})
	conf := fmt.Sprintf("sentinel monitor mymaster 127.0.0.1 %s %d\nsentinel down-after-milliseconds mymaster %d\nsentinel failover-timeout mymaster 10000\n", mport, quorum, downAfterMS)
	var auth []string
	if pass != "" {
		conf += "requirepass " + pass + "\n"
		auth = []string{"--no-auth-warning", "-a", pass}
	}
	for range n {
		sentinels = append(sentinels, startSentinel(t, conf))
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		synced := strings.Contains(replica.Do("INFO", "replication"), "master_link_status:up")
		seen := true
		for _, a := range sentinels {
			if !strings.Contains(cli(t, a, append(auth, "SENTINEL", "REPLICAS", "mymaster")...), replica.Addr[strings.LastIndex(replica.Addr, ":")+1:]) {
				seen = false
			}
		}
		if synced && seen {
			return master, replica, sentinels
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica not in sync or not seen by the sentinels after 20s")
		}
		time.Sleep(100 * time.Millisecond) // polling: replication and discovery report no event
	}
}

// WindowAhead returns once the current window of period (aligned to the
// Unix epoch, as fixed windows are) has at least need left, waiting for
// the next window if it has not: a test that counts one window's
// admissions must not straddle two.
func WindowAhead(period, need time.Duration) {
	now := time.Now()
	if end := now.Truncate(period).Add(period); end.Sub(now) < need {
		time.Sleep(time.Until(end))
	}
}

// HourAhead is WindowAhead(time.Hour, time.Minute), for a test that counts
// in fixed windows of an hour or a day on the wall clock (a day's start on
// the hour): none of their boundaries falls within a minute of its start.
func HourAhead() { WindowAhead(time.Hour, time.Minute) }
