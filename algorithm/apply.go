package algorithm

import "github.com/sluicehq/sluice"

// Apply returns the O(1) algorithm a's state after recording cost at now
// whether or not it fits: windows count it, buckets go into debt (a
// deficit past Burst, a TAT past the burst), so that later requests wait it
// out. Stores use it for sluice.Request.Force.
func Apply(a sluice.Algorithm, s State, p *Params, now, cost int64) State {
	s, _ = Status(a, s, p, now, 0) // roll windows, refill buckets
	return lookup(a).record(s, p, cost)
}
