package memstore

import (
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
)

// Extract removes every key for which keep reports false and returns what
// each had used at now, as a forced request of one of its limits: Taking
// them on another store makes that store hold what this one held, or a
// little more (a fraction of a request used counts as one; a window's or
// a log's count is put at now, so it leaves no sooner than it would
// have), never less. A key back to full is removed with no request; a
// debt past a key's capacity is handed as its capacity. Shard mode hands
// keys to their new owners with it. Takes go on meanwhile: a key is
// extracted under its shard's lock, so each Take sees it here or not.
func (s *Store) Extract(keep func(key string) bool, now time.Time) []sluice.Request {
	at := now.UnixMicro()
	var out []sluice.Request
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, t := range sh.list() {
			out = sh.extract(s, t, keep, at, out)
		}
		sh.mu.Unlock()
	}
	return out
}

// extract is Extract on t, appending to out. The caller holds sh.mu.
func (sh *shard) extract(s *Store, t *table, keep func(string) bool, now int64, out []sluice.Request) []sluice.Request {
	if t.logs != nil {
		for k, ls := range t.logs {
			if keep(k) {
				continue
			}
			if c := t.latest(0); c != nil {
				_, r, _ := algorithm.SlidingLog(ls.entries, &c.params, now, 0)
				out = appendUsed(out, k, c, r.Remaining)
			}
			sh.dropLog(t, k, ls) // deleting during range is allowed
		}
		return out
	}
	ix := t.ix.Load()
	for i := uint64(0); i < ix.n; i++ {
		e := ix.slot(i).Load()
		if e == nil || e == tombstone || keep(e.key) {
			continue
		}
		// Read and removed under the entry's lock: a Take sees the key
		// here, or finds it gone and waits for the shard lock.
		st, _ := e.lock(t.swaps) // entries in the index are live under the shard lock
		if c := t.latest(st.C); c != nil {
			_, r := algorithm.Status(t.alg, st, &c.params, now, 0)
			out = appendUsed(out, e.key, c, r.Remaining)
		}
		sh.removeAt(s, t, ix, i, e)
		if nx := t.ix.Load(); nx != ix { // rebuilt smaller: go on in the new one
			ix, i = nx, ^uint64(0)
		}
	}
	return out
}

// appendUsed appends the forced request of what a key of c's limit with
// remaining left has used, if anything.
func appendUsed(out []sluice.Request, key string, c *config, remaining int64) []sluice.Request {
	used := c.limit.Capacity() - remaining
	if used <= 0 {
		return out
	}
	return append(out, sluice.Request{Key: strings.Clone(key), Limit: c.limit, Cost: used, Force: true})
}

// latest returns the limit t used last, preferring one of rate (a GCRA
// state's, which names the rate it is kept at; 0 for none), or nil. The
// caller holds the shard lock.
func (t *table) latest(rate int64) *config {
	var last *config
	for i := range len(t.configs) {
		c := t.configs[(t.next+len(t.configs)-1-i)%len(t.configs)].Load()
		if c == nil {
			continue
		}
		if rate != 0 && c.params.Rate == rate {
			return c
		}
		if last == nil {
			last = c
		}
	}
	return last
}
