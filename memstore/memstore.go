// Package memstore is sluice's in-process Store: sharded, bounded and
// expiring, with no allocation per Take on an existing key.
//
// Keys live in shards chosen by a seeded hash; each shard holds one
// open-addressing index per (algorithm, period) in use. A Take on an
// existing key finds it without a lock and locks that key alone; the GCRA
// and the leaky bucket, whose state is one word when Period/Rate is a
// whole number of microseconds or Rate/gcd(Rate, Period) is at most 1024
// (every Rate up to 1024, and fast limits such as 10^9/1s), decide with a
// compare-and-swap and no lock at all. The shard's mutex serialises only new keys, new limits, sweeping,
// eviction and the sliding log. A key's state expires when it is back to
// full capacity, which is when forgetting it grants nobody extra quota.
// Expired keys are swept a few at a time whenever a new key is inserted: no
// goroutine, no full scans. While a shard holds under half its share of
// MaxKeys, a key stays 10 seconds after it expired, so that a key that
// returns finds its entry instead of being made again, and while sweeps
// find only such keys (a burst of new ones) they run before one insert in
// up to 16. MaxKeys and MaxBytes bound memory under a key flood; see
// Options.
//
// Memory per key, for the O(1) algorithms: a 64-byte entry holding the
// state and a key of up to 16 bytes (a longer key is a second object), and
// an index slot of 8 bytes and a tag byte (seven to a cache line) at a load
// of 3/8 to 3/4 (docs/performance.md has the bytes per key measured, and
// the command). A sliding log
// holds up to Rate entries of 16 bytes (Rate is at most
// sluice.MaxSlidingLogRate: 1 MiB per key).
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/guard"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Shards is the number of independently locked shards, rounded up to a
	// power of two. Default: 8 per GOMAXPROCS, at least 16. A Take on an
	// existing key locks no shard, so shards only spread new keys,
	// sweeping and eviction; fewer shards keep their tables in cache.
	Shards int
	// MaxKeys bounds the number of keys held. When a new key would exceed
	// its shard's share, the store looks at 8 of the shard's keys, from
	// where its sweep of expired keys left off, and evicts one already back
	// to full (which grants nobody extra quota) if it finds one, else the
	// soonest to expire of the 8, counted in Evictions. A sample, not a
	// search, so a new key at the bound costs about twice one below it
	// however full of live keys the store is (BenchmarkFullStore).
	// Default 4,000,000: for the O(1) algorithms, of short names, within
	// the default MaxBytes (docs/performance.md has the heap and RSS per
	// key measured, and bench's BenchmarkRSSPerKey the command).
	//
	// Eviction spares keys that deny: among the keys looked at it takes
	// one back to full, else the soonest to expire of those with capacity
	// left, and a key with none (a client held at its limit, which
	// eviction would free) only when every key looked at, up to 256, has
	// none; each such eviction is counted in DenyingEvictions.
	MaxKeys int
	// MaxBytes bounds the heap the keys hold, as the store counts it: 80
	// bytes for an O(1) key of up to 16 bytes (entry and index share), plus
	// a longer key's bytes; a sliding log's key, its entries (16 bytes
	// each) and 80. At the bound a new key evicts, as at MaxKeys, until it
	// fits. Default 384 MiB, which 4,000,000 short keys fit within: the
	// default store's heap stays under about 400 MB whatever its keys'
	// lengths. The process's RSS can reach about twice the live heap
	// between garbage collections (GOGC=100; GOMEMLIMIT bounds it).
	MaxBytes int64
	// Clock returns the current time for Requests without Now. Default:
	// the wall clock read at New advanced by the monotonic clock, which
	// costs half a time.Now and never steps back.
	Clock func() time.Time
}

// Store is an in-memory sluice.Store, safe for concurrent use.
type Store struct {
	shards   []shard
	mask     uint64
	seed     maphash.Seed
	perShard int
	// perShardBytes is MaxBytes' share per shard.
	perShardBytes    int64
	denyingEvictions atomic.Uint64
	clock            func() time.Time // nil: base advanced by the monotonic clock
	base             time.Time        // the monotonic clock's start (see New)
	baseNS           int64            // the wall clock's start in ns: µs are cut from the sum, so now never reads behind a time.Now taken before it
	evictions        atomic.Uint64
	slots            [slotShards]slotShard
}

var _ sluice.Store = (*Store)(nil)

const (
	sweepPerInsert = 2  // expired entries examined per new key
	sweepScan      = 64 // index slots looked at per sweep, at most
	evictSample    = 8  // keys looked at for one to evict under MaxKeys
	// sweepGrace is how long a key back to full stays before sweeping
	// removes it (µs), while its shard holds under half its share of
	// MaxKeys: a key that returns within it finds its entry and takes no
	// lock and no allocation, where removing and making it again would
	// take both. Past half, keys back to full are swept at once, and at
	// the bound eviction takes them first.
	sweepGrace = 10_000_000
)

// New returns a Store configured by opts.
func New(opts Options) *Store {
	want := opts.Shards
	if want <= 0 {
		want = max(8*runtime.GOMAXPROCS(0), 16)
	}
	n := 1
	for n < want {
		n <<= 1
	}
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = 4_000_000
	}
	maxBytes := opts.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	// The clock advances base's wall clock reading by the monotonic clock
	// since a reading taken before it: time.Now reads the wall clock
	// first, so base's own monotonic reading comes after its wall clock
	// by the gap between two reads (a system call each under emulation),
	// and now would read behind the wall clock by that gap. From an
	// earlier reading it reads ahead of it instead.
	since := time.Now()
	base := time.Now()
	s := &Store{
		shards:   make([]shard, n),
		mask:     uint64(n - 1),
		seed:     maphash.MakeSeed(),
		perShard: max((maxKeys+n-1)/n, 1),
		// At least one large key's worth per shard.
		perShardBytes: max(maxBytes/int64(n), 64<<10),
		clock:         opts.Clock,
		base:          since,
		baseNS:        base.UnixNano(),
	}
	for i := range s.slots {
		s.slots[i].keys = make(map[string]map[string]struct{})
	}
	return s
}

// DefaultMaxBytes is Options.MaxBytes' default: 384 MiB.
const DefaultMaxBytes = 384 << 20

// Evictions returns how many keys not yet back to full were evicted to stay
// under MaxKeys or MaxBytes. Each such eviction may have granted its
// client extra quota.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }

// DenyingEvictions returns how many of Evictions were of keys with no
// capacity left, taken because every key looked at had none: each freed a
// client held at its limit. More than zero says the bounds are too small
// for the keys that deny.
func (s *Store) DenyingEvictions() uint64 { return s.denyingEvictions.Load() }

// Bytes returns the heap the keys hold, as MaxBytes counts it.
func (s *Store) Bytes() int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.bytes
		sh.mu.Unlock()
	}
	return n
}

// Len returns the number of keys held, including expired ones not yet swept.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.keys
		sh.mu.Unlock()
	}
	return n
}

func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

// now returns t, or the store's clock when t is zero, in µs.
func (s *Store) now(t time.Time) int64 {
	switch {
	case !t.IsZero():
		return t.UnixMicro()
	case s.clock != nil:
		return s.clock().UnixMicro()
	}
	return (s.baseNS + int64(time.Since(s.base))) / 1e3
}

// Take decides one request. On an existing key of an O(1) algorithm it
// locks that key alone; a new key, a new limit and the sliding log take
// the key's shard lock.
func (s *Store) Take(ctx context.Context, req sluice.Request) (d sluice.Decision, err error) {
	// Small enough to be inlined, so that req and d live in the caller's
	// frame rather than being copied into and out of Take's. The caller
	// still copies each once (req into this parameter, whose address is
	// taken; d out of this result): see TakeInto.
	err = s.TakeInto(ctx, &req, &d)
	return d, err
}

// TakeInto is Take for a caller that keeps its Request and Decision: it
// reads *req and sets every field of *d (the zero Decision with an error),
// and holds on to neither. Take's values cost a caller a copy of each,
// which the Go compiler makes at every call even when Take is inlined; a
// goroutine that reuses one Request (setting its Key per call) and one
// Decision copies neither (BenchmarkTakeCopies prices the difference). The
// two must not be shared between goroutines while a call runs.
func (s *Store) TakeInto(_ context.Context, req *sluice.Request, d *sluice.Decision) error {
	if err := req.CheckKeyAndCost(); err != nil {
		*d = sluice.Decision{}
		return err // the limit is checked once per table and limit
	}
	// The clock is read before any lock: the algorithms never admit more
	// when a caller's time is behind the state's.
	now := s.now(req.Now)
	if !req.Refund.IsZero() {
		var err error
		*d, err = s.refund(req, now)
		return err
	}
	h := s.hash(req.Key)
	sh := &s.shards[h&s.mask]
	if e, t, c := sh.lookup(req, h); e != nil {
		if o, ok := takeExisting(e, t, c, req, now); ok {
			o.fill(d, &req.Limit) // not returned whole: see outcome
			return nil
		}
	}
	var err error
	*d, err = s.takeLocked(sh, req, h, now)
	return err
}

// takeLocked is Take under the shard lock: for a new key, a new limit, a
// sliding log, or an entry removed while it was found.
func (s *Store) takeLocked(sh *shard, req *sluice.Request, h uint64, now int64) (sluice.Decision, error) {
	p := pending{h: h}
	sh.mu.Lock()
	err := sh.decide(req, now, &p)
	if err == nil && p.writes(req) {
		sh.commit(s, req, now, &p)
	}
	if p.e != nil {
		p.e.unlock(p.keep, p.t.swaps, p.t.unitOf(p.keep.C))
	}
	sh.mu.Unlock()
	if err != nil {
		return sluice.Decision{}, err
	}
	return p.res.Decision(req.Limit), nil
}

// outcome is an algorithm.Result in four fields, which the compiler keeps
// in registers; a five-field Result is copied through memory in pieces the
// processor cannot forward, which cost this path a quarter of its time.
// wait is RetryAfter when denied, Delay when allowed (never both).
type outcome struct {
	allowed                bool
	remaining, wait, reset int64
}

func outcomeOf(r algorithm.Result) outcome {
	wait := r.RetryAfter
	if r.Allowed {
		wait = r.Delay
	}
	return outcome{r.Allowed, r.Remaining, wait, r.ResetAfter}
}

func admitted(remaining, reset, delay int64) outcome {
	return outcome{true, remaining, delay, reset}
}

func denied(remaining, retry, reset int64) outcome {
	return outcome{false, remaining, retry, reset}
}

// fill sets every field of d, one by one.
func (o outcome) fill(d *sluice.Decision, l *sluice.Limit) {
	var retry, delay int64
	if o.allowed {
		delay = o.wait
	} else {
		retry = o.wait
	}
	d.Allowed = o.allowed
	d.Limit = *l
	d.Remaining = o.remaining
	d.RetryAfter = time.Duration(retry) * time.Microsecond
	d.ResetAfter = time.Duration(o.reset) * time.Microsecond
	d.Delay = time.Duration(delay) * time.Microsecond
}

// takeExisting decides req on e, an existing key of table t found without
// the shard lock, with its limit's config c. It reports false when e turned out dead
// (removed meanwhile): the caller then looks again under the shard lock.
func takeExisting(e *entry, t *table, c *config, req *sluice.Request, now int64) (outcome, bool) {
	alg := req.Limit.Algorithm.Resolved()
	swaps := swaps(alg)
	for swaps {
		// The state is often one word (B is 0 whenever Period/Rate is a
		// whole number of µs, and packs in beside A, in units, when
		// Rate/gcd(Rate, Period) is at most 1024): decide on it and
		// compare-and-swap it, with no lock. The word is counted in c's
		// unit, which is b while e is kept at c's rate (see unit). Two
		// words (hasB) are read one at a time and swapped together
		// (cas128), which fails if either changed: a pair read torn
		// between two writes is never written, and a report made on it
		// without a write (a peek, a denial) is first confirmed by
		// swapping the pair for itself.
		a := atomic.LoadInt64(&e.a)
		two := a&hasB != 0
		if a < 0 || two && !hasCAS128 {
			break // locked, dead, or two words that cannot be swapped together
		}
		if atomic.LoadInt64(&e.c) != c.params.Rate {
			break // kept at another rate (the limit changed): converted under the lock
		}
		b := c.unit.d
		if two {
			b = atomic.LoadInt64(&e.b)
		}
		old := stateOf(a, b, c.params.Rate)
		if req.Cost == 0 {
			if two && !cas128(&e.a, a, b, a, b) {
				continue
			}
			return outcomeOf(report(alg, req, &c.params, now, old)), true // a peek writes nothing
		}
		next, ok := algorithm.Admit(alg, old, &c.params, now, req.Cost)
		if !ok && !req.Forced() {
			if two && !cas128(&e.a, a, b, a, b) {
				continue
			}
			// A denial writes nothing: reported on the state it saw.
			return denied(algorithm.Denied(alg, old, next, &c.params, now, req.Cost)), true
		}
		if !ok {
			break // forced past the burst: under the lock
		}
		if two {
			na, nb := pack(next, c.unit)
			if cas128(&e.a, a, b, na, nb) {
				return admitted(algorithm.Admitted(alg, old, next, &c.params, now)), true
			}
			continue
		}
		w, fits := word(next, c.unit)
		if !fits {
			break // from one word to two: under the lock
		}
		if atomic.CompareAndSwapInt64(&e.a, a, w) {
			return admitted(algorithm.Admitted(alg, old, next, &c.params, now)), true
		}
	}
	st, ok := e.lock(swaps)
	if !ok {
		return outcome{}, false
	}
	if req.Cost > 0 {
		// Hold the lock for the admission alone, and report after. A
		// forced request that fits is an admission like any other.
		next, allowed := algorithm.Admit(alg, st, &c.params, now, req.Cost)
		if allowed {
			e.unlock(next, swaps, t.unitAt(c, next.C))
			return admitted(algorithm.Admitted(alg, st, next, &c.params, now)), true
		}
		if !req.Forced() {
			e.unlock(st, swaps, t.unitAt(c, st.C))
			return denied(algorithm.Denied(alg, st, next, &c.params, now, req.Cost)), true // on the state it saw
		}
	}
	p := pending{old: st}
	decideState(alg, req, &c.params, now, &p)
	if p.writes(req) {
		st = p.s
	}
	e.unlock(st, swaps, t.unitAt(c, st.C))
	return outcomeOf(p.res), true
}

// report is the Result of req on old that writes nothing: a peek, or a
// denial that is not forced.
func report(alg sluice.Algorithm, req *sluice.Request, params *algorithm.Params, now int64, old algorithm.State) algorithm.Result {
	_, r := algorithm.Take(alg, old, params, now, req.Cost)
	return r
}

// TakeAll decides reqs all-or-nothing: the shards of every key are locked in
// order, then the entries of the keys, every request is decided, and state
// is written only if all are allowed. Two requests with the same key,
// algorithm and period are refused with sluice.ErrDuplicateRequest.
func (s *Store) TakeAll(_ context.Context, reqs []sluice.Request, dst []sluice.Decision) error {
	if len(dst) < len(reqs) {
		return fmt.Errorf("memstore: TakeAll: %d decisions for %d requests", len(dst), len(reqs))
	}
	if len(reqs) == 1 && !reqs[0].Refund.IsZero() {
		d, err := s.Take(context.Background(), reqs[0])
		dst[0] = d
		return err
	}
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if !reqs[i].Refund.IsZero() {
			return fmt.Errorf("%w: request %d", sluice.ErrRefundInBatch, i)
		}
		for j := range i {
			if sameState(&reqs[i], &reqs[j]) {
				return fmt.Errorf("%w: requests %d and %d", sluice.ErrDuplicateRequest, j, i)
			}
		}
	}
	var (
		shardBuf [8]*shard
		pendBuf  [8]pending
	)
	shards, pend := shardBuf[:0], pendBuf[:0]
	if len(reqs) > len(pendBuf) {
		pend = make([]pending, 0, len(reqs))
	}
	for i := range reqs {
		h := s.hash(reqs[i].Key)
		pend = append(pend, pending{h: h, sh: &s.shards[h&s.mask]})
		shards = append(shards, pend[i].sh)
	}
	now := s.now(time.Time{})
	shards = lockAll(shards)
	// Holding every shard of the batch, it holds every entry it locks
	// against other batches and slow paths; a Take that holds one of them
	// waits for nothing. So the order entries are locked in is free.
	all := true
	for i := range reqs {
		pend[i].now = now
		if !reqs[i].Now.IsZero() {
			pend[i].now = reqs[i].Now.UnixMicro()
		}
		pend[i].sh.decide(&reqs[i], pend[i].now, &pend[i]) // validated above
		all = all && (pend[i].res.Allowed || pend[i].forced)
	}
	for i := range reqs {
		switch {
		case reqs[i].Cost > 0 && (all || pend[i].forced):
			pend[i].sh.commit(s, &reqs[i], pend[i].now, &pend[i])
		case !all && pend[i].res.Allowed:
			undo(&reqs[i], pend[i].now, &pend[i])
		}
	}
	for i := range pend {
		if pend[i].e != nil {
			pend[i].e.unlock(pend[i].keep, pend[i].t.swaps, pend[i].t.unitOf(pend[i].keep.C))
		}
	}
	for _, sh := range shards {
		sh.mu.Unlock()
	}
	for i := range reqs {
		dst[i] = pend[i].res.Decision(reqs[i].Limit)
	}
	return nil
}

// lockAll locks each distinct shard once, in address order so that
// concurrent batches cannot deadlock, and returns the distinct shards.
func lockAll(shards []*shard) []*shard {
	slices.SortFunc(shards, func(a, b *shard) int {
		switch {
		case a == b:
			return 0
		case uintptrOf(a) < uintptrOf(b):
			return -1
		}
		return 1
	})
	shards = slices.Compact(shards)
	for _, sh := range shards {
		sh.mu.Lock()
	}
	return shards
}

func uintptrOf(s *shard) uintptr { return uintptr(unsafe.Pointer(s)) }

func sameState(a, b *sluice.Request) bool {
	return a.Key == b.Key && a.Limit.SameState(b.Limit)
}

// Reset forgets the state of key under limit (its algorithm, period and
// zone).
func (s *Store) Reset(_ context.Context, key string, limit sluice.Limit) error {
	if err := limit.Validate(); err != nil {
		return err
	}
	sh := &s.shards[s.hash(key)&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t := sh.table(&limit); t != nil {
		sh.remove(s, t, key)
	}
	return nil
}

// InProcess reports true: the memory store never leaves the process, so a
// guard.Guard calls it without a timeout or breaker.
func (*Store) InProcess() bool { return true }

var _ guard.InProcess = (*Store)(nil)
