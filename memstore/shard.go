package memstore

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
)

// shard is one lock's worth of keys. The lock serialises what changes the
// shard's shape (adding and removing keys and tables, new limits) and the
// sliding logs; a Take on an existing key of an O(1) algorithm takes only
// its entry's lock.
type shard struct {
	mu     sync.Mutex
	tables atomic.Pointer[[]*table] // replaced whole under mu; read without it
	keys   int                      // guarded by mu
	bytes  int64                    // the heap its keys hold, as keyBytes and logBytes count it; guarded by mu
	// last is the config added last to a table of an O(1) algorithm: a
	// lookup whose limit is its own goes straight to its table.
	last atomic.Pointer[config]
	_    [24]byte // keep neighbouring shards' locks off one cache line
}

// table holds the keys of one (algorithm, period, zone): state is
// identified by them, so one key can carry several limits.
type table struct {
	alg    sluice.Algorithm
	period int64
	zone   *time.Location // a calendar's; nil for the rest
	swaps  bool           // its entries' first word is also swapped without their lock: swaps(alg)
	// configs caches the limits used here lately with their params, so a
	// Take validates and converts a limit once, even when two limits of
	// one algorithm and period alternate. Written under the shard lock.
	configs [4]atomic.Pointer[config]
	next    int // the configs slot replaced next; guarded by the shard lock
	// slowest is the params of the lowest rate seen here: a token bucket
	// refills at its key's own rate, which the table does not keep, so
	// expiry is judged at the slowest, never before a key is full.
	slowest algorithm.Params
	ix      atomic.Pointer[index] // O(1) algorithms
	cursor  uint64                // where sweeping resumes; guarded by the shard lock
	idle    uint8                 // sweeps in a row within the grace that removed nothing, up to 4; guarded by the shard lock
	skip    uint8                 // inserts left before the next such sweep; guarded by the shard lock
	logs    map[string]*logState  // SlidingLog; guarded by the shard lock
}

type config struct {
	limit  sluice.Limit
	params algorithm.Params
	unit   unit   // of a state kept at params.Rate in its table
	t      *table // its table; nil for a peek at a table never used
}

type logState struct {
	entries []algorithm.LogEntry
	exp     int64
}

// pending is a decided request not yet written.
type pending struct {
	sh     *shard
	h      uint64
	now    int64
	t      *table
	e      *entry               // the key's entry, locked; nil for a new key and for logs
	keep   algorithm.State      // what e holds when unlocked: old, or s once committed
	old    algorithm.State      // state loaded, O(1) algorithms
	log    []algorithm.LogEntry // log loaded, SlidingLog
	s      algorithm.State      // state decided
	forced bool                 // Force: recorded although it did not fit
	drop   int
	logAt  int64
	res    algorithm.Result
}

// list returns the shard's tables.
func (sh *shard) list() []*table {
	if ts := sh.tables.Load(); ts != nil {
		return *ts
	}
	return nil
}

// table returns the table of l's state, or nil. It compares zones by
// pointer, and leaves a zone loaded twice to tableOfZone, whose
// comparison by name is the costlier one.
func (sh *shard) table(l *sluice.Limit) *table {
	for _, t := range sh.list() {
		if t.zone == l.Zone && t.alg == l.Algorithm.Resolved() && t.period == int64(l.Period/time.Microsecond) {
			return t
		}
	}
	return sh.tableOfZone(l)
}

// tableOfZone is table with zones compared by name.
func (sh *shard) tableOfZone(l *sluice.Limit) *table {
	alg, period := l.Algorithm.Resolved(), int64(l.Period/time.Microsecond)
	for _, t := range sh.list() {
		if t.alg == alg && t.period == period && (t.zone == l.Zone || sluice.Limit{Algorithm: alg, Period: l.Period, Zone: t.zone}.SameState(*l)) {
			return t
		}
	}
	return nil
}

// addTable creates the table of l's state. The caller holds sh.mu.
func (sh *shard) addTable(l *sluice.Limit) *table {
	alg := l.Algorithm.Resolved()
	t := &table{alg: alg, period: int64(l.Period / time.Microsecond), zone: l.Zone, swaps: swaps(alg)}
	if alg == sluice.SlidingLog {
		t.logs = make(map[string]*logState)
	} else {
		t.ix.Store(newIndex(minIndex))
	}
	old := sh.list()
	ts := append(old[:len(old):len(old)], t)
	sh.tables.Store(&ts)
	return t
}

// swaps reports whether Take decides alg's entries by compare-and-swap
// when their state is one word: the GCRA and the leaky bucket.
func swaps(alg sluice.Algorithm) bool { return alg == sluice.GCRA || alg == sluice.LeakyBucket }

// config returns t's cached config for l, or nil. It compares limits
// field by field (sameFields, inlined), and leaves a zone loaded twice
// to configOfZone.
func (t *table) config(l *sluice.Limit) *config {
	for i := range t.configs {
		if c := t.configs[i].Load(); c != nil && sameFields(&c.limit, l) {
			return c
		}
	}
	return t.configOfZone(l)
}

// configOfZone is config with zones compared by name.
func (t *table) configOfZone(l *sluice.Limit) *config {
	for i := range t.configs {
		if c := t.configs[i].Load(); c != nil && c.limit.Equal(*l) {
			return c
		}
	}
	return nil
}

// sameFields reports whether a == b, field by field: inlined, where ==
// on the struct calls its generated equality.
func sameFields(a, b *sluice.Limit) bool {
	return a.Rate == b.Rate && a.Period == b.Period && a.Burst == b.Burst &&
		a.Algorithm == b.Algorithm && a.CountAll == b.CountAll && a.Zone == b.Zone
}

// addConfig caches the params of the validated limit l in t, and makes
// them the shard's last unless t keeps logs (lookup serves the O(1)
// algorithms alone). The caller holds sh.mu.
func (sh *shard) addConfig(t *table, l sluice.Limit) *config {
	c := &config{limit: l, params: algorithm.ParamsOf(l), t: t}
	c.unit = t.unitOf(c.params.Rate)
	t.configs[t.next].Store(c)
	t.next = (t.next + 1) % len(t.configs)
	if t.slowest.Rate == 0 || c.params.Rate < t.slowest.Rate {
		t.slowest = c.params
	}
	if t.logs == nil {
		sh.last.Store(c)
	}
	return c
}

// unitOf returns the unit of a state kept at rate in t (see unit). The
// caller holds the shard lock, or the entry's.
func (t *table) unitOf(rate int64) unit {
	if !t.swaps {
		return one
	}
	for i := range t.configs {
		if c := t.configs[i].Load(); c != nil && c.params.Rate == rate {
			return c.unit
		}
	}
	return unitOf(rate, t.period)
}

// unitAt is unitOf, sparing the search when rate is c's.
func (t *table) unitAt(c *config, rate int64) unit {
	if rate == c.params.Rate {
		return c.unit
	}
	return t.unitOf(rate)
}

// lookup returns the entry of req's key, its table and its limit's
// config, without the shard lock; or a nil entry when the key, its table
// or its limit is new, or its algorithm keeps a log. h is the key's hash.
// A limit that is the shard's last (never a log's) goes straight to its
// table, sparing the search of tables and configs.
func (sh *shard) lookup(req *sluice.Request, h uint64) (*entry, *table, *config) {
	l := &req.Limit
	if c := sh.last.Load(); c != nil && sameFields(&c.limit, l) {
		e := c.t.ix.Load().find(h, req.Key)
		return e, c.t, c
	}
	if l.Algorithm.Resolved() == sluice.SlidingLog {
		return nil, nil, nil
	}
	t := sh.table(l)
	if t == nil {
		return nil, nil, nil
	}
	c := t.config(l)
	if c == nil {
		return nil, nil, nil
	}
	e := t.ix.Load().find(h, req.Key)
	return e, t, c
}

// decide runs the algorithm for req at now into p without writing,
// locking the key's entry if it has one. It validates req's limit unless
// its table has it cached; key and cost are the caller's to check. The
// caller holds sh.mu, finishes p with commit or undo, and unlocks p.e,
// when set, with p.keep.
func (sh *shard) decide(req *sluice.Request, now int64, p *pending) error {
	alg := req.Limit.Algorithm.Resolved()
	p.t = sh.table(&req.Limit)
	var c *config
	if p.t != nil {
		c = p.t.config(&req.Limit)
	}
	if c == nil {
		if err := req.Limit.Validate(); err != nil {
			return err
		}
		switch {
		case p.t != nil:
			c = sh.addConfig(p.t, req.Limit)
		case req.Cost == 0:
			// A peek at a table never used: a fresh state, kept nowhere.
			c = &config{limit: req.Limit, params: algorithm.ParamsOf(req.Limit)}
		default:
			p.t = sh.addTable(&req.Limit)
			c = sh.addConfig(p.t, req.Limit)
		}
	}
	if alg == sluice.SlidingLog {
		if p.t != nil {
			if ls := p.t.logs[req.Key]; ls != nil {
				p.log = ls.entries
			}
		}
		p.drop, p.res, p.logAt = algorithm.TakeLog(p.log, &c.params, now, req.Cost)
		p.forced = req.Forced() && req.Cost > 0
		if p.forced && !p.res.Allowed {
			p.res = algorithm.Result{RetryAfter: p.res.RetryAfter, ResetAfter: p.logAt + c.params.Period - now}
		}
		return nil
	}
	if p.t != nil {
		if p.e = p.t.ix.Load().find(p.h, req.Key); p.e != nil {
			p.old, _ = p.e.lock(p.t.swaps) // entries in the index are live under the shard lock
			p.keep = p.old
		}
	}
	decideState(alg, req, &c.params, now, p)
	return nil
}

// decideState runs the O(1) algorithm alg for req on p.old into p.s and
// p.res.
func decideState(alg sluice.Algorithm, req *sluice.Request, params *algorithm.Params, now int64, p *pending) {
	if req.Cost == 0 {
		p.s, p.res = algorithm.Take(alg, p.old, params, now, 0) // a peek
		return
	}
	p.s, p.res = algorithm.Status(alg, p.old, params, now, req.Cost)
	p.forced = req.Forced()
	if p.forced && !p.res.Allowed {
		// Record it anyway: what remains is nothing, until the debt is paid.
		p.s = algorithm.Apply(alg, p.old, params, now, req.Cost)
		_, after := algorithm.Status(alg, p.s, params, now, 0)
		p.res = algorithm.Result{RetryAfter: p.res.RetryAfter, ResetAfter: after.ResetAfter}
	}
}

// writes reports whether p's decision changes state.
func (p *pending) writes(req *sluice.Request) bool {
	return (p.res.Allowed || p.forced) && req.Cost > 0
}

// undo replaces p's result, of a request allowed in a denied batch, by the
// report of the unchanged state.
func undo(req *sluice.Request, now int64, p *pending) {
	alg := req.Limit.Algorithm.Resolved()
	params := algorithm.ParamsOf(req.Limit)
	if alg == sluice.SlidingLog {
		_, p.res, _ = algorithm.SlidingLog(p.log, &params, now, 0)
		return
	}
	_, p.res = algorithm.Status(alg, p.old, &params, now, 0)
}

// commit writes the state decided into p. The caller holds sh.mu; p's
// entry, if any, stays locked.
func (sh *shard) commit(s *Store, req *sluice.Request, now int64, p *pending) {
	t := p.t
	if t.logs != nil {
		sh.commitLog(s, req, now, p)
		return
	}
	if p.e != nil {
		p.keep = p.s
		return
	}
	need := entryBytes(req.Key)
	sh.makeRoom(s, t, now, need)
	ix := t.ix.Load()
	if ix.full() {
		ix = ix.rebuilt(s.hash)
		t.ix.Store(ix)
	}
	// Look again: making room may have freed a slot on the way.
	_, at := ix.locate(p.h, req.Key)
	e := newEntry(req.Key, p.s, t.unitOf(p.s.C))
	if ix.slot(at).Load() == nil {
		ix.used++
	}
	ix.live++
	ix.set(at, e, p.h) // published: from here a Take may lock it
	sh.keys++
	sh.bytes += need
}

func (sh *shard) commitLog(s *Store, req *sluice.Request, now int64, p *pending) {
	t := p.t
	ls := t.logs[req.Key]
	if ls == nil {
		sh.makeRoom(s, t, now, logBytes(req.Key, len(p.log)-p.drop+1))
		// A key of this batch evicted to make room keeps what it had.
		ls = &logState{entries: append([]algorithm.LogEntry(nil), p.log[p.drop:]...)}
		p.drop = 0
		t.logs[strings.Clone(req.Key)] = ls
		sh.keys++
		sh.bytes += logBytes(req.Key, cap(ls.entries))
	}
	held := cap(ls.entries) // what sh.bytes counts for ls
	n := copy(ls.entries, ls.entries[p.drop:])
	ls.entries = ls.entries[:n]
	if n > 0 && ls.entries[n-1].T == p.logAt {
		ls.entries[n-1].Cost += req.Cost
	} else {
		ls.entries = append(ls.entries, algorithm.LogEntry{T: p.logAt, Cost: req.Cost})
	}
	ls.exp = now + p.res.ResetAfter
	sh.bytes += logBytes(req.Key, cap(ls.entries)) - logBytes(req.Key, held)
}

// exp returns when state s of t is back to full (µs).
func (t *table) exp(s algorithm.State) int64 {
	return algorithm.FullAt(t.alg, s, &t.slowest)
}

// step returns the slot of ix that sweeping looks at next, and moves the
// cursor past it. The caller holds the shard lock.
func (t *table) step(ix *index) uint64 {
	i := t.cursor
	if i >= ix.n { // the index was rebuilt smaller, or the cursor wrapped
		i = 0
	}
	t.cursor = i + 1
	return i
}

// removeAt removes the locked entry e in slot i of t's current index. The
// caller holds sh.mu.
func (sh *shard) removeAt(s *Store, t *table, ix *index, i uint64, e *entry) {
	e.kill(t.swaps)
	ix.remove(i)
	ix.live--
	sh.keys--
	sh.bytes -= entryBytes(e.key)
	if ix.sparse() {
		t.ix.Store(ix.rebuilt(s.hash))
	}
}

// remove forgets key in t. The caller holds sh.mu.
func (sh *shard) remove(s *Store, t *table, key string) {
	if t.logs != nil {
		if ls, ok := t.logs[key]; ok {
			sh.dropLog(t, key, ls)
		}
		return
	}
	ix := t.ix.Load()
	if e, i := ix.locate(s.hash(key), key); e != nil {
		e.lock(t.swaps)
		sh.removeAt(s, t, ix, i, e)
	}
}

// makeRoom is called before inserting a key that holds need bytes into
// t: it sweeps a few keys back to full (for sweepGrace while the shard is
// under half its bounds) and, at a bound (MaxKeys or MaxBytes), removes
// keys until the new one fits: each one back to full among the next
// evictSample keys of t, or failing that one evicted. The caller holds
// sh.mu.
func (sh *shard) makeRoom(s *Store, t *table, now, need int64) {
	switch {
	case sh.keys < s.perShard/2 && sh.bytes+need <= s.perShardBytes/2:
		// While sweeps keep finding only keys within their grace (a burst
		// of new keys), looking costs a cache miss per key for nothing:
		// look before one insert in 2, 4, 8, then 16, and before every
		// one again as soon as a sweep removes a key.
		if t.skip > 0 {
			t.skip--
			return
		}
		if sh.sweep(s, t, now-sweepGrace, sweepPerInsert, sweepPerInsert) > 0 {
			t.idle = 0
		} else {
			t.idle = min(t.idle+1, 4)
			t.skip = 1<<t.idle - 1
		}
		return
	case sh.keys < s.perShard && sh.bytes+need <= s.perShardBytes:
		// Past half the bounds, keys back to full go without grace.
		sh.sweep(s, t, now, sweepPerInsert, sweepPerInsert)
		return
	}
	// A key larger than the others takes as many evictions as its size
	// needs; the loop ends when the shard is empty at worst.
	for sh.keys >= s.perShard || sh.bytes+need > s.perShardBytes {
		if sh.sweep(s, t, now, evictSample, 1) > 0 { // at a bound, every key back to full may go
			continue
		}
		switch sh.evict(s, now) {
		case evictedNone:
			return
		case evictedDenying:
			s.denyingEvictions.Add(1)
			s.evictions.Add(1)
		case evictedLive:
			s.evictions.Add(1)
		}
	}
}

// dropLog forgets the sliding log ls of key in t. The caller holds sh.mu.
func (sh *shard) dropLog(t *table, key string, ls *logState) {
	delete(t.logs, key)
	sh.keys--
	sh.bytes -= logBytes(key, cap(ls.entries))
}

// What a key costs the heap, for MaxBytes: an O(1) key its 64-byte entry,
// its index slot and tag at the index's load (3/8 to 3/4: 16 bytes), and a
// key longer than the entry holds in a second object; a sliding log its
// map slot, its logState and its entries, 16 bytes each, and its key.
// Objects are rounded up as the allocator's size classes round them.
func entryBytes(key string) int64 {
	n := int64(unsafe.Sizeof(entry{})) + 16
	if len(key) > len(entry{}.short) {
		n += allocBytes(len(key))
	}
	return n
}

func logBytes(key string, entries int) int64 {
	return 80 + allocBytes(len(key)) + allocBytes(entries*int(unsafe.Sizeof(algorithm.LogEntry{})))
}

// allocBytes rounds n up as Go's allocator does, near enough: to 16 bytes
// up to 1 KiB, to 128 up to 32 KiB, to 8 KiB pages beyond.
func allocBytes(n int) int64 {
	switch {
	case n <= 1024:
		return int64(n+15) &^ 15
	case n <= 32<<10:
		return int64(n+127) &^ 127
	}
	return int64(n+8191) &^ 8191
}

// sweep examines up to n keys of t, resuming where the last sweep ended,
// and deletes the ones back to full at before, up to most of them. Keys
// locked by a Take are passed over. It returns how many it deleted.
func (sh *shard) sweep(s *Store, t *table, before int64, n, most int) (deleted int) {
	if t.logs != nil {
		for k, ls := range t.logs { // from a random place
			if ls.exp <= before {
				sh.dropLog(t, k, ls)
				if deleted++; deleted == most {
					return deleted
				}
			}
			if n--; n == 0 {
				return deleted
			}
		}
		return deleted
	}
	ix := t.ix.Load()
	for range min(ix.n, sweepScan) {
		i := t.step(ix)
		e, st, ok := ix.tryLockAt(i, t.swaps)
		if !ok {
			continue
		}
		if t.exp(st) <= before {
			sh.removeAt(s, t, ix, i, e)
			if deleted++; deleted == most || t.ix.Load() != ix { // or rebuilt smaller
				return deleted
			}
		} else {
			e.unlock(st, t.swaps, t.unitOf(st.C))
		}
		if n--; n == 0 {
			return deleted
		}
	}
	return deleted
}

// What evict removed.
const (
	evictedNone    = iota // nothing: the shard is empty, or every key is in use
	evictedFull           // a key back to full, which grants nobody anything
	evictedLive           // a live key not denying: its client may get a fresh quota
	evictedDenying        // a key denying its client, when every key looked at was: it frees one over its limit
)

// evictScan bounds the keys evict looks at while all it has seen deny.
const evictScan = 256

// evict removes one key of the shard, chosen from a sample of the keys
// after where the last sweep ended: the first back to full (expired);
// failing that the soonest to expire of those not denying, so that a flood
// of new keys never frees a client held at its limit while the flood's own
// keys can go; and when every key looked at denies, the soonest to expire
// of them. It looks at evictSample keys, and on, up to evictScan, while
// every key seen denies. A sample, not a search: a new key at the bound
// costs a few more keys looked at, however full of live keys the shard is,
// and the sweep that runs on every insert finds the expired ones elsewhere.
func (sh *shard) evict(s *Store, now int64) int {
	var (
		vt      *table
		vi      uint64
		ve      *entry // locked
		vst     algorithm.State
		vkey    string
		vls     *logState
		best    int64
		vdenies bool
		n       int
	)
	// consider notes a candidate, locked if it is an entry, and reports
	// whether the search is over.
	// Whether a candidate denies is worked out only when it could change
	// the choice: a candidate that expires later than a best that does not
	// deny loses either way.
	consider := func(t *table, i uint64, e *entry, st algorithm.State, key string, ls *logState, exp int64) bool {
		var denies bool
		if vt == nil || vdenies || exp < best {
			if ls != nil {
				denies = t.logDenies(ls, now)
			} else {
				denies = t.denies(st, now)
			}
		}
		if vt == nil || vdenies && !denies || vdenies == denies && exp < best {
			if ve != nil {
				ve.unlock(vst, vt.swaps, vt.unitOf(vst.C))
			}
			vt, vi, ve, vst, vkey, vls, best, vdenies = t, i, e, st, key, ls, exp, denies
		} else if e != nil {
			e.unlock(st, t.swaps, t.unitOf(st.C))
		}
		n++
		return exp <= now || n >= evictSample && !vdenies || n == evictScan
	}
	done := false
	for _, t := range sh.list() {
		if t.logs != nil {
			for k, ls := range t.logs {
				if done = consider(t, 0, nil, algorithm.State{}, k, ls, ls.exp); done {
					break
				}
			}
		} else {
			ix := t.ix.Load()
			for range ix.n {
				i := t.step(ix)
				e, st, ok := ix.tryLockAt(i, t.swaps)
				if !ok {
					continue
				}
				if done = consider(t, i, e, st, e.key, nil, t.exp(st)); done {
					break
				}
			}
		}
		if done {
			break
		}
	}
	switch {
	case vt == nil:
		return evictedNone
	case ve != nil:
		sh.removeAt(s, vt, vt.ix.Load(), vi, ve)
	default:
		sh.dropLog(vt, vkey, vls)
	}
	switch {
	case best <= now:
		return evictedFull
	case vdenies:
		return evictedDenying
	}
	return evictedLive
}

// denies reports whether state st of t, at now, has nothing left under one
// of the limits t used lately: its client is held at a limit. The caller
// holds the shard lock.
func (t *table) denies(st algorithm.State, now int64) bool {
	for i := range t.configs {
		if c := t.configs[i].Load(); c != nil {
			if _, r := algorithm.Status(t.alg, st, &c.params, now, 0); r.Remaining == 0 {
				return true
			}
		}
	}
	return false
}

// logDenies is denies for a sliding log.
func (t *table) logDenies(ls *logState, now int64) bool {
	for i := range t.configs {
		if c := t.configs[i].Load(); c != nil {
			if _, r, _ := algorithm.SlidingLog(ls.entries, &c.params, now, 0); r.Remaining == 0 {
				return true
			}
		}
	}
	return false
}
