package algorithm

import "github.com/sluicehq/sluice"

// Refund returns the O(1) algorithm a's state after giving back, at now,
// cost that was taken at the time taken, as far as the state still holds
// that take: a settlement's refund (sluice.Request.Refund). It never
// leaves a key with more than its capacity, nor a window with a count
// below zero, and it is never refused. What each gives back:
//
//   - FixedWindow and Calendar: cost from the window taken falls in, while
//     it is the current one; nothing once the window has moved on, for its
//     count is gone with it.
//   - SlidingWindow: cost from the window taken falls in, the current one
//     or the previous one (where it still weighs on the sliding window);
//     nothing from older windows.
//   - TokenBucket, GCRA and LeakyBucket: cost less what the bucket has
//     refilled since taken, exactly (a fraction of a token included), up
//     to full: as many tokens back into the bucket, or cost emission
//     intervals less the time since taken off the TAT (the leaky bucket's
//     queue shorter by as many). What refilled since
//     the take has given that part of it back already; giving it again
//     would let a key pass its capacity plus its refill. The refill is
//     counted at p's rate: after a limit change, the new limit's.
//
// Windows read no clock: a state that a later request has not rolled yet
// is the state of the window it was written in.
func Refund(a sluice.Algorithm, s State, p *Params, now, taken, cost int64) State {
	if r := lookup(a); r != nil && r.refund != nil {
		return r.refund(s, p, now, taken, cost)
	}
	panic("algorithm: Refund called with " + a.String())
}

// tokenBucketRefund is TokenBucket's Refund.
func tokenBucketRefund(s State, p *Params, now, taken, cost int64) State {
	return tokenRefund(s, p, now-taken, cost)
}

// tokenRefund returns the token bucket s after giving back cost less
// what p refills in elapsed µs, exactly: cost − elapsed×Rate/Period
// tokens, their whole part off the deficit and their fraction into the
// carry, up to full. It gives nothing once cost has refilled.
func tokenRefund(s State, p *Params, elapsed, cost int64) State {
	whole, frac := cost, int64(0) // given back: whole + frac/Period tokens
	if elapsed > 0 {
		if q, r := mulDiv(cost, p.Period, p.Rate); elapsed > q || elapsed == q && r == 0 {
			return s
		}
		n, m := mulDiv(elapsed, p.Rate, p.Period) // refilled: n + m/Period, below cost
		whole = cost - n
		if m > 0 {
			whole, frac = whole-1, p.Period-m
		}
	}
	if s.C += frac; s.C >= p.Period {
		s.C, whole = s.C-p.Period, whole+1
	}
	if s.A -= whole; s.A <= 0 {
		s.A, s.C = 0, 0 // full: no fraction of a token beyond it
	}
	return s
}

// RefundLog returns the sliding log at now after giving back cost taken
// at the time taken: cost off the entries at or after taken, the oldest
// of them first (the refunded request's own entry is the oldest there),
// removing those it empties. Once taken has left the window, the
// request's entry has too and nothing is given back. It does not modify
// log.
func RefundLog(log []LogEntry, p *Params, now, taken, cost int64) []LogEntry {
	if taken <= now-p.Period {
		return log
	}
	i := 0
	for i < len(log) && log[i].T < taken {
		i++
	}
	out := make([]LogEntry, 0, len(log))
	out = append(out, log[:i]...)
	for _, e := range log[i:] {
		give := min(cost, e.Cost)
		e.Cost, cost = e.Cost-give, cost-give
		if e.Cost > 0 {
			out = append(out, e)
		}
	}
	return out
}
