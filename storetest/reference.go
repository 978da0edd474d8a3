package storetest

import (
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
)

// reference is the sequential model every Store must match: package
// algorithm applied to a map, all-or-nothing, with no expiry (a state back
// to full decides as a fresh one).
type reference struct {
	states map[refKey]algorithm.State
	logs   map[refKey][]algorithm.LogEntry
}

type refKey struct {
	key    string
	alg    sluice.Algorithm
	period int64
}

func newReference() *reference {
	return &reference{states: map[refKey]algorithm.State{}, logs: map[refKey][]algorithm.LogEntry{}}
}

// take decides reqs at now (µs) as a batch.
func (m *reference) take(reqs []sluice.Request, now int64) []sluice.Decision {
	out := make([]sluice.Decision, len(reqs))
	type next struct {
		s    algorithm.State
		drop int
		at   int64
	}
	nexts := make([]next, len(reqs))
	all := true
	for i, r := range reqs {
		k, p := m.keyOf(r), algorithm.ParamsOf(r.Limit)
		var res algorithm.Result
		if k.alg == sluice.SlidingLog {
			nexts[i].drop, res, nexts[i].at = algorithm.TakeLog(m.logs[k], &p, now, r.Cost)
		} else {
			nexts[i].s, res = algorithm.Take(k.alg, m.states[k], &p, now, r.Cost)
		}
		out[i] = res.Decision(r.Limit)
		all = all && res.Allowed
	}
	for i, r := range reqs {
		k, p := m.keyOf(r), algorithm.ParamsOf(r.Limit)
		switch {
		case !all && out[i].Allowed && k.alg == sluice.SlidingLog:
			_, res, _ := algorithm.SlidingLog(m.logs[k], &p, now, 0)
			out[i] = res.Decision(r.Limit)
		case !all && out[i].Allowed:
			_, res := algorithm.Status(k.alg, m.states[k], &p, now, 0)
			out[i] = res.Decision(r.Limit)
		case !all || r.Cost == 0:
		case k.alg == sluice.SlidingLog:
			log := append([]algorithm.LogEntry(nil), m.logs[k][nexts[i].drop:]...)
			if n := len(log); n > 0 && log[n-1].T == nexts[i].at {
				log[n-1].Cost += r.Cost
			} else {
				log = append(log, algorithm.LogEntry{T: nexts[i].at, Cost: r.Cost})
			}
			m.logs[k] = log
		default:
			m.states[k] = nexts[i].s
		}
	}
	return out
}

func (m *reference) keyOf(r sluice.Request) refKey {
	return refKey{r.Key, r.Limit.Algorithm.Resolved(), algorithm.ParamsOf(r.Limit).Period}
}

// force records r's cost at now whether or not it fits (Request.Force).
func (m *reference) force(r sluice.Request, now int64) {
	k, p := m.keyOf(r), algorithm.ParamsOf(r.Limit)
	if k.alg == sluice.SlidingLog {
		drop, _, at := algorithm.TakeLog(m.logs[k], &p, now, 0)
		log := append([]algorithm.LogEntry(nil), m.logs[k][drop:]...)
		if n := len(log); n > 0 && log[n-1].T == at {
			log[n-1].Cost += r.Cost
		} else {
			log = append(log, algorithm.LogEntry{T: at, Cost: r.Cost})
		}
		m.logs[k] = log
		return
	}
	m.states[k] = algorithm.Apply(k.alg, m.states[k], &p, now, r.Cost)
}

// refund gives r's cost back at now, as taken at r.Refund.
func (m *reference) refund(r sluice.Request, now int64) {
	k, p := m.keyOf(r), algorithm.ParamsOf(r.Limit)
	taken := r.Refund.UnixMicro()
	if k.alg == sluice.SlidingLog {
		m.logs[k] = algorithm.RefundLog(m.logs[k], &p, now, taken, r.Cost)
		return
	}
	if s, ok := m.states[k]; ok {
		m.states[k] = algorithm.Refund(k.alg, s, &p, now, taken, r.Cost)
	}
}
