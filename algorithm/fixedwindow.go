package algorithm

// FixedWindow counts events in windows of Period aligned to the Unix epoch,
// so every instance agrees on the boundaries. It denies when count + cost
// exceeds Rate; denied requests do not count. Across a boundary it admits up
// to 2×Rate within one Period: the price of its single counter.
//
// State: A the start of the current window, B its count.
func FixedWindow(s State, p *Params, now, cost int64) (State, Result) {
	next, allowed := fixedAdmit(s, p, now, cost)
	remaining, reset := fixedReport(next, p, now)
	var retry int64
	if !allowed {
		retry = next.A + p.Period - now
	}
	return next, Result{Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// fixedAdmit is FixedWindow's admission: the window rolled to now, with
// cost counted when it fits.
func fixedAdmit(s State, p *Params, now, cost int64) (State, bool) {
	start, count := s.A, s.B
	// A clock gone back into an older window stays in the newest one;
	// durations are still measured from the caller's now.
	if w := floorWindow(now, p.Period); w > start {
		start, count = w, 0
	}
	allowed := count+cost <= p.Rate
	if allowed {
		count += cost
	}
	return State{start, count, 0}, allowed
}

// fixedReport returns Remaining and ResetAfter of the window s at now.
func fixedReport(s State, p *Params, now int64) (remaining, reset int64) {
	if s.B > 0 {
		reset = s.A + p.Period - now
	}
	return max(p.Rate-s.B, 0), reset // a forced cost can overfill the window
}

// fixedAdmitted is FixedWindow's Admitted.
func fixedAdmitted(_, next State, p *Params, now int64) (remaining, reset, delay int64) {
	remaining, reset = fixedReport(next, p, now)
	return remaining, reset, 0
}

// fixedRefund is FixedWindow's Refund: cost off the window taken falls in,
// while it is the current one.
func fixedRefund(s State, p *Params, _, taken, cost int64) State {
	if floorWindow(taken, p.Period) == s.A {
		s.B -= min(cost, s.B)
	}
	return s
}

// fixedFullAt is FixedWindow's FullAt: the window's end, once it counts.
func fixedFullAt(s State, p *Params) int64 {
	if s.B > 0 {
		return s.A + p.Period
	}
	return 0
}
