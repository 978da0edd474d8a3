// Package algorithm holds sluice's rate-limiting algorithms as pure state
// machines: each is a function of (state, params, now, cost) that returns the
// next state and a Result, with no locks, clocks or I/O. Stores load the
// state, call the function under their own atomicity (a mutex, a Lua script)
// and write the state back only when every request of a batch is allowed.
//
// Units: times and durations are int64 microseconds; Params.Period too. All
// arithmetic is integer and exact; products that could exceed 64 bits go
// through mulDiv. The Redis store's Lua scripts are line-by-line
// transliterations of these functions, so both decide identically.
//
// The zero State is a key never seen: full capacity.
//
// Time that goes backwards (a now earlier than one the state has seen) is
// treated as the latest time seen, so it never admits more.
package algorithm

import (
	"cmp"
	"time"

	"github.com/sluicehq/sluice"
)

// Params is a Limit in the algorithms' units, with the exact fractions the
// algorithms need precomputed. Make it with NewParams or ParamsOf; stores
// cache it per limit, so a decision divides as little as it can.
type Params struct {
	Rate   int64 // events per Period
	Period int64 // microseconds
	Burst  int64 // capacity, resolved: never 0

	tq, tr int64 // emission interval Period/Rate: whole µs and remainder over Rate
	bq, br int64 // Burst × Period/Rate, likewise

	byRate, byPeriod divisor // division by Rate and by Period without a divide instruction

	zone *time.Location // a Calendar's; nil for every other algorithm
}

// NewParams returns the Params of rate events per period (µs) with capacity
// burst, all positive.
func NewParams(rate, period, burst int64) Params {
	p := Params{Rate: rate, Period: period, Burst: burst}
	p.tq, p.tr = mulDiv(1, period, rate)
	p.bq, p.br = mulDiv(burst, period, rate)
	p.byRate, p.byPeriod = newDivisor(uint64(rate)), newDivisor(uint64(period))
	return p
}

// ParamsOf converts a validated Limit.
func ParamsOf(l sluice.Limit) Params {
	p := NewParams(l.Rate, int64(l.Period/time.Microsecond), l.Capacity())
	if l.Algorithm == sluice.Calendar {
		p.zone = cmp.Or(l.Zone, time.UTC)
	}
	return p
}

// State is the fixed-size state of the O(1) algorithms. Its fields mean
// different things per algorithm; see each function. (A struct, not an
// array: Go passes structs of words in registers.)
type State struct{ A, B, C int64 }

// Result is one decision, in microseconds.
type Result struct {
	Allowed    bool
	Remaining  int64
	RetryAfter int64 // until this request would be allowed; 0 when allowed
	ResetAfter int64 // until the state is back to full
	Delay      int64 // shaping delay (leaky bucket); 0 otherwise
}

// Take runs the O(1) algorithm a (every algorithm but SlidingLog, which
// keeps a log: see TakeLog). It panics for SlidingLog.
//
// Cost 0 peeks: the Result says whether a request of cost 1 would be
// allowed (with its RetryAfter and Delay) and reports the remaining capacity
// of the unchanged state.
func Take(a sluice.Algorithm, s State, p *Params, now, cost int64) (State, Result) {
	if cost == 0 {
		_, one := Status(a, s, p, now, 1)
		s, r := Status(a, s, p, now, 0)
		r.Allowed, r.RetryAfter, r.Delay = one.Allowed, one.RetryAfter, one.Delay
		return s, r
	}
	return Status(a, s, p, now, cost)
}

// Status runs the O(1) algorithm a without peek semantics: with cost 0 it
// reports the state at now (Allowed, Remaining, ResetAfter). Stores use it
// to report the limits of a denied batch that would have allowed.
func Status(a sluice.Algorithm, s State, p *Params, now, cost int64) (State, Result) {
	if r := lookup(a); r != nil && r.status != nil {
		return r.status(s, p, now, cost)
	}
	panic("algorithm: Status called with " + a.String())
}

// Decision converts r into the root package's Decision for limit l.
func (r Result) Decision(l sluice.Limit) sluice.Decision {
	return sluice.Decision{
		Allowed:    r.Allowed,
		Limit:      l,
		Remaining:  r.Remaining,
		RetryAfter: time.Duration(r.RetryAfter) * time.Microsecond,
		ResetAfter: time.Duration(r.ResetAfter) * time.Microsecond,
		Delay:      time.Duration(r.Delay) * time.Microsecond,
	}
}
