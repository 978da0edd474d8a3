package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
)

const (
	maxInFlight  = 2                // script calls running at once per store: few, so batches stay large
	maxBatch     = 64               // calls coalesced into one script call
	flushTimeout = 10 * time.Second // bounds a script call no caller waits for
)

// call is one TakeAll: its keys and its group's arguments (size first), and
// where its decisions go.
type call struct {
	reqs []sluice.Request
	dst  []sluice.Decision
	keys []string
	args []string
	err  error
	done chan struct{}
}

// batcher coalesces concurrent calls. Its fields are guarded by mu.
type batcher struct {
	mu       sync.Mutex
	queue    []*call
	inFlight int
}

// coalesce runs c in a script call, alone or with others, and waits for it or
// for ctx. Calls queue only while maxInFlight script calls run; so a call
// that finds fewer running goes alone, on its caller's goroutine and under
// its ctx (no hand-off, which is most of a lone call's latency here). A
// queued call goes with the others queued, on a flushing goroutine, and
// still runs when its caller gives up.
func (s *Store) coalesce(ctx context.Context, client rueidis.Client, c *call) error {
	b := &s.batch
	b.mu.Lock()
	if b.inFlight < maxInFlight { // and so nothing is queued
		b.inFlight++
		b.mu.Unlock()
		one := [1]*call{c}
		s.run(ctx, client, "-1", one[:])
		b.mu.Lock()
		if len(b.queue) > 0 {
			go s.flush(client, b.takeLocked()) // calls queued meanwhile
		} else {
			b.inFlight--
		}
		b.mu.Unlock()
		return c.err
	}
	c.done = make(chan struct{})
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("redisstore: %w", ctx.Err())
	}
}

func (b *batcher) takeLocked() []*call {
	n := min(len(b.queue), maxBatch)
	batch := append([]*call(nil), b.queue[:n]...)
	b.queue = b.queue[n:]
	return batch
}

// flush runs batches until the queue is empty.
func (s *Store) flush(client rueidis.Client, batch []*call) {
	b := &s.batch
	for {
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		s.run(ctx, client, "-1", batch)
		cancel()
		for _, c := range batch {
			close(c.done)
		}
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.inFlight--
			b.mu.Unlock()
			return
		}
		batch = b.takeLocked()
		b.mu.Unlock()
	}
}

// run executes calls in one call of the decision function and sets each
// call's decisions or error.
func (s *Store) run(ctx context.Context, client rueidis.Client, now string, calls []*call) {
	var keys, args []string
	if len(calls) == 1 {
		keys = calls[0].keys
		args = append([]string{now}, calls[0].args...)
	} else {
		args = []string{now}
		for _, c := range calls {
			keys = append(keys, c.keys...)
			args = append(args, c.args...)
		}
	}
	vals, err := s.exec(ctx, client, keys, args)
	want := 0
	for _, c := range calls {
		want += 5 * len(c.reqs)
	}
	if err == nil && len(vals) != want {
		err = fmt.Errorf("script answered %d values for %d requests", len(vals), want/5)
	}
	if err != nil {
		err = fmt.Errorf("redisstore: %w", err)
		for _, c := range calls {
			c.err = err
		}
		return
	}
	for _, c := range calls {
		c.err = decode(vals[:5*len(c.reqs)], c.reqs, c.dst)
		vals = vals[5*len(c.reqs):]
	}
}

// decode reads five values per request.
func decode(vals []rueidis.RedisMessage, reqs []sluice.Request, dst []sluice.Decision) error {
	for i := range reqs {
		var v [5]int64
		for j := range v {
			n, err := vals[5*i+j].AsInt64()
			if err != nil {
				if j == 1 {
					if msg, serr := vals[5*i+j].ToString(); serr == nil {
						return errors.New("redisstore: " + msg)
					}
				}
				return fmt.Errorf("redisstore: unexpected reply: %w", err)
			}
			v[j] = n
		}
		if v[0] == -1 {
			return errors.New("redisstore: script failed")
		}
		dst[i] = algorithm.Result{
			Allowed: v[0] == 1, Remaining: v[1], RetryAfter: v[2], ResetAfter: v[3], Delay: v[4],
		}.Decision(reqs[i].Limit)
	}
	return nil
}
