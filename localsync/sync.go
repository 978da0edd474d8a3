package localsync

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// maxConcurrentPushes bounds the calls in flight during one sync; the Redis
// store pipelines and coalesces them.
const maxConcurrentPushes = 64

// push is one key's sync: its cost under its ID (0 to only pull).
type push struct {
	id  ident
	req sluice.Request
	d   sluice.Decision
	err error
}

// Sync pushes every key's unsynced cost and pulls back the global
// remaining of every key in use. The sync loop calls it every Interval.
func (s *Store) Sync(ctx context.Context) error {
	start := time.Now()
	now := s.opts.Clock()
	pushes := s.collect(now)
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxConcurrentPushes)
	for _, p := range pushes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
			p.d, p.err = s.opts.Shared.Take(cctx, p.req)
			cancel()
		})
	}
	wg.Wait()
	err := s.absorb(pushes, now)
	if s.opts.OnSync != nil {
		s.opts.OnSync(time.Since(start), err)
	}
	return err
}

// collect lists the pushes of this sync: an unacknowledged push again
// under its own ID, else the pending cost under a new ID, else a pull
// (cost 0) for keys used within their reset time. Idle, settled keys are
// forgotten. It locks s.mu.
func (s *Store) collect(now time.Time) []*push {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = now.Add(s.opts.Interval)
	var out []*push
	for id, e := range s.entries {
		req := sluice.Request{Key: id.key, Limit: e.limit}
		switch {
		case e.inflight > 0:
			req.Cost, req.Force, req.ID = e.inflight, true, e.pushID
		case e.pending > 0:
			e.inflight, e.pending = e.pending, 0
			e.pushID = s.instance + ":" + strconv.FormatUint(s.seq.Add(1), 36)
			req.Cost, req.Force, req.ID = e.inflight, true, e.pushID
		case now.Sub(e.used) > max(e.resetAt.Sub(e.used), 0)+10*s.opts.Interval:
			delete(s.entries, id) // idle and back to full: nothing to keep
			continue
		}
		out = append(out, &push{id: id, req: req})
	}
	return out
}

// absorb records the shared store's answers. It locks s.mu.
func (s *Store) absorb(pushes []*push, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, p := range pushes {
		e := s.entries[p.id]
		if e == nil {
			continue
		}
		if p.err != nil {
			// Kept in inflight, retried under the same ID: the shared store
			// applies it once, whether or not this attempt reached it.
			errs = append(errs, p.err)
			continue
		}
		if p.req.ID == e.pushID {
			e.inflight, e.pushID = 0, ""
		}
		e.remaining = share(p.d.Remaining, s.opts.Instances)
		e.resetAt = now.Add(p.d.ResetAfter)
		e.retryAt = time.Time{}
		if !p.d.Allowed && p.req.Cost == 0 {
			e.retryAt = now.Add(p.d.RetryAfter)
		}
	}
	return errors.Join(errs...)
}
