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
	if r := lookup(a); r != nil && r.admit != nil {
		return r.admit(s, p, now, cost)
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
	if r := lookup(a); r != nil && r.report != nil {
		return r.report(s, next, p, now)
	}
	panic("algorithm: Admitted called with " + a.String())
}

// Denied returns the Result of a request that Admit denied from s, next
// being the state Admit returned: Remaining, RetryAfter and ResetAfter
// (Allowed is false, Delay 0). For the GCRA and the leaky bucket it does
// not decide again; the other algorithms' denials are reported by Status.
// It returns scalars, as Admitted does.
func Denied(a sluice.Algorithm, s, next State, p *Params, now, cost int64) (remaining, retryAfter, resetAfter int64) {
	if r := lookup(a); r != nil && r.denied != nil {
		return r.denied(s, next, p, now)
	}
	_, r := Status(a, s, p, now, cost)
	return r.Remaining, r.RetryAfter, r.ResetAfter
}
