// Package localsync is the "local + sync" distributed mode: each instance
// decides from local state with no round trip per request, and every
// Interval pushes each key's locally admitted cost to a shared Store (Redis)
// and pulls back the global remaining, so that it sees the other instances'
// traffic one interval late.
//
// Between syncs an instance admits at most the global remaining it last
// saw divided by Instances, so the instances together stay close to the
// limit; what they can overshoot is bounded by what the others admitted in
// the same interval before it was pushed (measured in docs/distributed.md).
// Refills and new windows are seen at the next sync, so a quiet key may be
// under-admitted for up to one interval.
//
// It works with every algorithm that counts (fixed window, sliding log,
// sliding window counter, token bucket, GCRA). It refuses the leaky bucket:
// its shaping Delay needs the one central queue.
//
// Pushes are forced (sluice.Request.Force: the local admissions happened)
// and idempotent (sluice.Request.ID): a push whose reply was lost is
// retried with the same ID, so nothing is counted twice, and while the
// shared store is down the unsynced cost is kept (for up to MaxKeys keys)
// and pushed when it is back, so nothing is lost.
package localsync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Options configures a Store.
type Options struct {
	// Shared is the store every instance syncs with. Required.
	Shared sluice.Store
	// Interval between syncs. Default 100ms.
	Interval time.Duration
	// Instances sharing each limit: an instance admits at most 1/Instances
	// of the global remaining between syncs. Default 1.
	Instances int
	// MaxKeys bounds the keys held, synced or not. Default 1,000,000.
	MaxKeys int
	// Timeout bounds each sync call. Default Interval.
	Timeout time.Duration
	// OnSync, if set, is called after every sync with its duration and its
	// error (nil when every push and pull was answered), for metrics and
	// logs. It must be cheap and safe for concurrent use.
	OnSync func(took time.Duration, err error)
	// Clock is the time source. Default time.Now.
	Clock func() time.Time
}

// ErrCountAll is returned for a limit that counts every request
// (sluice.Limit.CountAll): local-sync counts admissions locally and pushes
// them, and a client's refused requests would need the same path to count.
var ErrCountAll = errors.New("localsync: count all is not supported: use the shared store directly")

// ErrLeakyBucket is returned for a leaky bucket limit: shaping needs the
// central queue.
var ErrLeakyBucket = errors.New("localsync: the leaky bucket shapes through one central queue; use the shared store directly")

// Store decides locally and syncs with a shared Store. It is safe for
// concurrent use. Close it to stop syncing.
type Store struct {
	opts     Options
	instance string // prefix of push IDs
	seq      atomic.Uint64

	mu      sync.Mutex
	entries map[ident]*entry
	next    time.Time // next sync

	stop chan struct{}
	done chan struct{}
	// Dropped counts keys forgotten with unsynced cost because MaxKeys was
	// reached while the shared store was down.
	dropped atomic.Int64
}

var _ sluice.Store = (*Store)(nil)

type ident struct {
	key    string
	alg    sluice.Algorithm
	period time.Duration
	zone   *time.Location
}

// entry is one key's local view. Fields guarded by Store.mu.
type entry struct {
	limit     sluice.Limit
	remaining int64     // this instance's share of the global remaining, at the last sync
	pending   int64     // admitted here since, not yet pushed
	inflight  int64     // pushed under inflightID, not yet acknowledged
	pushID    string    // the ID of the inflight push, reused on retry
	retryAt   time.Time // the global RetryAfter, when the shared store denied
	resetAt   time.Time
	used      time.Time
}

// New starts a Store syncing every Interval.
func New(opts Options) (*Store, error) {
	if opts.Shared == nil {
		return nil, errors.New("localsync: no Shared store")
	}
	if opts.Interval <= 0 {
		opts.Interval = 100 * time.Millisecond
	}
	if opts.Instances <= 0 {
		opts.Instances = 1
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 1_000_000
	}
	if opts.Timeout <= 0 {
		opts.Timeout = opts.Interval
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	var b [8]byte
	rand.Read(b[:])
	s := &Store{
		opts: opts, instance: hex.EncodeToString(b[:]), entries: map[ident]*entry{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	s.next = opts.Clock().Add(opts.Interval)
	go s.loop()
	return s, nil
}

func (s *Store) loop() {
	defer close(s.done)
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sync(context.Background())
		}
	}
}

// Close stops syncing after one last push.
func (s *Store) Close() error {
	close(s.stop)
	<-s.done
	return s.Sync(context.Background())
}

// Dropped returns how many keys were forgotten with unsynced cost.
func (s *Store) Dropped() int64 { return s.dropped.Load() }

// Take decides req from the local view, without a round trip. A refund
// (Request.Refund) gives back first what was admitted here and not pushed
// yet, and sends the rest to the shared store as a refund of its own.
func (s *Store) Take(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	if !req.Refund.IsZero() {
		return s.refund(ctx, req)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, e, err := s.decideLocked(&req)
	if err == nil && d.Allowed {
		e.pending += req.Cost
	}
	return d, err
}

func (s *Store) refund(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	if err := req.Validate(); err != nil {
		return sluice.Decision{}, err
	}
	s.mu.Lock()
	rest := req.Cost
	d := sluice.Decision{Allowed: true, Limit: req.Limit, Remaining: req.Limit.Capacity()}
	if e := s.entries[ident{req.Key, req.Limit.Algorithm.Resolved(), req.Limit.Period, req.Limit.Zone}]; e != nil {
		give := min(rest, e.pending)
		e.pending -= give
		rest -= give
		d.Remaining = max(e.remaining-e.pending-e.inflight, 0)
	}
	s.mu.Unlock()
	if rest == 0 {
		return d, nil
	}
	req.Cost = rest
	return s.opts.Shared.Take(ctx, req)
}

// TakeAll decides reqs locally, all-or-nothing.
func (s *Store) TakeAll(_ context.Context, reqs []sluice.Request, dst []sluice.Decision) error {
	if len(dst) < len(reqs) {
		return fmt.Errorf("localsync: TakeAll: %d decisions for %d requests", len(dst), len(reqs))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	entries := make([]*entry, len(reqs))
	all := true
	for i := range reqs {
		for j := range i {
			if reqs[j].Key == reqs[i].Key && reqs[j].Limit.SameState(reqs[i].Limit) {
				return fmt.Errorf("%w: requests %d and %d", sluice.ErrDuplicateRequest, j, i)
			}
		}
		if !reqs[i].Refund.IsZero() {
			return fmt.Errorf("%w: request %d", sluice.ErrRefundInBatch, i)
		}
		var err error
		if dst[i], entries[i], err = s.decideLocked(&reqs[i]); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		all = all && dst[i].Allowed
	}
	for i, e := range entries {
		switch {
		case all:
			e.pending += reqs[i].Cost
		case dst[i].Allowed: // nothing taken: report the untouched remaining
			dst[i].Remaining += reqs[i].Cost
		}
	}
	return nil
}

// decideLocked decides req without taking. The caller holds s.mu.
func (s *Store) decideLocked(req *sluice.Request) (sluice.Decision, *entry, error) {
	if err := req.Validate(); err != nil {
		return sluice.Decision{}, nil, err
	}
	if req.Limit.Algorithm.Resolved() == sluice.LeakyBucket {
		return sluice.Decision{}, nil, ErrLeakyBucket
	}
	if req.Limit.CountAll {
		return sluice.Decision{}, nil, ErrCountAll
	}
	now := req.Now
	if now.IsZero() {
		now = s.opts.Clock()
	}
	e := s.entryLocked(*req, now)
	if e == nil {
		return sluice.Decision{}, nil, fmt.Errorf("localsync: %d keys held with unsynced cost: the shared store has been down too long", s.opts.MaxKeys)
	}
	e.used = now
	left := e.remaining - e.pending - e.inflight
	d := sluice.Decision{Limit: req.Limit, ResetAfter: max(e.resetAt.Sub(now), 0)}
	cost := max(req.Cost, 1) // a peek asks whether one would fit
	if cost <= left {
		d.Allowed = true
		d.Remaining = left - req.Cost
		return d, e, nil
	}
	d.Remaining = max(left, 0)
	d.RetryAfter = max(s.next.Sub(now), e.retryAt.Sub(now), time.Millisecond)
	return d, e, nil
}

// entryLocked returns req's entry, making one (full until the first sync
// says otherwise) if there is room. The caller holds s.mu.
func (s *Store) entryLocked(req sluice.Request, now time.Time) *entry {
	id := ident{req.Key, req.Limit.Algorithm.Resolved(), req.Limit.Period, req.Limit.Zone}
	e := s.entries[id]
	if e != nil {
		e.limit = req.Limit // a changed rate keeps the entry
		return e
	}
	if len(s.entries) >= s.opts.MaxKeys && !s.evictLocked() {
		return nil
	}
	e = &entry{limit: req.Limit, remaining: share(req.Limit.Capacity(), s.opts.Instances), resetAt: now}
	id.key = strings.Clone(id.key) // the Store contract: keep no caller's bytes
	s.entries[id] = e
	return e
}

// evictLocked forgets one entry with nothing to push, reporting whether it
// found one.
func (s *Store) evictLocked() bool {
	for id, e := range s.entries {
		if e.pending == 0 && e.inflight == 0 {
			delete(s.entries, id)
			return true
		}
	}
	return false
}

func share(remaining int64, instances int) int64 { return remaining / int64(instances) }

// Reset forgets key locally and in the shared store.
func (s *Store) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	s.mu.Lock()
	delete(s.entries, ident{key, limit.Algorithm.Resolved(), limit.Period, limit.Zone})
	s.mu.Unlock()
	return s.opts.Shared.Reset(ctx, key, limit)
}
