package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
)

const (
	maxInFlight  = 4                // script calls at once before calls queue, so that batches form
	maxBatch     = 64               // calls coalesced into one script call
	maxQueue     = 4096             // calls waiting; past it a call fails at once (ErrOverloaded)
	maxQueueWait = time.Millisecond // how long a queued call waits for a free slot before it goes anyway
	flushTimeout = 10 * time.Second // bounds a batch whose calls have no deadline
)

// call is one TakeAll: its requests, their keys (then the idempotency key,
// if the requests carry an ID), and where its decisions go.
type call struct {
	reqs     []sluice.Request
	dst      []sluice.Decision
	keys     []string
	deadline int64 // the caller's deadline in µs on Redis's clock; 0 for none
	err      error
	done     chan struct{} // a queued call's completion: one value, never closed

	// ctx is a queued call's caller's: a call whose caller has given up
	// by the time its batch is formed is never sent.
	ctx context.Context
	// abandoned is set when the caller gave up waiting: the call may
	// still be in a batch, so it is not reused.
	abandoned bool

	// one holds a Take's request, decision and keys, so that a Take
	// allocates the call and nothing else for them.
	one struct {
		req  [1]sluice.Request
		dst  [1]sluice.Decision
		keys [2]string
	}
}

// owned reports whether c's requests and decisions are c's own, not its
// caller's.
func (c *call) owned() bool { return &c.dst[0] == &c.one.dst[0] }

// batcher coalesces concurrent calls. Its fields are guarded by mu.
type batcher struct {
	mu       sync.Mutex
	queue    []*call
	inFlight int
	flushing bool          // a flusher is waiting to send the queue
	freed    chan struct{} // a slot was freed; made by newStore, never written again
}

// coalesce runs c in a script call, alone or with others, and waits for it
// or for ctx. While fewer than maxInFlight script calls run, a call goes
// alone, on its caller's goroutine and under its ctx (no hand-off, which
// is most of a lone call's latency here). Otherwise it queues, and a
// flusher sends the queue as one script call when a slot frees, or after
// maxQueueWait whatever the slots: on a near Redis, slots free within that
// time and calls batch, dividing the script's fixed cost in Redis; on a
// far one, a queued call pays one round trip, not the wait for another
// call's round trip first. A queued call still runs when its caller gives
// up, unless it was not sent yet: so it works on copies of the caller's
// requests and decisions. The queue is bounded: a call that finds it full
// fails at once with ErrOverloaded.
func (s *Store) coalesce(ctx context.Context, client rueidis.Client, c *call) error {
	b := &s.batch
	b.mu.Lock()
	if b.inFlight < maxInFlight && len(b.queue) == 0 {
		b.inFlight++
		b.mu.Unlock()
		one := [1]*call{c}
		s.send(ctx, client, "-1", one[:])
		b.release()
		return c.err
	}
	if len(b.queue) >= maxQueue {
		b.mu.Unlock()
		return ErrOverloaded
	}
	dst := c.dst
	if !c.owned() {
		c.reqs = slices.Clone(c.reqs)
		c.dst = make([]sluice.Decision, len(c.reqs))
	}
	if c.done == nil {
		c.done = make(chan struct{}, 1)
	}
	c.ctx = ctx
	b.queue = append(b.queue, c)
	if !b.flushing {
		b.flushing = true
		go s.flush(client)
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		copy(dst, c.dst)
		return c.err
	case <-ctx.Done():
		c.abandoned = true
		return fmt.Errorf("redisstore: %w", ctx.Err())
	}
}

// release frees a script call's slot.
func (b *batcher) release() {
	b.mu.Lock()
	b.inFlight--
	b.mu.Unlock()
	select {
	case b.freed <- struct{}{}:
	default:
	}
}

// flush sends the queue, in batches of up to maxBatch, each when a slot is
// free or maxQueueWait has passed since the flusher started, and returns
// once the queue is empty.
func (s *Store) flush(client rueidis.Client) {
	b := &s.batch
	wait := time.NewTimer(maxQueueWait)
	defer wait.Stop()
	late := false
	for {
		b.mu.Lock()
		if b.inFlight >= maxInFlight && !late {
			b.mu.Unlock()
			select {
			case <-b.freed:
			case <-wait.C:
				late = true
			}
			continue
		}
		batch := b.takeLocked()
		if len(batch) == 0 {
			b.flushing = false
			b.mu.Unlock()
			return
		}
		b.inFlight++
		b.mu.Unlock()
		go s.runBatch(client, batch)
	}
}

// takeLocked takes up to maxBatch calls off the queue, leaving out those
// whose caller has given up: they are never sent. The caller holds b.mu.
func (b *batcher) takeLocked() []*call {
	var batch []*call
	for len(b.queue) > 0 && len(batch) < maxBatch {
		c := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		if c.ctx.Err() != nil {
			continue // its caller was answered: nobody is charged for it
		}
		batch = append(batch, c)
	}
	if len(b.queue) == 0 {
		b.queue = b.queue[:0:0] // let the drained array go
	}
	return batch
}

// runBatch runs a batch of queued calls, under the latest of their
// deadlines, and wakes their callers.
func (s *Store) runBatch(client rueidis.Client, batch []*call) {
	var latest time.Time
	for _, c := range batch {
		dl, ok := c.ctx.Deadline()
		if !ok {
			latest = time.Now().Add(flushTimeout)
			break
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	s.run(ctx, client, client, "-1", batch)
	cancel()
	for _, c := range batch {
		c.ctx = nil
		c.done <- struct{}{}
	}
	s.batch.release()
}

// send runs calls as run does, off Cluster: on the store's own connection
// (ownConn) when it is on and free, else on the shared one. A call alone
// on the shared connection is written from its caller's goroutine only
// until two calls first overlap on it: rueidis then hands every call on it
// to a writer goroutine for good, which costs a lone caller a goroutine
// hand-off each way, a third of its round trip to a near Redis. The own
// connection carries one thing at a time, so a lone caller's call is
// always written and read from its own goroutine, however busy the store
// was before.
//
// An error that is not Redis's answer (a broken connection, a timeout
// that abandoned the reply) gives the connection back: calls go on the
// shared one until the clock's next measurement, a second later, opens
// another. A connection that cannot be made (maxclients, say) is thus
// never in a caller's way. Under Sentinel, a connection to a master the
// client has left is turned off as well (clock.follow).
func (s *Store) send(ctx context.Context, client rueidis.Client, now string, calls []*call) {
	s.clock.follow(client)
	dc, ok := s.clock.own.tryCall()
	if !ok {
		s.run(ctx, client, client, now, calls)
		return
	}
	if err := s.run(ctx, client, dc, now, calls); err != nil {
		s.clock.ownFailed(ctx, err)
		return
	}
	s.clock.own.called(nil)
}

// run executes calls in one call of the decision function, by via (see
// exec), and sets each call's decisions or error. It returns the error of
// the call to Redis when Redis did not answer it (a broken connection, a
// timeout), nil when it did, whatever the answer.
func (s *Store) run(ctx context.Context, client rueidis.Client, via rueidis.CommandClient, now string, calls []*call) (unanswered error) {
	keys := calls[0].keys
	if len(calls) > 1 {
		n := 0
		for _, c := range calls {
			n += len(c.keys)
		}
		keys = make([]string, 0, n)
		for _, c := range calls {
			keys = append(keys, c.keys...)
		}
	}
	vals, err := s.exec(ctx, client, via, keys, s.encode(now, calls))
	var answered *rueidis.RedisError
	if err != nil && (!errors.As(err, &answered) || readOnly(answered)) {
		unanswered = err
		if answered != nil {
			s.replicaNow(client, err)
		}
	}
	want := 0
	for _, c := range calls {
		want += 3 * len(c.reqs)
	}
	if err == nil && len(vals) != want {
		err = fmt.Errorf("script answered %d values for %d requests", len(vals), want/3)
	}
	if err != nil {
		err = fmt.Errorf("redisstore: %w", err)
		for _, c := range calls {
			c.err = err
		}
		return unanswered
	}
	for _, c := range calls {
		c.err = decode(vals[:3*len(c.reqs)], c.reqs, c.dst)
		vals = vals[3*len(c.reqs):]
	}
	return nil
}

// readOnly reports whether e says the server is a replica now: a master
// demoted without its clients disconnected (sentinels reconfigured, or a
// missed failover) answers every write with READONLY. The store's own
// connection to it is then given back, as a broken one is, and the next
// is opened to the master the client knows by then.
func readOnly(e *rueidis.RedisError) bool { return strings.HasPrefix(e.Error(), "READONLY ") }

// encode returns the arguments of calls, as scripts/take.lua reads them:
// now, the limits, then per call its size (negated when it has an
// idempotency key) and its deadline, and per request its limit's index and
// its cost (negated when forced).
func (s *Store) encode(now string, calls []*call) []string {
	var seen [4]sluice.Limit
	limits, n := seen[:0], 0
	for _, c := range calls {
		for i := range c.reqs {
			if limitIndex(limits, c.reqs[i].Limit) == 0 {
				limits = append(limits, c.reqs[i].Limit)
			}
		}
		n += len(c.reqs)
	}
	args := make([]string, 0, 2+len(limits)+2*len(calls)+2*n)
	args = append(args, now, intArg(int64(len(limits))))
	for _, l := range limits {
		args = append(args, s.limitArg(l, now))
	}
	for _, c := range calls {
		size := int64(len(c.reqs))
		if len(c.keys) > len(c.reqs) {
			size = -size
		}
		args = append(args, intArg(size), intArg(c.deadline))
		for i := range c.reqs {
			r := &c.reqs[i]
			if !r.Refund.IsZero() {
				args = append(args, intArg(int64(limitIndex(limits, r.Limit))), s.refundArg(now, r))
				continue
			}
			cost := r.Cost
			if r.Forced() && cost > 0 {
				cost = -cost
			}
			args = append(args, intArg(int64(limitIndex(limits, r.Limit))), intArg(cost))
		}
	}
	return args
}

// refundArg returns the cost argument of a refund: 'r' COST '@' TAKEN
// (scripts/take.lua), TAKEN on Redis's clock when the call's now is
// Redis's ("-1"): the refunded take was decided on it. The offset is as
// exact as half the round trip it was measured over, so for a window or
// a log TAKEN is put that much earlier: the take's own entry is then at
// or after it. A bucket gives back less what has refilled since TAKEN,
// which its caller puts past the take (sluice's refundTime): it is put
// that much later, or a key refunded back to back would drift below its
// capacity by the clock's uncertainty.
func (s *Store) refundArg(now string, r *sluice.Request) string {
	taken := r.Refund.UnixMicro()
	if now == "-1" && s.clock.known.Load() {
		spread := s.clock.spread.Load()
		switch r.Limit.Algorithm.Resolved() {
		case sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket:
		default:
			spread = -spread
		}
		taken += s.clock.offset.Load() + spread
	}
	return "r" + strconv.FormatInt(r.Cost, 10) + "@" + strconv.FormatInt(taken, 10)
}

// limitIndex returns the 1-based index of l in limits, or 0. A call holds
// few limits.
func limitIndex(limits []sluice.Limit, l sluice.Limit) int {
	for i := range limits {
		if limits[i] == l {
			return i + 1
		}
	}
	return 0
}

// expiredReply is scripts/take.lua's EXPIRED.
const expiredReply = "sluice: deadline passed before the call reached Redis; not applied"

// decode reads three values per request (scripts/take.lua): remaining,
// negated minus one when denied; Delay when allowed, RetryAfter when
// denied; ResetAfter. A string in the first place is the error of the
// request's group.
func decode(vals []rueidis.RedisMessage, reqs []sluice.Request, dst []sluice.Decision) error {
	for i := range reqs {
		r, err := vals[3*i].AsInt64()
		if err != nil {
			if msg, serr := vals[3*i].ToString(); serr == nil {
				if msg == expiredReply {
					return ErrExpired
				}
				return errors.New("redisstore: " + msg)
			}
			return fmt.Errorf("redisstore: unexpected reply: %w", err)
		}
		wait, err := vals[3*i+1].AsInt64()
		if err != nil {
			return fmt.Errorf("redisstore: unexpected reply: %w", err)
		}
		reset, err := vals[3*i+2].AsInt64()
		if err != nil {
			return fmt.Errorf("redisstore: unexpected reply: %w", err)
		}
		res := algorithm.Result{Allowed: r >= 0, Remaining: r, Delay: wait, ResetAfter: reset}
		if !res.Allowed {
			res.Remaining, res.RetryAfter, res.Delay = -1-r, wait, 0
		}
		dst[i] = res.Decision(reqs[i].Limit)
	}
	return nil
}
