package algorithm

import "github.com/sluicehq/sluice"

// FullAt returns the time at which the O(1) algorithm a's state s is back
// to full capacity, or 0 when it is full already at any time: the state's
// life, after which a store may forget it. It equals now + ResetAfter of a
// Result that produced s.
func FullAt(a sluice.Algorithm, s State, p *Params) int64 {
	switch a.Resolved() {
	case sluice.FixedWindow:
		if s.B > 0 {
			return s.A + p.Period
		}
	case sluice.SlidingWindow:
		switch {
		case s.B > 0:
			return s.A + 2*p.Period
		case s.C > 0:
			return s.A + p.Period
		}
	case sluice.Calendar:
		if s.B > 0 {
			return s.C
		}
	case sluice.TokenBucket:
		if s.A > 0 {
			return s.B + refillTime(s.A, s.C, p)
		}
	case sluice.LeakyBucket, sluice.GCRA:
		return tatDelay(s.A, s.B, 0)
	}
	return 0
}

// Words returns how many of State's fields algorithm a uses: stores keep
// no more.
func Words(a sluice.Algorithm) int {
	switch a.Resolved() {
	case sluice.SlidingWindow, sluice.TokenBucket, sluice.Calendar:
		return 3
	}
	return 2
}
