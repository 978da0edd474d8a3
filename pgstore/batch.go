package pgstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

const (
	maxBatch     = 64               // calls coalesced into one call of the take function
	maxQueue     = 4096             // calls waiting; past it a call fails at once (ErrOverloaded)
	flushTimeout = 10 * time.Second // bounds a batch whose calls have no deadline
)

// call is one TakeAll: its requests and where its decisions go.
type call struct {
	reqs []sluice.Request
	dst  []sluice.Decision
	err  error
	ctx  context.Context // a queued call's caller's
	done chan struct{}   // a queued call's completion
}

// batcher coalesces concurrent calls. Its fields are guarded by mu.
type batcher struct {
	mu          sync.Mutex
	maxInFlight int
	inFlight    int
	queue       []*call
}

// coalesce runs c in a call of the take function, alone or with others,
// and waits for it or for ctx. While fewer than maxInFlight calls run, c
// goes alone, on its caller's goroutine and under its ctx. Otherwise it
// queues, and the next call to finish sends the queue (up to maxBatch
// calls) as one: concurrent checks of one hot key then take its row lock
// once per batch. A queued call runs even when its caller gives up after
// the batch is formed, so it works on copies of the caller's requests
// and decisions.
func (s *Store) coalesce(ctx context.Context, c *call) error {
	b := &s.batch
	b.mu.Lock()
	if b.inFlight < b.maxInFlight && len(b.queue) == 0 {
		b.inFlight++
		b.mu.Unlock()
		s.run(ctx, s.pool, []*call{c})
		s.next()
		return c.err
	}
	if len(b.queue) >= maxQueue {
		b.mu.Unlock()
		return ErrOverloaded
	}
	dst := c.dst
	c.reqs = slices.Clone(c.reqs)
	c.dst = make([]sluice.Decision, len(c.reqs))
	c.ctx, c.done = ctx, make(chan struct{}, 1)
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		copy(dst, c.dst)
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("pgstore: %w", ctx.Err())
	}
}

// next hands the slot of a finished call to the queue: it runs the
// queue's next batch in a goroutine of its own, or frees the slot.
func (s *Store) next() {
	b := &s.batch
	b.mu.Lock()
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
		b.queue = b.queue[:0:0]
	}
	if len(batch) == 0 {
		b.inFlight--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go s.runBatch(batch)
}

// runBatch runs a batch of queued calls under the latest of their
// deadlines, wakes their callers, and hands its slot on.
func (s *Store) runBatch(batch []*call) {
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
	s.run(ctx, s.pool, batch)
	cancel()
	for _, c := range batch {
		c.done <- struct{}{}
	}
	s.next()
}
