package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice"
	shardv1 "github.com/sluicehq/sluice/api/shardv1"
)

// peer forwards calls to one member. While fewer than maxInFlight calls
// to it are running, a forward goes at once; beyond that, forwards queue
// and leave together (up to size) as soon as a call returns. One call in
// flight makes the largest batches, which measured fastest. So a lone
// forward waits for nothing, and under load forwards share calls, waiting
// at most for the calls ahead of them.
type peer struct {
	addr    string
	conn    *grpc.ClientConn
	client  shardv1.PeerClient
	size    int
	timeout time.Duration

	mu       sync.Mutex
	pending  []*forward
	inFlight int

	// The stream batches go on while none is in flight (maxInFlight is 1),
	// opened on demand and dropped after a failure. Guarded by mu.
	stream *peerStream
	// msg is the batch being sent, its lists reused from batch to batch;
	// used by the one send in flight.
	msg *shardv1.Batch
}

// peerStream is one stream to a peer, used by one batch at a time.
type peerStream struct {
	stream grpc.BidiStreamingClient[shardv1.Batch, shardv1.BatchResult]
	cancel context.CancelFunc
}

const maxInFlight = 1

// forward is one call waiting for its batch. It holds copies of its
// requests and its own decisions, so that a caller that gave up is never
// read from or written to after it left.
type forward struct {
	reqs     []sluice.Request
	reset    bool
	flags    uint32    // FLAG_HOP, FLAG_HANDOFF: set on each of its requests
	deadline time.Time // its caller's; zero for none
	ds       []sluice.Decision
	err      error
	done     chan struct{} // one value when answered
	one      [1]sluice.Request
	oneD     [1]sluice.Decision
}

// forwards recycles forward structs, whose channels cost an allocation
// each; one whose caller gave up is left to the garbage collector, since
// its answer may still arrive.
var forwards = sync.Pool{New: func() any { return &forward{done: make(chan struct{}, 1)} }}

func newPeer(addr string, size int, timeout time.Duration, dial []grpc.DialOption) (*peer, error) {
	c, err := grpc.NewClient(addr, append(dial, grpc.WithConnectParams(reconnect))...)
	if err != nil {
		return nil, err
	}
	return &peer{addr: addr, conn: c, client: shardv1.NewPeerClient(c), size: size, timeout: timeout, msg: new(shardv1.Batch)}, nil
}

// do sends a call of reqs (or with reset, the Reset of the first) in the
// next batch and waits for its decisions, written to dst, or ctx. flags
// (FLAG_HOP, FLAG_HANDOFF) go on each of its requests.
func (p *peer) do(ctx context.Context, reqs []sluice.Request, reset bool, flags uint32, dst []sluice.Decision) error {
	f := forwards.Get().(*forward)
	if len(reqs) == 1 {
		f.one[0] = reqs[0]
		f.reqs, f.ds = f.one[:], f.oneD[:]
	} else {
		f.reqs, f.ds = append([]sluice.Request(nil), reqs...), make([]sluice.Decision, len(reqs))
	}
	f.reset, f.flags = reset, flags
	f.deadline, _ = ctx.Deadline()
	return p.wait(ctx, f, dst)
}

// wait sends f in the next batch and waits for its result or ctx.
func (p *peer) wait(ctx context.Context, f *forward, dst []sluice.Decision) error {
	p.mu.Lock()
	p.pending = append(p.pending, f)
	if p.inFlight < maxInFlight { // and so f is the only one pending
		// Sent on the caller's goroutine, under its ctx: no hand-off to
		// another goroutine and back, which is most of a lone forward's
		// latency here. Forwards that queue meanwhile go on a goroutine.
		p.inFlight++
		batch := p.takeLocked()
		p.mu.Unlock()
		p.send(ctx, batch)
		p.mu.Lock()
		if len(p.pending) > 0 {
			go p.run(p.takeLocked())
		} else {
			p.inFlight--
		}
		p.mu.Unlock()
	} else {
		p.mu.Unlock()
	}
	select {
	case <-f.done:
		err := f.err
		if err == nil && !f.reset {
			for i := range f.ds {
				f.ds[i].Limit = f.reqs[i].Limit
			}
			copy(dst, f.ds)
		}
		*f = forward{done: f.done}
		forwards.Put(f)
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *peer) takeLocked() []*forward {
	n := min(len(p.pending), p.size)
	batch := append([]*forward(nil), p.pending[:n]...)
	p.pending = p.pending[n:]
	return batch
}

// run sends batches until none are waiting.
func (p *peer) run(batch []*forward) {
	for {
		p.send(context.Background(), batch)
		p.mu.Lock()
		if len(p.pending) == 0 {
			p.inFlight--
			p.mu.Unlock()
			return
		}
		batch = p.takeLocked()
		p.mu.Unlock()
	}
}

// send sends batch and sets each forward's result or error, bounded by
// the timeout and by ctx.
func (p *peer) send(ctx context.Context, batch []*forward) {
	defer func() {
		for _, f := range batch {
			f.done <- struct{}{}
		}
	}()
	msg := p.msg // the in-flight send's own
	fill(msg, batch, time.Now)
	p.mu.Lock()
	ps := p.stream
	p.stream = nil
	p.mu.Unlock()
	out, ps, err := p.sendStream(ctx, ps, msg)
	p.mu.Lock()
	p.stream = ps
	p.mu.Unlock()
	if err == nil {
		err = spread(out, batch)
	}
	if err != nil {
		for _, f := range batch {
			f.err = fmt.Errorf("%w: %s: %w", ErrPeer, p.addr, err)
		}
	}
}

// spread gives each forward of batch its error or its decisions from out.
func spread(out *shardv1.BatchResult, batch []*forward) error {
	n := len(out.Allowed)
	for _, col := range []int{len(out.Remaining), len(out.RetryAfterUs), len(out.ResetAfterUs), len(out.DelayUs)} {
		if col != n {
			return fmt.Errorf("peer answered decision columns of %d and %d", n, col)
		}
	}
	k, ei := 0, 0 // the errors come in the order of their calls
	for i, f := range batch {
		if ei < len(out.Errors) && out.Errors[ei].Call == uint32(i) {
			f.err = callError(out.Errors[ei])
			ei++
			continue
		}
		if f.reset {
			continue
		}
		if k+len(f.ds) > n {
			return fmt.Errorf("peer answered %d decisions for more", n)
		}
		for j := range f.ds {
			f.ds[j] = sluice.Decision{Allowed: out.Allowed[k], Remaining: out.Remaining[k],
				RetryAfter: time.Duration(out.RetryAfterUs[k]) * time.Microsecond, ResetAfter: time.Duration(out.ResetAfterUs[k]) * time.Microsecond,
				Delay: time.Duration(out.DelayUs[k]) * time.Microsecond}
			k++
		}
	}
	if k != n || ei != len(out.Errors) {
		return fmt.Errorf("peer answered %d decisions for %d, %d errors for %d", n, k, len(out.Errors), ei)
	}
	return nil
}

// fill makes msg the batch of forwards, each call with the time its
// caller has left (Batch.budgets_us) by now, read once, and only when a
// forward has a deadline.
func fill(msg *shardv1.Batch, batch []*forward, now func() time.Time) {
	resetBatch(msg)
	var at time.Time
	for i, f := range batch {
		appendCall(msg, f.reqs, f.reset, f.flags)
		if f.deadline.IsZero() {
			continue
		}
		if at.IsZero() {
			at = now()
		}
		for len(msg.BudgetsUs) < i {
			msg.BudgetsUs = append(msg.BudgetsUs, 0)
		}
		msg.BudgetsUs = append(msg.BudgetsUs, budget(f.deadline.Sub(at)))
	}
}

// sendStream sends one batch on ps, or on a new stream when ps is nil, and
// reads its answer; it returns the stream if it can be used again. A batch
// not answered within the timeout or ctx, or any failure, ends the stream.
func (p *peer) sendStream(ctx context.Context, ps *peerStream, msg *shardv1.Batch) (*shardv1.BatchResult, *peerStream, error) {
	if ps != nil {
		value, next, unsent, err := p.exchange(ctx, ps, msg)
		if !unsent {
			return value, next, err
		}
		// The stream had ended while idle (the peer restarted, the
		// connection dropped): the batch never left, so a new stream
		// sends it.
	}
	sctx, cancel := context.WithCancel(context.Background())
	st, err := p.client.Take(sctx)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	value, next, _, err := p.exchange(ctx, &peerStream{stream: st, cancel: cancel}, msg)
	return value, next, err
}

// exchange sends msg on ps and reads the answer, within the timeout and
// ctx, and returns the stream if it can be used again. unsent reports that
// the stream had already ended when msg was to be sent: msg never reached
// the peer.
func (p *peer) exchange(ctx context.Context, ps *peerStream, msg *shardv1.Batch) (out *shardv1.BatchResult, next *peerStream, unsent bool, err error) {
	timer := time.AfterFunc(p.timeout, ps.cancel)
	stop := context.AfterFunc(ctx, ps.cancel) // the caller's deadline, on its own goroutine
	err = ps.stream.Send(msg)
	sendFailed := err != nil
	if err == nil {
		out, err = ps.stream.Recv()
	}
	timerFired, ctxFired := !timer.Stop(), !stop()
	fired := timerFired || ctxFired // then the stream is cancelled, answered or not
	switch {
	case err == nil && !fired:
		return out, ps, false, nil
	case err == nil:
		ps.cancel()
		return out, nil, false, nil
	}
	ps.cancel()
	switch {
	case ctxFired:
		err = ctx.Err()
	case timerFired:
		err = fmt.Errorf("no answer within %v", p.timeout)
	}
	return nil, nil, sendFailed && !fired, err
}

// announce tells the peer that from, this instance, has handed it every
// key it owns now, and with leaving that it leaves the ring; on a stream
// of its own.
func (p *peer) announce(from string, leaving bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	st, err := p.client.Take(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&shardv1.Batch{Version: shardv1.Version_VERSION_1, HandedOff: from, Leaving: leaving}); err != nil {
		return err
	}
	_, err = st.Recv()
	st.CloseSend()
	return err
}

func (p *peer) close() { p.conn.Close() }

// ErrPeer wraps a failure to reach a key's owner; the caller's fail mode
// decides.
var ErrPeer = errors.New("shard: owner unreachable")
