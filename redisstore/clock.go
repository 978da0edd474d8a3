package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// clock keeps the offset between this process's clock and Redis's, so
// that a caller's deadline can travel with its call in Redis's time: a
// call that reaches Redis after its caller was answered is then not
// applied (scripts/take.lua), and nobody is charged for a check they were
// refused. The offset is measured with TIME, halfway through the round
// trip; until it is known, calls carry no deadline.
//
// The first call measures it itself, before it is sent, on the connection
// the calls share, so that it and every call after it carry a deadline.
// Later measurements, every clockRefresh, run beside the calls on a
// connection of their own (rueidis' Dedicated): a command sent on the
// shared connection while a call is under way would turn it, for good,
// from writing each call from its caller's goroutine to queueing it for
// a writer goroutine, which costs a lone caller's every call a goroutine
// hand-off each way. A measurement there that succeeds makes that
// connection the one a lone call goes on (Store.send).
type clock struct {
	offset   atomic.Int64 // Redis µs minus local µs
	spread   atomic.Int64 // half the round trip it was measured over (µs): how far off it may be
	known    atomic.Bool
	next     atomic.Int64 // local Unix ns of the next measurement; 0: at the next call
	measures atomic.Bool  // a measurement is running

	// failures counts the measurements that failed (Store.ClockErrors);
	// failing, those since the last that did not. log, if set, hears of
	// the first of a run of failures, of every 60th after it (about one a
	// minute, as each is retried a second later), and of the measurement
	// that ends the run.
	failures atomic.Uint64
	failing  atomic.Int64
	log      *slog.Logger

	// own is the connection refreshes run on, which a lone call may use
	// too (Store.send).
	own ownConn
	// masterCheck is when (local Unix ns) follow next compares own's
	// master with the client's, under Sentinel.
	masterCheck atomic.Int64
}

// masterCheckEvery is how often, at most, a lone call under Sentinel
// checks that the own connection is to the client's master.
const masterCheckEvery = 100 * time.Millisecond

// clockLogEvery is how many failures in a row go by between two lines.
const clockLogEvery = 60

const clockRefresh = 10 * time.Second

// deadline returns ctx's deadline in µs on Redis's clock, or 0 when ctx
// has none or the offset is not known yet. It measures the offset when a
// measurement is due (start).
func (c *clock) deadline(ctx context.Context, client rueidis.Client) int64 {
	if now := time.Now().UnixNano(); now >= c.next.Load() {
		c.start(ctx, client, now)
	}
	dl, ok := ctx.Deadline()
	if !ok || !c.known.Load() {
		return 0
	}
	return dl.UnixMicro() + c.offset.Load()
}

// start measures the offset unless a measurement is running: inline on
// ctx while it is not known, else in the background.
func (c *clock) start(ctx context.Context, client rueidis.Client, now int64) {
	if !c.measures.CompareAndSwap(false, true) {
		return
	}
	c.next.Store(now + int64(clockRefresh))
	if c.known.Load() {
		go c.measure(context.Background(), client, true)
	} else {
		c.measure(ctx, client, false)
	}
}

// answered looks at a call's error: Redis found the call past its
// deadline (ErrExpired) while, by this process's clock, the deadline is
// still ahead by more than the offset may be off. Then the offset is wrong
// (Redis failed over to a host whose clock is elsewhere, or its clock
// jumped), and every call would go on expiring until the next refresh: it
// is measured again now.
func (c *clock) answered(ctx context.Context, client rueidis.Client, err error) {
	if err != ErrExpired {
		return
	}
	now := time.Now()
	if dl, ok := ctx.Deadline(); ok && dl.Sub(now).Microseconds() > c.spread.Load() {
		c.start(ctx, client, now.UnixNano())
	}
}

// around returns the call's now in µs, or when it is Redis's ("-1"),
// the estimate of Redis's clock: local time plus the offset when known.
func (c *clock) around(now string) int64 {
	if t, err := strconv.ParseInt(now, 10, 64); err == nil && t >= 0 {
		return t
	}
	return time.Now().UnixMicro() + c.offset.Load()
}

// measure reads Redis's TIME and sets the offset: on the shared
// connection, or on one of its own when dedicated.
func (c *clock) measure(ctx context.Context, client rueidis.Client, dedicated bool) {
	defer c.measures.Store(false)
	// Two round trips and perhaps a dial, on a Redis that may be far.
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	var sent, got time.Time
	var vals []int64
	read := func(c rueidis.CoreClient) (err error) {
		sent = time.Now()
		vals, err = c.Do(ctx, c.B().Time().Build()).AsIntSlice()
		got = time.Now()
		return err
	}
	var err error
	if dedicated {
		// The first TIME may wait for the connection to be made: the
		// second is the one timed.
		dc := c.own.measure(client)
		if err = read(dc); err == nil {
			err = read(dc)
		}
		c.own.measured(err)
	} else {
		err = read(client)
	}
	if err == nil && len(vals) != 2 {
		err = fmt.Errorf("TIME answered %d numbers, not 2", len(vals))
	}
	if err != nil {
		c.next.Store(time.Now().Add(time.Second).UnixNano()) // try again soon
		// Where the caller's own context ended it, it is not the store's.
		if caller.Err() == nil {
			c.failed(err)
		}
		return
	}
	redisNow := vals[0]*1_000_000 + vals[1]
	mid := sent.Add(got.Sub(sent) / 2).UnixMicro()
	c.offset.Store(redisNow - mid)
	c.spread.Store(got.Sub(sent).Microseconds()/2 + 1)
	c.known.Store(true)
	if !dedicated {
		c.next.Store(0) // measured on its own connection at the next call, which a lone call may then use
	}
	if n := c.failing.Swap(0); n > 0 && c.log != nil {
		c.log.Info("redisstore: Redis's clock measured again", "failures", n)
	}
}

// follow turns the own connection off when it is to a server that is no
// longer the client's master (Sentinel moved the client), so that lone
// calls go on the shared connection, which follows the master, and has
// the clock measured at the next call on a new connection, to the new
// master, which turns it on again. It looks at most every
// masterCheckEvery, and not at all off Sentinel.
func (c *clock) follow(client rueidis.Client) {
	was := c.own.master.Load()
	if was == nil {
		return
	}
	now := time.Now().UnixNano()
	if now < c.masterCheck.Load() {
		return
	}
	c.masterCheck.Store(now + int64(masterCheckEvery))
	if !c.own.works.Load() || !c.own.stale(client) {
		return
	}
	c.own.works.Store(false)
	c.next.Store(0)
	if c.log != nil {
		c.log.Info("redisstore: the master moved (Sentinel): the store's own connection follows it", "from", *was, "to", masterOf(client))
	}
}

// ownFailed gives the own connection back after a call on it failed with
// err, a failure of the connection, and has the clock measured on a new
// one a second later, which turns it on again if it works. The failure is
// logged unless it is the caller's context ending or the client closing.
func (c *clock) ownFailed(ctx context.Context, err error) {
	if !c.own.called(err) {
		return
	}
	if errors.Is(err, rueidis.ErrClosing) {
		return
	}
	c.next.Store(time.Now().Add(time.Second).UnixNano())
	if c.log != nil && ctx.Err() == nil {
		c.log.Warn("redisstore: a call on the store's own connection failed; calls go on the shared connection until Redis's clock is measured on a new one",
			"error", err)
	}
}

// failed counts a failed measurement and logs it, sampled.
func (c *clock) failed(err error) {
	c.failures.Add(1)
	n := c.failing.Add(1)
	if c.log == nil || (n != 1 && n%clockLogEvery != 0) {
		return
	}
	consequence := "calls carry no deadline until it is measured"
	if c.known.Load() {
		consequence = "calls' deadlines keep the last measurement"
	}
	c.log.Warn("redisstore: measuring Redis's clock with TIME failed; "+consequence+"; retrying every second",
		"error", err, "failures", n)
}
