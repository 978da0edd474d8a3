package algorithm

import "github.com/sluicehq/sluice"

// FullAt returns the time at which the O(1) algorithm a's state s is back
// to full capacity, or 0 when it is full already at any time: the state's
// life, after which a store may forget it. It equals now + ResetAfter of a
// Result that produced s.
func FullAt(a sluice.Algorithm, s State, p *Params) int64 {
	if r := lookup(a); r != nil && r.fullAt != nil {
		return r.fullAt(s, p)
	}
	return 0
}

// Words returns how many of State's fields the O(1) algorithm a uses:
// stores keep no more. GCRA and the leaky bucket keep the rate their time
// is kept at beside it (so that a changed limit converts it), the windows
// their previous count or start, the token bucket its last refill.
func Words(a sluice.Algorithm) int {
	if r := lookup(a); r != nil && r.State[2] == "" && r.State[1] != "" {
		return 2
	}
	return 3
}
