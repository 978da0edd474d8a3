package shard_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	shardv1 "github.com/sluicehq/sluice/api/shardv1"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/shard"
)

func TestRingBalanceAndMovement(t *testing.T) {
	members := []string{"a:1", "b:1", "c:1"}
	r := shard.NewRing(members, 128, nil)
	counts := map[string]int{}
	before := map[string]string{}
	for i := range 30_000 {
		k := fmt.Sprint("key-", i)
		o := r.Owner(k)
		counts[o]++
		before[k] = o
	}
	for _, m := range members {
		if counts[m] < 7_000 || counts[m] > 13_000 {
			t.Errorf("%s owns %d of 30,000 keys: unbalanced", m, counts[m])
		}
	}
	// Removing b moves only b's keys.
	r2 := shard.NewRing([]string{"a:1", "c:1"}, 128, nil)
	for k, o := range before {
		if o != "b:1" && r2.Owner(k) != o {
			t.Fatalf("%s moved from %s though its owner stayed", k, o)
		}
	}
	// Keys that differ only in their last byte spread too.
	similar := map[string]int{}
	for i := range 30 {
		similar[r.Owner(fmt.Sprintf("p\x00key-%d", i%10)+string(rune('a'+i/10)))]++
	}
	if len(similar) != 3 {
		t.Errorf("30 similar keys landed on %d of 3 members: %v", len(similar), similar)
	}
	if shard.NewRing(nil, 128, nil).Owner("k") != "" {
		t.Error("an empty ring has an owner")
	}
}

// node is one in-process instance: a gRPC server with the peer service
// and health, and its shard Store.
type node struct {
	addr  string
	srv   *grpc.Server
	store *shard.Store
}

func startNodes(t *testing.T, n int) []*node {
	t.Helper()
	var lis []net.Listener
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis = append(lis, l)
		addrs = append(addrs, l.Addr().String())
	}
	return startNodesOn(t, lis, addrs, n)
}

// startNodesOn starts a node on each of lis, all of addrs their peers, and
// waits until each sees want members.
func startNodesOn(t *testing.T, lis []net.Listener, addrs []string, want int) []*node {
	t.Helper()
	var nodes []*node
	for i := range lis {
		local := memstore.New(memstore.Options{})
		srv := grpc.NewServer()
		// A member leaves when two health checks in a row fail: refused
		// at once when it is gone, and each given the 500ms interval when
		// it is slow, so that a busy machine does not move keys.
		s, err := shard.New(shard.Options{
			Self: lis[i].Addr().String(), Local: local, Interval: 500 * time.Millisecond,
			Members: shard.Static(lis[i].Addr().String(), addrs, 2*time.Second),
		})
		if err != nil {
			t.Fatal(err)
		}
		s.Register(srv)
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go srv.Serve(lis[i])
		nd := &node{addr: lis[i].Addr().String(), srv: srv, store: s}
		t.Cleanup(func() { s.Close(); srv.Stop() })
		nodes = append(nodes, nd)
	}
	// Wait for every ring to hold every member.
	deadline := time.Now().Add(5 * time.Second)
	for _, nd := range nodes {
		for len(nd.store.Members()) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s sees %v", nd.addr, nd.store.Members())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nodes
}

// Each key's decisions are exact across the three: the same admitted count
// as one memory store would give, with forwarding in between. Membership
// is fixed and a forward may take a minute: a busy machine that slows a
// health check or a forward past its timeout moves keys or fails a call
// over to a successor, which is what the membership and hung-peer tests
// are for, not this one.
func TestExactAcrossInstances(t *testing.T) {
	exactAcross(t, startSteadyNodes(t, 3))
}

// startSteadyNodes starts n nodes whose forwards wait up to a minute for
// the owner's answer, and returns once each ring holds all n. Membership
// is a fixed list that the test opens once every node serves.
func startSteadyNodes(t *testing.T, n int) []*node {
	t.Helper()
	var lis []net.Listener
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis, addrs = append(lis, l), append(addrs, l.Addr().String())
	}
	var nodes []*node
	var views []*openedMembers
	for i := range lis {
		view := &openedMembers{self: addrs[i], all: addrs}
		srv := grpc.NewServer()
		s, err := shard.New(shard.Options{
			Self: addrs[i], Local: memstore.New(memstore.Options{}), Members: view,
			Interval: 20 * time.Millisecond, Timeout: time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		s.Register(srv)
		go srv.Serve(lis[i])
		t.Cleanup(func() { s.Close(); srv.Stop() })
		nodes, views = append(nodes, &node{addr: addrs[i], srv: srv, store: s}), append(views, view)
	}
	for _, v := range views {
		v.open.Store(true)
	}
	until(t, "every ring holds every member", func() bool {
		for _, nd := range nodes {
			if len(nd.store.Members()) != n {
				return false
			}
		}
		return true
	})
	return nodes
}

// openedMembers is a membership of self alone until open, then of all.
type openedMembers struct {
	self string
	all  []string
	open atomic.Bool
}

func (m *openedMembers) Members(context.Context) []string {
	if m.open.Load() {
		return m.all
	}
	return []string{m.self}
}

// An owner's errors come back as the same values: errors.Is holds across
// peers.
func TestErrorsAcrossPeers(t *testing.T) {
	nodes := startNodes(t, 2)
	front := nodes[0].store
	var remote string
	for i := 0; remote == ""; i++ {
		if k := fmt.Sprint("r", i); front.Owner(k) == nodes[1].addr {
			remote = k
		}
	}
	// Two limits of one state in a batch: refused by the owner's store.
	limit, other := sluice.Limit{Rate: 5, Period: time.Minute}, sluice.Limit{Rate: 7, Period: time.Minute}
	err := front.TakeAll(context.Background(), []sluice.Request{
		{Key: remote, Limit: limit, Cost: 1}, {Key: remote, Limit: other, Cost: 1},
	}, make([]sluice.Decision, 2))
	if !errors.Is(err, sluice.ErrDuplicateRequest) {
		t.Fatalf("batch: %v; want ErrDuplicateRequest from the owner", err)
	}
	if front.Forwarded() == 0 {
		t.Fatal("nothing was forwarded: the test did not reach the owner")
	}
}

// A batch of another protocol version is refused, naming both.
func TestVersionChecked(t *testing.T) {
	nodes := startNodes(t, 1)
	conn, err := grpc.NewClient(nodes[0].addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := shardv1.NewPeerClient(conn).Take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	batch := &shardv1.Batch{CallSizes: []uint32{1}, Keys: []byte("k"), KeyLengths: []uint32{1}, Algorithms: []uint32{0},
		Rates: []int64{1}, PeriodsUs: []int64{1_000_000}, Bursts: []int64{0}, Costs: []int64{1}, Flags: []uint32{0}, NowUnixUs: []int64{0}}
	if err := st.Send(batch); err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "VERSION_1") {
		t.Fatalf("a batch without a version: %v; want FailedPrecondition naming VERSION_1", err)
	}
	st2, _ := shardv1.NewPeerClient(conn).Take(context.Background())
	batch.Version = shardv1.Version_VERSION_1
	st2.Send(batch)
	if res, err := st2.Recv(); err != nil || len(res.Allowed) != 1 || !res.Allowed[0] {
		t.Fatalf("version 1: %v, %v", res, err)
	}
	// A malformed batch (a column short) is refused, not a panic.
	st3, _ := shardv1.NewPeerClient(conn).Take(context.Background())
	batch.Costs = nil
	st3.Send(batch)
	if _, err := st3.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a batch without costs: %v; want InvalidArgument", err)
	}
}

func exactAcross(t *testing.T, nodes []*node) {
	t.Helper()
	limit := sluice.Limit{Rate: 50, Period: time.Hour}
	var admitted [20]atomic.Int64
	var wg sync.WaitGroup
	for _, nd := range nodes {
		for w := range 8 {
			wg.Go(func() {
				for i := range 60 {
					k := (w*60 + i) % 20
					d, err := nd.store.Take(context.Background(), sluice.Request{Key: fmt.Sprint("k", k), Limit: limit, Cost: 1})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						admitted[k].Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	for k := range admitted {
		if got := admitted[k].Load(); got != 50 {
			t.Errorf("key k%d: admitted %d, want exactly 50", k, got)
		}
	}
	var fwd int64
	for _, nd := range nodes {
		fwd += nd.store.Forwarded()
	}
	if fwd == 0 {
		t.Error("nothing was forwarded")
	}
	// A batch across owners is refused.
	var a, b string
	for i := 0; a == "" || b == ""; i++ {
		k := fmt.Sprint("x", i)
		if nodes[0].store.Owner(k) == nodes[1].addr {
			a = k
		} else if nodes[0].store.Owner(k) == nodes[2].addr {
			b = k
		}
	}
	err := nodes[0].store.TakeAll(context.Background(), []sluice.Request{{Key: a, Limit: limit, Cost: 1}, {Key: b, Limit: limit, Cost: 1}}, make([]sluice.Decision, 2))
	if err != shard.ErrCrossOwner {
		t.Errorf("cross-owner batch: %v", err)
	}
}

// Killing one instance moves its keys to the others within one membership
// interval, and the survivors keep answering.
func TestMembershipChange(t *testing.T) {
	nodes := startNodes(t, 3)
	dead := nodes[2]
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("k", i); nodes[0].store.Owner(k) == dead.addr {
			key = k
		}
	}
	dead.srv.Stop()
	killed := time.Now()
	limit := sluice.PerMinute(100)
	for {
		_, err0 := nodes[0].store.Take(context.Background(), sluice.Request{Key: key, Limit: limit, Cost: 1})
		_, err1 := nodes[1].store.Take(context.Background(), sluice.Request{Key: key, Limit: limit, Cost: 1})
		if err0 == nil && err1 == nil {
			break
		}
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("the dead owner's key still fails after 30s: %v, %v", err0, err1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Its successor on the ring answers at once, before membership has
	// seen the death: the key is decided where it goes next.
	t.Logf("the dead owner's keys answered again %v after it died (interval 100ms)", time.Since(killed))
	until(t, "the death seen", func() bool { return len(nodes[0].store.Members()) == 2 && len(nodes[1].store.Members()) == 2 })
	if nodes[0].store.Owner(key) != nodes[1].store.Owner(key) {
		t.Errorf("the survivors disagree on the key's owner")
	}
}

// fixedMembers is a membership that never changes: two of them that
// disagree make a split brain on purpose.
type fixedMembers []string

func (f fixedMembers) Members(context.Context) []string { return f }

// While two instances disagree on ownership, a key is decided by each
// owner it has: over-admission is bounded by the number of owners.
func TestSplitBrainIsBoundedByOwners(t *testing.T) {
	var addrs []string
	var lis []net.Listener
	for range 2 {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		lis, addrs = append(lis, l), append(addrs, l.Addr().String())
	}
	views := []fixedMembers{{addrs[0]}, {addrs[0], addrs[1]}} // the first does not see the second
	var stores []*shard.Store
	for i := range 2 {
		local := memstore.New(memstore.Options{})
		srv := grpc.NewServer()
		shard.Register(srv, local, shard.Auth{})
		go srv.Serve(lis[i])
		s, _ := shard.New(shard.Options{Self: addrs[i], Local: local, Members: views[i], Interval: time.Hour})
		t.Cleanup(func() { s.Close(); srv.Stop() })
		stores = append(stores, s)
	}
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("k", i); stores[1].Owner(k) == addrs[1] {
			key = k // owned by the second in its view, by the first in the first's
		}
	}
	limit := sluice.Limit{Rate: 10, Period: time.Hour}
	admitted := 0
	for i := range 60 {
		if d, err := stores[i%2].Take(context.Background(), sluice.Request{Key: key, Limit: limit, Cost: 1}); err == nil && d.Allowed {
			admitted++
		}
	}
	// The second settles as a member that just joined, sending its own
	// checks to the key's owner without it, the first, which decides them:
	// until its settling ends, the two decide as one owner.
	if admitted < 10 || admitted > 20 {
		t.Fatalf("admitted %d with two owners of a limit of 10; want at most 2 × 10", admitted)
	}
}

// answered bounds a forward to a hung peer in these tests: it is cut, not
// left waiting for the peer. How soon (within the timeout) is for the
// benchmarks: a busy machine stretches any bound a test could assert.
const answered = 30 * time.Second

// A peer that takes a batch and never answers fails each forward within
// the timeout, and the next forward, on a new stream, fails in time too.
func TestHungPeerFailsWithinTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hung := grpc.NewServer()
	hung.RegisterService(&grpc.ServiceDesc{
		ServiceName: "sluice.shard.v1.Peer",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName: "Take", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				<-ss.Context().Done() // reads nothing, answers nothing
				return nil
			},
		}},
	}, nil)
	go hung.Serve(l)
	t.Cleanup(hung.Stop)
	// Each forward fails within the timeout, and the check goes to the
	// owner's successor on the ring: here the front itself.
	s, keys := front(t, l.Addr().String(), 150*time.Millisecond, 2)
	for _, k := range keys {
		start := time.Now()
		d, err := s.Take(context.Background(), sluice.Request{Key: k, Limit: sluice.PerSecond(10), Cost: 1})
		if err != nil || !d.Allowed || d.Remaining != 9 {
			t.Fatalf("%s: %+v, %v; want decided by the successor", k, d, err)
		}
		if el := time.Since(start); el > answered {
			t.Errorf("%s: answered after %v, timeout 150ms: not cut by the timeout", k, el)
		}
	}
	// A caller's deadline shorter than the timeout is kept too.
	slow, _ := front(t, l.Addr().String(), 5*time.Second, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := slow.Take(ctx, sluice.Request{Key: keys[0], Limit: sluice.PerSecond(10), Cost: 1}); err == nil {
		t.Fatal("a hung owner answered")
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("failed after %v: the caller's 100ms deadline was not kept", el)
	}
}

// A peer that restarts on the same address leaves its old stream dead; the
// next forward, sent after the restart, is answered, not failed.
func TestForwardAfterPeerRestart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	local := memstore.New(memstore.Options{})
	srv := grpc.NewServer()
	shard.Register(srv, local, shard.Auth{})
	go srv.Serve(l)
	s, keys := front(t, addr, time.Second, 1)
	key := keys[0]
	limit := sluice.Limit{Rate: 100, Period: time.Hour}
	if _, err := s.Take(context.Background(), sluice.Request{Key: key, Limit: limit, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	srv.Stop() // the peer goes away, and comes back on the same address
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("could not listen again on %s: %v", addr, err)
	}
	srv2 := grpc.NewServer()
	shard.Register(srv2, local, shard.Auth{})
	go srv2.Serve(l2)
	t.Cleanup(srv2.Stop)
	time.Sleep(100 * time.Millisecond) // the client notices the old connection is gone
	d, err := s.Take(context.Background(), sluice.Request{Key: key, Limit: limit, Cost: 1})
	if err != nil {
		t.Fatalf("forward after the peer restarted: %v", err)
	}
	if d.Remaining != 98 {
		t.Errorf("remaining %d, want 98: counted once each", d.Remaining)
	}
}

// front returns a shard Store of two members, itself (never dialled) and
// peer, with the forward timeout, and n keys that peer owns.
func front(t *testing.T, peer string, timeout time.Duration, n int) (*shard.Store, []string) {
	t.Helper()
	const self = "127.0.0.1:1"
	s, err := shard.New(shard.Options{
		Self: self, Local: memstore.New(memstore.Options{}), Timeout: timeout,
		Members: fixedMembers{self, peer}, Interval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprint("k", i); s.Owner(k) == peer {
			keys = append(keys, k)
		}
	}
	return s, keys
}

// A member dies and the survivors see it at different times: one has
// dropped it from its ring, the other still holds it. Every check of a
// key the dead member owned, from either survivor, is decided by the one
// member that owns the key without it, so the survivors admit the limit
// once between them, and none fails.
func TestDeadOwnerHasOneDeciderWhileRingsDisagree(t *testing.T) {
	var addrs []string
	var lis []net.Listener
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis, addrs = append(lis, l), append(addrs, l.Addr().String())
	}
	dead := addrs[2]
	lis[2].Close() // killed: its address refuses connections
	views := []fixedMembers{{addrs[0], addrs[1]}, {addrs[0], addrs[1], dead}}
	var stores []*shard.Store
	for i := range 2 {
		srv := grpc.NewServer()
		s, err := shard.New(shard.Options{Self: addrs[i], Local: memstore.New(memstore.Options{}), Members: views[i], Interval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		s.Register(srv)
		go srv.Serve(lis[i])
		t.Cleanup(func() { s.Close(); srv.Stop() })
		stores = append(stores, s)
	}
	// A key of the dead member's whose owner without it is the second
	// survivor, the one that has not seen the death: the first sends it
	// its checks, and it would pass them to the dead member.
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("k", i); stores[1].Owner(k) == dead && stores[0].Owner(k) == addrs[1] {
			key = k
		}
	}
	limit := sluice.Limit{Rate: 50, Period: time.Hour}
	var admitted, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 20 {
				d, err := stores[(w+i)%2].Take(context.Background(), sluice.Request{Key: key, Limit: limit, Cost: 1})
				switch {
				case err != nil:
					failed.Add(1)
					t.Logf("check %d: %v", i, err)
				case d.Allowed:
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 50 || failed.Load() != 0 {
		t.Fatalf("admitted %d of 320 checks (%d failed) on a limit of 50; want exactly 50 and none failed", admitted.Load(), failed.Load())
	}
}

// A refund forwarded to the key's owner gives the cost back there, as
// taken at its own time.
func TestRefundForwarded(t *testing.T) {
	redistest.HourAhead()
	nodes := startNodes(t, 2)
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("k", i); nodes[0].store.Owner(k) == nodes[1].addr {
			key = k
		}
	}
	ctx := context.Background()
	for _, alg := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.TokenBucket, sluice.GCRA} {
		limit := sluice.Limit{Algorithm: alg, Rate: 10, Period: time.Hour}
		taken := time.Now()
		d, err := nodes[0].store.Take(ctx, sluice.Request{Key: key, Limit: limit, Cost: 8, Now: taken}) // a bucket's refund counts its refill from the take
		if err != nil || !d.Allowed || d.Remaining != 2 {
			t.Fatalf("%v: reserve 8: %+v, %v", alg, d, err)
		}
		d, err = nodes[0].store.Take(ctx, sluice.Request{Key: key, Limit: limit, Cost: 6, Refund: taken})
		if err != nil || !d.Allowed || d.Remaining != 8 {
			t.Fatalf("%v: refund 6 of 8: %+v, %v; want 8 remaining", alg, d, err)
		}
		if d, err := nodes[1].store.Take(ctx, sluice.Request{Key: key, Limit: limit, Cost: 0}); err != nil || d.Remaining != 8 {
			t.Fatalf("%v: at the owner: %+v, %v; want 8 remaining", alg, d, err)
		}
	}
}
