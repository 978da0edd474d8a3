package algorithm

// FixedWindow counts events in windows of Period aligned to the Unix epoch,
// so every instance agrees on the boundaries. It denies when count + cost
// exceeds Rate; denied requests do not count. Across a boundary it admits up
// to 2×Rate within one Period: the price of its single counter.
//
// State: A the start of the current window, B its count.
func FixedWindow(s State, p *Params, now, cost int64) (State, Result) {
	start, count := s.A, s.B
	// A clock gone back into an older window stays in the newest one;
	// durations are still measured from the caller's now.
	if w := floorWindow(now, p.Period); w > start {
		start, count = w, 0
	}
	var r Result
	if count+cost <= p.Rate {
		r.Allowed = true
		count += cost
	} else {
		r.RetryAfter = start + p.Period - now
	}
	r.Remaining = max(p.Rate-count, 0) // a forced cost can overfill the window
	if count > 0 {
		r.ResetAfter = start + p.Period - now
	}
	return State{start, count, 0}, r
}
