package algorithm_test

import (
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
)

// machine holds one key's state for any algorithm, committing like a store:
// only allowed requests with a positive cost change it.
type machine struct {
	alg sluice.Algorithm
	p   algorithm.Params
	s   algorithm.State
	log []algorithm.LogEntry
}

func newMachine(alg sluice.Algorithm, rate, periodUS, burst int64) *machine {
	l := sluice.Limit{Algorithm: alg, Rate: rate, Period: 0, Burst: burst}
	p := algorithm.NewParams(rate, periodUS, l.Capacity())
	return &machine{alg: alg, p: p}
}

// try decides without committing.
func (m *machine) try(now, cost int64) algorithm.Result {
	if m.alg == sluice.SlidingLog {
		_, r, _ := algorithm.TakeLog(m.log, &m.p, now, cost)
		return r
	}
	_, r := algorithm.Take(m.alg, m.s, &m.p, now, cost)
	return r
}

func (m *machine) take(now, cost int64) algorithm.Result {
	if m.alg == sluice.SlidingLog {
		drop, r, at := algorithm.TakeLog(m.log, &m.p, now, cost)
		if r.Allowed && cost > 0 {
			m.log = append(m.log[drop:], algorithm.LogEntry{T: at, Cost: cost})
		}
		return r
	}
	s, r := algorithm.Take(m.alg, m.s, &m.p, now, cost)
	if r.Allowed && cost > 0 {
		m.s = s
	}
	return r
}

func (m *machine) clone() *machine {
	c := *m
	c.log = append([]algorithm.LogEntry(nil), m.log...)
	return &c
}

// checkResult verifies what one Result promises, by asking the state
// again: Remaining is the largest cost allowed now, RetryAfter is the
// first instant the same request is allowed, and at ResetAfter the state
// is full. before is the machine before r was decided.
func checkResult(before *machine, now, cost int64, r algorithm.Result) error {
	capacity := before.p.Burst
	if before.alg == sluice.FixedWindow || before.alg == sluice.SlidingLog || before.alg == sluice.SlidingWindow {
		capacity = before.p.Rate
	}
	after := before.clone()
	if r.Allowed && cost > 0 {
		after.take(now, cost)
	}
	if r.Remaining < 0 || r.Remaining > capacity {
		return fmt.Errorf("remaining %d outside [0, %d]", r.Remaining, capacity)
	}
	if r.Remaining > 0 && !after.try(now, r.Remaining).Allowed {
		return fmt.Errorf("remaining %d, but a request of that cost is denied", r.Remaining)
	}
	if r.Remaining < capacity && after.try(now, r.Remaining+1).Allowed {
		return fmt.Errorf("remaining %d, but a request of %d is allowed", r.Remaining, r.Remaining+1)
	}
	if r.Allowed != (r.RetryAfter == 0) {
		return fmt.Errorf("allowed %v with retry after %d", r.Allowed, r.RetryAfter)
	}
	if !r.Allowed && cost > 0 {
		if !before.try(now+r.RetryAfter, cost).Allowed {
			return fmt.Errorf("retry after %dµs, but the request is still denied then", r.RetryAfter)
		}
		if before.try(now+r.RetryAfter-1, cost).Allowed {
			return fmt.Errorf("retry after %dµs, but the request is allowed 1µs sooner", r.RetryAfter)
		}
	}
	if r.ResetAfter < 0 {
		return fmt.Errorf("negative reset after %d", r.ResetAfter)
	}
	if full := after.try(now+r.ResetAfter, 0); full.Remaining != capacity {
		return fmt.Errorf("reset after %dµs, but only %d of %d remain then", r.ResetAfter, full.Remaining, capacity)
	}
	if r.ResetAfter > 0 {
		if early := after.try(now+r.ResetAfter-1, 0); early.Remaining == capacity && before.alg != sluice.FixedWindow && before.alg != sluice.SlidingWindow {
			return fmt.Errorf("reset after %dµs, but full 1µs sooner", r.ResetAfter)
		}
	}
	if r.Delay < 0 || (r.Delay > 0 && before.alg != sluice.LeakyBucket) {
		return fmt.Errorf("delay %d", r.Delay)
	}
	return nil
}
