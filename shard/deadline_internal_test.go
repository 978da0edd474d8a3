package shard

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice"
	shardv1 "github.com/sluicehq/sluice/api/shardv1"
	"github.com/sluicehq/sluice/memstore"
)

type fixedMembers []string

func (m fixedMembers) Members(context.Context) []string { return m }

// A call that waits at its owner past the owner's Timeout (here for a
// key's move that does not end) is failed, not decided: its caller's own
// Timeout, which started before it sent the call, has passed, and it has
// answered its check with an error. Deciding it later would charge the
// key for a check nobody was told was allowed.
func TestAForwardPastItsTimeoutIsNotDecided(t *testing.T) {
	local, st := stuckOwner(t, 50*time.Millisecond)
	limit := sluice.Limit{Rate: 5, Period: time.Hour}
	batch := &shardv1.Batch{Version: shardv1.Version_VERSION_1}
	appendCall(batch, []sluice.Request{{Key: "k", Limit: limit, Cost: 1}}, false, 0)
	if err := st.Send(batch); err != nil {
		t.Fatal(err)
	}
	res, err := st.Recv()
	if err != nil {
		t.Fatalf("no answer for a call stuck behind a move: %v", err)
	}
	if len(res.Errors) != 1 || len(res.Allowed) != 0 {
		t.Fatalf("answer %v; want the call failed", res)
	}
	if d, err := local.Take(context.Background(), sluice.Request{Key: "k", Limit: limit}); err != nil || d.Remaining != 5 {
		t.Fatalf("the key after the failed call: %+v, %v; want 5 left, nothing charged", d, err)
	}
}

// A call's budget, the time its caller had left when its batch was sent,
// bounds it at the owner below the owner's own Timeout (here an hour): a
// call that waits past it is failed, one whose caller had none left is
// failed at once, and a hand-off, which is state, is recorded whatever
// its budget.
func TestAForwardPastItsCallersBudgetIsNotDecided(t *testing.T) {
	local, st := stuckOwner(t, time.Hour)
	limit := sluice.Limit{Rate: 5, Period: time.Hour}
	batch := &shardv1.Batch{Version: shardv1.Version_VERSION_1}
	appendCall(batch, []sluice.Request{{Key: "waits", Limit: limit, Cost: 1}}, false, 0)
	appendCall(batch, []sluice.Request{{Key: "gone", Limit: limit, Cost: 1}}, false, 0)
	appendCall(batch, []sluice.Request{{Key: "state", Limit: limit, Cost: 2, Force: true}}, false, handoffFlags)
	batch.BudgetsUs = []int64{budget(50 * time.Millisecond), budget(0), budget(-time.Second)}
	if err := st.Send(batch); err != nil {
		t.Fatal(err)
	}
	res, err := st.Recv()
	if err != nil {
		t.Fatalf("no answer within the test's bound: %v (the owner waited past the calls' budgets)", err)
	}
	if len(res.Errors) != 2 || res.Errors[0].Call != 0 || res.Errors[1].Call != 1 || len(res.Allowed) != 1 {
		t.Fatalf("answer %v; want the first two calls failed and the hand-off decided", res)
	}
	for key, want := range map[string]int64{"waits": 5, "gone": 5, "state": 3} {
		if d, err := local.Take(context.Background(), sluice.Request{Key: key, Limit: limit}); err != nil || d.Remaining != want {
			t.Errorf("%s after the batch: %+v, %v; want %d left", key, d, err, want)
		}
	}
}

// stuckOwner starts a member whose every key is moving away, in a move
// that does not end until the test does, serving the peer protocol with
// timeout, and returns its memory and a stream to it. The stream ends a
// minute in, the test's own bound.
func stuckOwner(t *testing.T, timeout time.Duration) (*memstore.Store, grpc.BidiStreamingClient[shardv1.Batch, shardv1.BatchResult]) {
	t.Helper()
	const self = "127.0.0.1:1"
	local := memstore.New(memstore.Options{})
	s, err := New(Options{Self: self, Members: fixedMembers{self}, Local: local, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	stuck := &move{old: NewRing([]string{self}, 128, nil), new: NewRing([]string{"127.0.0.1:2"}, 128, nil), done: make(chan struct{})}
	s.moving.Store(stuck)
	t.Cleanup(func() { s.moving.Store(nil); close(stuck.done) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	s.Register(srv)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := shardv1.NewPeerClient(conn).Take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return local, st
}

// A batch says, per call, the time its caller had left when it was sent:
// none said for a caller without a deadline, -1 for one whose deadline
// has passed (a forward that queued behind others), and nothing at all
// for a batch where no caller has one.
func TestBatchCarriesEachCallersBudget(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	req := []sluice.Request{{Key: "k", Limit: sluice.Limit{Rate: 5, Period: time.Hour}, Cost: 1}}
	fw := func(deadline time.Time) *forward { return &forward{reqs: req, deadline: deadline} }
	msg := new(shardv1.Batch)
	fill(msg, []*forward{fw(time.Time{}), fw(now.Add(250 * time.Millisecond)), fw(time.Time{}), fw(now.Add(-time.Millisecond)), fw(time.Time{})}, func() time.Time { return now })
	if want := []int64{0, 250_000, 0, -1}; !slices.Equal(msg.BudgetsUs, want) || len(msg.CallSizes) != 5 {
		t.Fatalf("budgets %v for %d calls; want %v for 5", msg.BudgetsUs, len(msg.CallSizes), want)
	}
	if err := checkBatch(msg); err != nil {
		t.Fatal(err)
	}
	fill(msg, []*forward{fw(time.Time{})}, func() time.Time { t.Fatal("the clock read for a batch without deadlines"); return now })
	if len(msg.BudgetsUs) != 0 || len(msg.CallSizes) != 1 {
		t.Fatalf("a reused batch: budgets %v for %d calls; want none for 1", msg.BudgetsUs, len(msg.CallSizes))
	}
}
