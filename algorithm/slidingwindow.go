package algorithm

// SlidingWindow is the sliding window counter: two epoch-aligned windows,
// the previous one weighted by how much of it the sliding window still
// covers. It admits when
//
//	prev × (Period − elapsed) / Period + curr + cost ≤ Rate
//
// evaluated exactly in integers. RetryAfter is solved from that formula.
//
// State: A the start of the current window, B its count, C the previous
// window's count.
func SlidingWindow(s State, p *Params, now, cost int64) (State, Result) {
	next, allowed := slidingAdmit(s, p, now, cost)
	remaining, reset := slidingReport(next, p, now)
	var retry int64
	if !allowed {
		retry = slidingRetry(next.C, next.B, cost, p, next.A, now)
	}
	return next, Result{Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// slidingAdmit is SlidingWindow's admission: the windows rolled to now,
// with cost counted in the current one when it fits.
func slidingAdmit(s State, p *Params, now, cost int64) (State, bool) {
	start, curr, prev := s.A, s.B, s.C
	P := p.Period
	switch w := floorWindow(now, P); {
	case w == start+P:
		start, prev, curr = w, curr, 0
	case w > start:
		start, prev, curr = w, 0, 0
	}
	// A clock gone back into an older window is read as the start of the
	// newest; durations are still measured from the caller's now.
	e := max(now-start, 0)    // elapsed in the current window: 0 ≤ e < P
	k := p.Rate - curr - cost // room left for the previous window's weight
	allowed := k >= 0 && prevFits(prev, P-e, P, k)
	if allowed {
		curr += cost
	}
	return State{start, curr, prev}, allowed
}

// slidingReport returns Remaining and ResetAfter of the windows s at now.
func slidingReport(s State, p *Params, now int64) (remaining, reset int64) {
	start, curr, prev := s.A, s.B, s.C
	P := p.Period
	e := max(now-start, 0)
	wq, wr := mulDivBy(prev, P-e, &p.byPeriod)
	if wr > 0 {
		wq++
	}
	switch {
	case curr > 0:
		reset = start + 2*P - now
	case prev > 0:
		reset = start + P - now
	}
	return max(p.Rate-curr-wq, 0), reset
}

// prevFits reports whether prev × left ≤ k × P.
func prevFits(prev, left, P, k int64) bool {
	q, r := mulDiv(prev, left, P)
	return q < k || (q == k && r == 0)
}

// slidingRetry returns how long until a request of cost fits.
func slidingRetry(prev, curr, cost int64, p *Params, start, now int64) int64 {
	P := p.Period
	if k := p.Rate - curr - cost; k >= 0 {
		// Only the previous window's weight is in the way: wait until
		// prev × (P − e') ≤ k × P, that is e' = P − floor(k × P / prev).
		kq, _ := mulDiv(k, P, prev)
		return start + P - kq - now
	}
	// The current window alone is too full: in the next one it becomes the
	// previous window. Solve curr × (P − e'') ≤ (Rate − cost) × P there.
	kq, _ := mulDiv(p.Rate-cost, P, curr)
	return start + P - now + max(P-kq, 0)
}

// slidingAdmitted is SlidingWindow's Admitted.
func slidingAdmitted(_, next State, p *Params, now int64) (remaining, reset, delay int64) {
	remaining, reset = slidingReport(next, p, now)
	return remaining, reset, 0
}

// slidingRefund is SlidingWindow's Refund: cost off the window taken falls
// in, the current one or the previous one.
func slidingRefund(s State, p *Params, _, taken, cost int64) State {
	switch floorWindow(taken, p.Period) {
	case s.A:
		s.B -= min(cost, s.B)
	case s.A - p.Period:
		s.C -= min(cost, s.C)
	}
	return s
}

// slidingFullAt is SlidingWindow's FullAt: the end of the window after
// the one that last counts.
func slidingFullAt(s State, p *Params) int64 {
	switch {
	case s.B > 0:
		return s.A + 2*p.Period
	case s.C > 0:
		return s.A + p.Period
	}
	return 0
}
