package algorithm

import "github.com/sluicehq/sluice"

// Admit is the admission of the O(1) algorithm a alone, for a request of
// cost above 0: the state after it when it fits (windows rolled, buckets
// refilled to now), and whether it fits. With Admitted it splits Status for
// a store that holds a lock, or keeps a compare-and-swap window, for the
// admission only: whenever Admit admits, Status(a, s, p, now, cost)
// returns next and Admitted(a, s, next, p, now). A denial writes nothing;
// its Result is Status's on s. It panics for SlidingLog.
func Admit(a sluice.Algorithm, s State, p *Params, now, cost int64) (next State, allowed bool) {
	switch a.Resolved() {
	case sluice.FixedWindow:
		return fixedAdmit(s, p, now, cost)
	case sluice.SlidingWindow:
		return slidingAdmit(s, p, now, cost)
	case sluice.TokenBucket:
		return tokenAdmit(s, p, now, cost)
	case sluice.LeakyBucket, sluice.GCRA:
		return gcraAdmit(s, p, now, cost)
	case sluice.Calendar:
		return calendarAdmit(s, p, now, cost)
	}
	panic("algorithm: Admit called with " + a.String())
}

// Admitted returns the Result of a request that Admit admitted from s to
// next, without deciding again: Remaining, ResetAfter and Delay (Allowed
// is true, RetryAfter 0).
//
// It returns scalars, not a Result: a Result has five fields, too many for
// the compiler to keep in registers, and every copy of one is a store and
// a reload in pieces that the processor cannot forward, which costs a
// decision more than its arithmetic.
func Admitted(a sluice.Algorithm, s, next State, p *Params, now int64) (remaining, resetAfter, delay int64) {
	switch a.Resolved() {
	case sluice.FixedWindow:
		remaining, resetAfter = fixedReport(next, p, now)
	case sluice.SlidingWindow:
		remaining, resetAfter = slidingReport(next, p, now)
	case sluice.TokenBucket:
		remaining, resetAfter = tokenReport(next, p, now)
	case sluice.LeakyBucket:
		remaining, resetAfter = gcraReport(next, p, now)
		dq, dr := tatAt(s, p, now)
		delay = tatDelay(dq, dr, now)
	case sluice.GCRA:
		remaining, resetAfter = gcraReport(next, p, now)
	case sluice.Calendar:
		remaining, resetAfter = calendarReport(next, p, now)
	default:
		panic("algorithm: Admitted called with " + a.String())
	}
	return remaining, resetAfter, delay
}

// Denied returns the Result of a request that Admit denied from s, next
// being the state Admit returned: Remaining, RetryAfter and ResetAfter
// (Allowed is false, Delay 0). For the GCRA and the leaky bucket it does
// not decide again; the other algorithms' denials are reported by Status.
// It returns scalars, as Admitted does.
func Denied(a sluice.Algorithm, s, next State, p *Params, now, cost int64) (remaining, retryAfter, resetAfter int64) {
	switch a.Resolved() {
	case sluice.LeakyBucket, sluice.GCRA:
		tq, tr := tatAt(s, p, now)
		return tatRemaining(tq, tr, now, p), overBurst(next.A, next.B, now, p), tatDelay(tq, tr, now)
	}
	_, r := Status(a, s, p, now, cost)
	return r.Remaining, r.RetryAfter, r.ResetAfter
}
