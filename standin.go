package sluice

import (
	"context"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// standin decides FailLocal requests while the store fails, from an
// in-memory store of its own.
//
// To start each key where the store left it, the Guard records the last
// decision it saw for every key in seen: a table of slots indexed by a
// hash of (key, algorithm, period), each holding that hash, the key's
// remaining and when it is back to full. Writing a slot is three atomic
// stores and no lock; two keys that share a slot overwrite each other, and
// the one that lost its record is treated as never seen. That is the
// price of a record that costs the healthy path almost nothing. The table
// starts small (minSeen slots, 24 KiB) and doubles, up to maxSeen, as the
// slots in use pass 1/loadShare of it: it grows with the keys seen, so a
// Limiter that sees few keys holds a small one.
//
// An outage (a number from the breaker) starts afresh: the stand-in's keys
// carry the outage's number, so what it counted in an earlier outage is
// never used again, and the first request for a key in an outage seeds it
// by forcing the part already used (capacity minus this instance's share of
// what was left) into the stand-in.
type standin struct {
	local     Store
	instances int64
	hseed     maphash.Seed
	base      time.Time // resetAt is nanoseconds since base
	seen      atomic.Pointer[seenTable]
	used      atomic.Int64 // slots of seen that hold a record
	growMu    sync.Mutex

	mu     sync.Mutex
	epoch  uint64              // the outage seeded is for
	seeded map[string]struct{} // stand-in keys seeded in this outage

	ledger ledger // what it admitted, to tell the store (recovery.go)
}

type seenSlot struct {
	sum       atomic.Uint64
	remaining atomic.Int64
	resetAt   atomic.Int64
}

// seenTable is a size of the record: a power of two of slots.
type seenTable struct {
	slots []seenSlot
	mask  uint64
}

func newSeenTable(n int) *seenTable {
	return &seenTable{slots: make([]seenSlot, n), mask: uint64(n - 1)}
}

// The record's sizes: from 1 Ki slots of 24 bytes (24 KiB) to 1 Mi (24 MiB).
// It doubles when the slots in use pass 1/loadShare of it, which keeps it
// 8 to 16 times the keys seen: a key's record is then overwritten by
// another key's with a chance of at most about 1 in 8. (Growing on the
// records overwritten instead grows without end: keys that share a slot
// overwrite each other on every request, however large the table.)
const (
	minSeen   = 1 << 10
	maxSeen   = 1 << 20
	loadShare = 8
)

// maxSeeded bounds the keys seeded in one outage; past it, new keys start
// full in the stand-in.
const maxSeeded = 1 << 20

func newStandin(local Store, instances int) *standin {
	s := &standin{local: local, instances: int64(instances), hseed: maphash.MakeSeed(),
		base: time.Now(), seeded: map[string]struct{}{}}
	s.seen.Store(newSeenTable(minSeen))
	return s
}

// grow doubles t, the record, copying what it holds, unless it has grown
// meanwhile or is at maxSeen. Records written to t while it is copied may
// be lost: a lost record is a key treated as never seen.
func (s *standin) grow(t *seenTable) {
	s.growMu.Lock()
	defer s.growMu.Unlock()
	if s.seen.Load() != t || len(t.slots) >= maxSeen {
		return
	}
	nt := newSeenTable(2 * len(t.slots))
	var used int64
	for i := range t.slots {
		from := &t.slots[i]
		if h := from.sum.Load(); h != 0 {
			to := &nt.slots[h&nt.mask]
			if to.sum.Load() == 0 {
				used++
			}
			to.sum.Store(h)
			to.remaining.Store(from.remaining.Load())
			to.resetAt.Store(from.resetAt.Load())
		}
	}
	s.used.Store(used)
	s.seen.Store(nt)
}

func (s *standin) sum(r *Request) uint64 {
	h := maphash.String(s.hseed, r.Key)
	return h ^ (uint64(r.Limit.Period)*0x9e3779b97f4a7c15 + uint64(r.Limit.Algorithm.Resolved()))
}

// record keeps the remaining and reset of each FailLocal decision.
func (s *standin) record(reqs []Request, modes []FailMode, ds []Decision) {
	for i := range reqs {
		if modes == nil || modes[i] == FailLocal {
			s.record1(&reqs[i], &ds[i])
		}
	}
}

// record1 is record for one request.
func (s *standin) record1(r *Request, d *Decision) {
	h := s.sum(r)
	t := s.seen.Load()
	slot := &t.slots[h&t.mask]
	if old := slot.sum.Load(); old != h {
		slot.sum.Store(h)
		if old == 0 && s.used.Add(1) > int64(len(t.slots)/loadShare) {
			s.grow(t)
		}
	}
	slot.remaining.Store(d.Remaining)
	slot.resetAt.Store(int64(time.Since(s.base)) + int64(d.ResetAfter))
}

// remaining returns what the store last said r's key had left, or its
// capacity when that is unknown or the key has been back to full since.
func (s *standin) remaining(r *Request) int64 {
	h := s.sum(r)
	t := s.seen.Load()
	slot := &t.slots[h&t.mask]
	rem, reset := slot.remaining.Load(), slot.resetAt.Load()
	if slot.sum.Load() != h || int64(time.Since(s.base)) >= reset {
		return r.Limit.Capacity()
	}
	return min(max(rem, 0), r.Limit.Capacity())
}

// decide overwrites the decisions of c's FailLocal requests in ds with the
// stand-in's, all-or-nothing among them, in outage epoch.
func (s *standin) decide(ctx context.Context, c *Check, epoch uint64, ds []Decision) error {
	prefix := strconv.FormatUint(epoch, 10) + "\x00"
	var reqs []Request
	var at []int
	for i, r := range c.Enforced {
		if c.Modes != nil && c.Modes[i] != FailLocal {
			continue
		}
		r.Key = prefix + r.Key
		if err := s.seed(ctx, epoch, &r, &c.Enforced[i]); err != nil {
			return err
		}
		reqs, at = append(reqs, r), append(at, i)
	}
	out := make([]Decision, len(reqs))
	if err := take(ctx, s.local, reqs, out); err != nil {
		return err
	}
	admitted := true
	for j, i := range at {
		ds[i] = out[j]
		admitted = admitted && out[j].Allowed
	}
	if admitted { // all or nothing: a denied batch took nothing
		for _, i := range at {
			r := &c.Enforced[i]
			if r.Refund.IsZero() {
				s.ledger.add(r.Key, r.Limit, r.Cost)
			} else {
				s.ledger.give(r.Key, r.Limit, r.Cost) // owed no more
			}
		}
	}
	return nil
}

// seed forces into the stand-in, once per key and outage, what orig's key
// had used: its capacity less this instance's share of what was left.
func (s *standin) seed(ctx context.Context, epoch uint64, r, orig *Request) error {
	// Held through the forced take, so that no request for the key is
	// decided before its seed is in.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch != epoch {
		s.epoch, s.seeded = epoch, map[string]struct{}{}
	}
	if _, done := s.seeded[r.Key]; done || len(s.seeded) >= maxSeeded {
		return nil
	}
	s.seeded[r.Key] = struct{}{}
	used := r.Limit.Capacity() - s.remaining(orig)/s.instances
	if used <= 0 {
		return nil
	}
	_, err := s.local.Take(ctx, Request{Key: r.Key, Limit: r.Limit, Cost: used, Force: true})
	return err
}
