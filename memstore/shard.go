package memstore

import (
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
)

// shard is one lock's worth of keys. Its fields are guarded by mu.
type shard struct {
	mu     sync.Mutex
	tables []*table
	keys   int
	_      [32]byte // keep neighbouring shards' locks off one cache line
}

// table holds the keys of one (algorithm, period): state is identified by
// both, so one key can carry several limits.
type table struct {
	alg    sluice.Algorithm
	period int64
	limit  sluice.Limit     // the limit last used here,
	params algorithm.Params // and its params: most tables see one limit
	// slowest is the params of the lowest rate seen here: a token bucket
	// refills at its key's own rate, which the table does not keep, so
	// expiry is judged at the slowest, never before a key is full.
	slowest algorithm.Params
	idx     map[string]uint32    // O(1) algorithms: key → slot in slab
	slab    slab                 // O(1) algorithms' entries
	logs    map[string]*logState // SlidingLog
}

type logState struct {
	entries []algorithm.LogEntry
	exp     int64
}

// pending is a decided request not yet written.
type pending struct {
	sh     *shard
	now    int64
	t      *table
	slot   uint32 // the key's slot, when found
	found  bool
	old    algorithm.State      // state loaded, O(1) algorithms
	log    []algorithm.LogEntry // log loaded, SlidingLog
	s      algorithm.State      // state decided
	forced bool                 // Force: recorded although it did not fit
	drop   int
	at     int64
	res    algorithm.Result
}

func uintptrOf(s *shard) uintptr { return uintptr(unsafe.Pointer(s)) }

// table returns the table for (alg, period), creating it when create is set.
// The caller holds sh.mu.
func (sh *shard) table(alg sluice.Algorithm, period int64, create bool) *table {
	for _, t := range sh.tables {
		if t.alg == alg && t.period == period {
			return t
		}
	}
	if !create {
		return nil
	}
	t := &table{alg: alg, period: period}
	if alg == sluice.SlidingLog {
		t.logs = make(map[string]*logState)
	} else {
		t.idx = make(map[string]uint32)
		t.slab.stride = algorithm.Words(alg)
	}
	sh.tables = append(sh.tables, t)
	return t
}

// decide runs the algorithm for req at now into p without writing. It
// validates req's limit unless its table has seen the same limit already;
// key and cost are the caller's to check. The caller holds sh.mu.
func (sh *shard) decide(req *sluice.Request, now int64, p *pending) error {
	alg := req.Limit.Algorithm.Resolved()
	p.t = sh.table(alg, int64(req.Limit.Period/time.Microsecond), false)
	var params *algorithm.Params
	if p.t != nil && p.t.limit == req.Limit {
		params = &p.t.params // the usual case: no copy, no validation
	} else {
		if err := req.Limit.Validate(); err != nil {
			return err
		}
		fresh := algorithm.ParamsOf(req.Limit)
		params = &fresh
		if p.t == nil && req.Cost > 0 {
			p.t = sh.table(alg, fresh.Period, true)
		}
		if p.t != nil {
			p.t.limit, p.t.params = req.Limit, fresh
			if p.t.slowest.Rate == 0 || fresh.Rate < p.t.slowest.Rate {
				p.t.slowest = fresh
			}
		}
	}
	if alg == sluice.SlidingLog {
		if p.t != nil {
			if ls := p.t.logs[req.Key]; ls != nil {
				p.log = ls.entries
			}
		}
		p.drop, p.res, p.at = algorithm.TakeLog(p.log, params, now, req.Cost)
		p.forced = req.Force && req.Cost > 0
		if p.forced && !p.res.Allowed {
			p.res = algorithm.Result{RetryAfter: p.res.RetryAfter, ResetAfter: p.at + params.Period - now}
		}
		return nil
	}
	if p.t != nil {
		if p.slot, p.found = p.t.idx[req.Key]; p.found {
			p.old = p.t.slab.load(p.slot) // expired or not, it decides as a fresh state would
		}
	}
	if req.Cost > 0 {
		p.s, p.res = algorithm.Status(alg, p.old, params, now, req.Cost)
	} else {
		p.s, p.res = algorithm.Take(alg, p.old, params, now, 0) // a peek
	}
	p.forced = req.Force && req.Cost > 0
	if p.forced && !p.res.Allowed {
		// Record it anyway: what remains is nothing, until the debt is paid.
		p.s = algorithm.Apply(alg, p.old, params, now, req.Cost)
		_, after := algorithm.Status(alg, p.s, params, now, 0)
		p.res = algorithm.Result{RetryAfter: p.res.RetryAfter, ResetAfter: after.ResetAfter}
	}
	return nil
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

// commit writes the state decided into p. The caller holds sh.mu and has
// not changed the shard since decide, unless recheck is set.
func (sh *shard) commit(s *Store, req *sluice.Request, now int64, p *pending, recheck bool) {
	t := p.t
	exp := now + p.res.ResetAfter
	if t.logs != nil {
		ls := t.logs[req.Key]
		if ls == nil {
			sh.makeRoom(s, t, now)
			ls = &logState{}
			t.logs[strings.Clone(req.Key)] = ls
			sh.keys++
		}
		n := copy(ls.entries, ls.entries[p.drop:])
		ls.entries = ls.entries[:n]
		if n > 0 && ls.entries[n-1].T == p.at {
			ls.entries[n-1].Cost += req.Cost
		} else {
			ls.entries = append(ls.entries, algorithm.LogEntry{T: p.at, Cost: req.Cost})
		}
		ls.exp = exp
		return
	}
	if recheck {
		p.slot, p.found = t.idx[req.Key]
	}
	if !p.found {
		sh.makeRoom(s, t, now)
		p.slot = t.slab.alloc()
		t.idx[strings.Clone(req.Key)] = p.slot // never retain the caller's buffer
		sh.keys++
	}
	t.slab.store(p.slot, p.s)
}

// exp returns when t's state in slot i is back to full (µs).
func (t *table) exp(i uint32) int64 {
	return algorithm.FullAt(t.alg, t.slab.load(i), &t.slowest)
}

func (sh *shard) remove(t *table, key string) {
	if t.logs != nil {
		if _, ok := t.logs[key]; ok {
			delete(t.logs, key)
			sh.keys--
		}
		return
	}
	if i, ok := t.idx[key]; ok {
		delete(t.idx, key)
		t.slab.release(i)
		sh.keys--
	}
}

// makeRoom is called before inserting a key into t: it sweeps a few expired
// keys and, at the shard's bound, evicts one. The caller holds sh.mu.
func (sh *shard) makeRoom(s *Store, t *table, now int64) {
	sh.sweep(t, now, sweepPerInsert)
	if sh.keys < s.perShard {
		return
	}
	victimTable, victim, live := sh.pickVictim(now)
	if victimTable == nil {
		return
	}
	sh.remove(victimTable, victim)
	if live {
		s.evictions.Add(1)
	}
}

// sweep examines up to n keys of t, from a random place, and deletes the
// expired ones.
func (sh *shard) sweep(t *table, now int64, n int) {
	for k, i := range t.idx {
		if t.exp(i) <= now {
			delete(t.idx, k)
			t.slab.release(i)
			sh.keys--
		}
		if n--; n == 0 {
			return
		}
	}
	for k, ls := range t.logs {
		if ls.exp <= now {
			delete(t.logs, k)
			sh.keys--
		}
		if n--; n == 0 {
			return
		}
	}
}

// pickVictim looks at up to evictScan keys across the shard's tables and
// returns the first back to full (expired); failing that, the soonest to
// expire among the first evictSample looked at, which is live.
func (sh *shard) pickVictim(now int64) (vt *table, key string, live bool) {
	best := int64(0)
	n := 0
	consider := func(t *table, k string, exp int64) bool {
		if exp <= now {
			vt, key, best = t, k, exp
			return true
		}
		if n < evictSample && (vt == nil || exp < best) {
			vt, key, best = t, k, exp
		}
		n++
		return n == evictScan
	}
	for _, t := range sh.tables {
		for k, i := range t.idx {
			if consider(t, k, t.exp(i)) {
				return vt, key, best > now
			}
		}
		for k, ls := range t.logs {
			if consider(t, k, ls.exp) {
				return vt, key, best > now
			}
		}
	}
	return vt, key, vt != nil && best > now
}
