package redisstore

import (
	"context"
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
// trip, at first use and every clockRefresh after; until it is known,
// calls carry no deadline.
//
// It is measured on a connection of its own (rueidis' Dedicated), never
// the one the calls share: a command sent there while a call is under way
// would turn the shared connection, for good, from writing each call from
// its caller's goroutine to queueing it for a writer goroutine, which
// costs a lone caller's every call a goroutine hand-off each way.
type clock struct {
	offset   atomic.Int64 // Redis µs minus local µs
	spread   atomic.Int64 // half the round trip it was measured over (µs): how far off it may be
	known    atomic.Bool
	next     atomic.Int64 // local Unix ns of the next measurement
	measures atomic.Bool  // a measurement is running
}

const clockRefresh = 10 * time.Second

// start measures the offset now, in the background, so that the first
// calls already carry their deadlines.
func (c *clock) start(client rueidis.Client) {
	if c.measures.CompareAndSwap(false, true) {
		c.next.Store(time.Now().Add(clockRefresh).UnixNano())
		go c.measure(client)
	}
}

// deadline returns ctx's deadline in µs on Redis's clock, or 0 when ctx
// has none or the offset is not known yet.
func (c *clock) deadline(ctx context.Context, client rueidis.Client) int64 {
	if now := time.Now().UnixNano(); now >= c.next.Load() && c.measures.CompareAndSwap(false, true) {
		c.next.Store(now + int64(clockRefresh))
		go c.measure(client)
	}
	dl, ok := ctx.Deadline()
	if !ok || !c.known.Load() {
		return 0
	}
	return dl.UnixMicro() + c.offset.Load()
}

// around returns the call's now in µs, or when it is Redis's ("-1"),
// the estimate of Redis's clock: local time plus the offset when known.
func (c *clock) around(now string) int64 {
	if t, err := strconv.ParseInt(now, 10, 64); err == nil && t >= 0 {
		return t
	}
	return time.Now().UnixMicro() + c.offset.Load()
}

// measure reads Redis's TIME and sets the offset.
func (c *clock) measure(client rueidis.Client) {
	defer c.measures.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var sent, got time.Time
	var vals []int64
	err := client.Dedicated(func(dc rueidis.DedicatedClient) error {
		// The first TIME may wait for the connection to be made: only the
		// second is timed.
		for range 2 {
			sent = time.Now()
			var err error
			if vals, err = dc.Do(ctx, dc.B().Time().Build()).AsIntSlice(); err != nil {
				return err
			}
			got = time.Now()
		}
		return nil
	})
	if err != nil || len(vals) != 2 {
		c.next.Store(got.Add(time.Second).UnixNano()) // try again soon
		return
	}
	redisNow := vals[0]*1_000_000 + vals[1]
	mid := sent.Add(got.Sub(sent) / 2).UnixMicro()
	c.offset.Store(redisNow - mid)
	c.spread.Store(got.Sub(sent).Microseconds()/2 + 1)
	c.known.Store(true)
}
