package guard

import (
	"context"
	"github.com/sluicehq/sluice"
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
// decision it saw for every key in seen: a table of slots in buckets of
// seenWays, a key's record in one slot of the bucket a hash of (key,
// algorithm, period) picks, each slot holding that hash, the key's
// remaining and when it is back to full. Writing a record is three atomic
// stores and no lock. A key new to a full bucket takes the slot of the
// record back to full soonest (one already back to full tells nothing), so
// a record is lost only to seenWays others in its bucket that are not back
// to full yet; and two writers that race on a slot may leave one record
// holding the other's numbers. A lost record is a key treated as never
// seen: the price of a record that costs the healthy path almost nothing.
// The table starts small (minSeen slots, 24 KiB) and grows as the slots
// taken pass half of it, so that a Limiter that sees few keys holds a small
// one.
//
// An outage (a number from the breaker) starts afresh: the stand-in's keys
// carry the outage's number, so what it counted in an earlier outage is
// never used again, and the first request for a key in an outage seeds it
// by forcing the part already used (capacity minus this instance's share of
// what was left) into the stand-in.
type standin struct {
	local     sluice.Store
	instances int64
	hseed     maphash.Seed
	base      time.Time // resetAt is nanoseconds since base
	seen      atomic.Pointer[seenTable]
	untilGrow atomic.Int64 // slots of seen left to take (see claim) before it grows
	growMu    sync.Mutex   // held by the one growing seen

	mu     sync.Mutex
	epoch  uint64              // the outage seeded is for
	seeded map[string]struct{} // stand-in keys seeded in this outage

	ledger ledger // what it admitted, to tell the store (recovery.go)
}

type seenSlot struct {
	sum       atomic.Uint64 // 0: empty
	remaining atomic.Int64
	resetAt   atomic.Int64
}

// seenTable is a size of the record: a power of two of slots, in buckets
// of seenWays.
type seenTable struct {
	slots []seenSlot
	mask  uint64                    // of a bucket's number
	prev  atomic.Pointer[seenTable] // while its records are carried in
}

func newSeenTable(n int) *seenTable {
	return &seenTable{slots: make([]seenSlot, n), mask: uint64(n/seenWays - 1)}
}

// The record's sizes: from 1 Ki slots of 24 bytes (24 KiB) to 1 Mi (24 MiB).
// It grows when half its slots are taken, to the least power of two that
// holds the records not back to full in at most 3/8 of its slots (twice the
// table, when they are most of the half): for keys arriving, 2 to 4 slots a
// key, a bucket of 8 holding 2 to 4 keys on average. A key's record is
// then lost to 8 others of its bucket for 0.01% of keys after growing and
// 0.8% just before (a table of one slot a bucket, as large again, would
// lose 3% to 6%). A record back to full is not carried into the new table.
const (
	minSeen  = 1 << 10
	maxSeen  = 1 << 20
	seenWays = 8
)

// slot returns the slot of t that holds h's record, or nil.
func (t *seenTable) slot(h uint64) *seenSlot {
	b := t.bucket(h)
	for i := range b {
		if b[i].sum.Load() == h {
			return &b[i]
		}
	}
	return nil
}

func (t *seenTable) bucket(h uint64) []seenSlot {
	i := (h & t.mask) * seenWays
	return t.slots[i : i+seenWays : i+seenWays]
}

// claim returns the slot of t to write h's record into at now: the one
// holding it; else an empty one, taken (took reports it); else the one
// back to full soonest, overwritten. Two writers of h that race on a full
// bucket while a third rewrites it may leave h in two of its slots; claim
// and slot then use the first, and the other is overwritten in its turn.
func (t *seenTable) claim(h uint64, now int64) (slot *seenSlot, took bool) {
	b := t.bucket(h)
	for {
		var empty, soonest *seenSlot
		var was uint64 // soonest's sum
		for i := range b {
			switch sum := b[i].sum.Load(); {
			case sum == h:
				return &b[i], false
			case sum == 0:
				if empty == nil {
					empty = &b[i]
				}
			case soonest == nil || b[i].resetAt.Load() < soonest.resetAt.Load():
				soonest, was = &b[i], sum
			}
		}
		switch {
		case empty != nil && empty.sum.CompareAndSwap(0, h):
			return empty, true
		case empty == nil && soonest.sum.CompareAndSwap(was, h):
			return soonest, false
		}
		// Taken meanwhile, perhaps by h itself: look again.
	}
}

// maxSeeded bounds the keys seeded in one outage; past it, new keys start
// full in the stand-in.
const maxSeeded = 1 << 20

func newStandin(local sluice.Store, instances int) *standin {
	s := &standin{local: local, instances: int64(instances), hseed: maphash.MakeSeed(),
		base: time.Now(), seeded: map[string]struct{}{}}
	s.seen.Store(newSeenTable(minSeen))
	s.untilGrow.Store(minSeen / 2)
	return s
}

// grow replaces t, the record, with a table that holds the records of t
// not back to full in at most 3/8 of its slots (up to maxSeen), unless t
// has been replaced meanwhile or another grow is under way. A write to t
// by a writer that had not seen the new table, after its slot was carried,
// is lost: a key treated as never seen, until its next decision is
// recorded.
func (s *standin) grow(t *seenTable) {
	if !s.growMu.TryLock() {
		return // growing already: a decision does not wait for the copy
	}
	defer s.growMu.Unlock()
	// Slots taken during a copy count toward the next table's growth: when
	// they are already half of it, it grows at once.
	for s.seen.Load() == t && s.untilGrow.Load() <= 0 {
		t = s.regrow(t)
	}
}

// regrow is grow under growMu, and returns the new table, sized by an
// estimate of t's records (live). The new table is in use before t's
// records are carried into it, so that what is written meanwhile is not
// lost to a full t; until they are, a key is also looked up in t.
func (s *standin) regrow(t *seenTable) *seenTable {
	now := int64(time.Since(s.base))
	live := t.live(now)
	n := len(t.slots)
	for n < maxSeen && 8*live > 3*n {
		n *= 2
	}
	nt := newSeenTable(n)
	nt.prev.Store(t)
	// nt grows when half its slots are taken, or, at maxSeen with more
	// than that carried over, after a quarter more.
	s.untilGrow.Store(max(int64(n/2-live), int64(n/4)))
	s.seen.Store(nt)
	took := nt.carry(t, now)
	s.untilGrow.Add(int64(live) - took)
	nt.prev.Store(nil)
	return nt
}

// live estimates how many of t's records are not back to full at now, from
// liveSample of its buckets spread over it (whole buckets: their first
// slots fill first): quick, so that the new table is in use before writers
// fill t.
func (t *seenTable) live(now int64) int {
	buckets := len(t.slots) / seenWays
	step := max(buckets/liveSample, 1)
	n, looked := 0, 0
	for b := 0; b < buckets; b += step {
		for i := b * seenWays; i < (b+1)*seenWays; i++ {
			looked++
			if t.slots[i].sum.Load() != 0 && t.slots[i].resetAt.Load() > now {
				n++
			}
		}
	}
	return n * len(t.slots) / looked
}

const liveSample = 64

// carry writes t's records not back to full at now into nt, unless nt
// holds a record of the key that is back to full later, and returns the
// slots of nt it took (see claim).
func (nt *seenTable) carry(t *seenTable, now int64) (took int64) {
	for i := range t.slots {
		from := &t.slots[i]
		h, reset := from.sum.Load(), from.resetAt.Load()
		if h == 0 || reset <= now {
			continue
		}
		to, ok := nt.claim(h, now)
		if ok {
			took++
		} else if to.resetAt.Load() >= reset {
			continue
		}
		to.remaining.Store(from.remaining.Load())
		to.resetAt.Store(reset)
	}
	return took
}

func (s *standin) sum(r *sluice.Request) uint64 {
	h := maphash.String(s.hseed, r.Key)
	h ^= uint64(r.Limit.Period)*0x9e3779b97f4a7c15 + uint64(r.Limit.Algorithm.Resolved())
	if h == 0 {
		return 1 // 0 is an empty slot's
	}
	return h
}

// record keeps the remaining and reset of each FailLocal decision.
func (s *standin) record(reqs []sluice.Request, modes []sluice.FailMode, ds []sluice.Decision) {
	for i := range reqs {
		if modes == nil || modes[i] == sluice.FailLocal {
			s.record1(&reqs[i], &ds[i])
		}
	}
}

// record1 is record for one request.
func (s *standin) record1(r *sluice.Request, d *sluice.Decision) {
	h := s.sum(r)
	now := int64(time.Since(s.base))
	t := s.seen.Load()
	slot, took := t.claim(h, now)
	slot.remaining.Store(d.Remaining)
	slot.resetAt.Store(now + int64(d.ResetAfter))
	if took && s.untilGrow.Add(-1) <= 0 {
		s.grow(t)
	}
}

// remaining returns what the store last said r's key had left, or its
// capacity when that is unknown or the key has been back to full since.
func (s *standin) remaining(r *sluice.Request) int64 {
	t, h := s.seen.Load(), s.sum(r)
	slot := t.slot(h)
	if prev := t.prev.Load(); slot == nil && prev != nil {
		slot = prev.slot(h)
	}
	if slot == nil {
		return r.Limit.Capacity()
	}
	rem, reset := slot.remaining.Load(), slot.resetAt.Load()
	if int64(time.Since(s.base)) >= reset {
		return r.Limit.Capacity()
	}
	return min(max(rem, 0), r.Limit.Capacity())
}

// decide overwrites the decisions of c's FailLocal requests in ds with the
// stand-in's, all-or-nothing among them, in outage epoch.
func (s *standin) decide(ctx context.Context, c *Check, epoch uint64, ds []sluice.Decision) error {
	prefix := strconv.FormatUint(epoch, 10) + "\x00"
	var reqs []sluice.Request
	var at []int
	for i, r := range c.Enforced {
		if c.Modes != nil && c.Modes[i] != sluice.FailLocal {
			continue
		}
		r.Key = prefix + r.Key
		if err := s.seed(ctx, epoch, &r, &c.Enforced[i]); err != nil {
			return err
		}
		reqs, at = append(reqs, r), append(at, i)
	}
	out := make([]sluice.Decision, len(reqs))
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
				s.ledger.give(r.Key, r.Limit, r.Cost, r.Refund)
			}
		}
	}
	return nil
}

// seed forces into the stand-in, once per key and outage, what orig's key
// had used: its capacity less this instance's share of what was left.
func (s *standin) seed(ctx context.Context, epoch uint64, r, orig *sluice.Request) error {
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
	_, err := s.local.Take(ctx, sluice.Request{Key: r.Key, Limit: r.Limit, Cost: used, Force: true})
	return err
}
