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

// Words returns how many of State's fields the O(1) algorithm a uses:
// stores keep no more. GCRA and the leaky bucket keep the rate their time
// is kept at beside it (so that a changed limit converts it), the windows
// their previous count or start, the token bucket its last refill.
func Words(a sluice.Algorithm) int {
	if a.Resolved() == sluice.FixedWindow {
		return 2
	}
	return 3
}
