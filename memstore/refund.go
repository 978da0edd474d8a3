package memstore

import (
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
)

// refund gives req.Cost back to the state of req's key, as taken at
// req.Refund (algorithm.Refund, algorithm.RefundLog), under the shard
// lock, and reports the state after it at now. A key the store does not
// hold has nothing to give back: it is full.
func (s *Store) refund(req *sluice.Request, now int64) (sluice.Decision, error) {
	if err := req.Limit.Validate(); err != nil {
		return sluice.Decision{}, err
	}
	alg := req.Limit.Algorithm.Resolved()
	params := algorithm.ParamsOf(req.Limit)
	taken := req.Refund.UnixMicro()
	h := s.hash(req.Key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.table(&req.Limit)
	var res algorithm.Result
	switch {
	case alg == sluice.SlidingLog:
		var log []algorithm.LogEntry
		if t != nil {
			if ls := t.logs[req.Key]; ls != nil {
				n := copy(ls.entries, algorithm.RefundLog(ls.entries, &params, now, taken, req.Cost))
				ls.entries = ls.entries[:n]
				log = ls.entries
			}
		}
		_, res, _ = algorithm.SlidingLog(log, &params, now, 0)
	default:
		var st algorithm.State
		if t != nil {
			if e := t.ix.Load().find(h, req.Key); e != nil {
				old, _ := e.lock(t.swaps) // entries in the index are live under the shard lock
				st = algorithm.Refund(alg, old, &params, now, taken, req.Cost)
				e.unlock(st, t.swaps, t.unitOf(st.C))
			}
		}
		_, res = algorithm.Status(alg, st, &params, now, 0)
	}
	res.Allowed = true
	return res.Decision(req.Limit), nil
}
