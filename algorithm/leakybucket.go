package algorithm

// LeakyBucket is a queue of capacity Burst draining at Rate/Period. A request
// of cost is admitted while the queue has room; its Delay is its place in the
// queue divided by the rate, so requests that each wait their Delay leave at
// no more than the rate: nginx limit_req without nodelay. The first request
// into an empty queue leaves at once.
//
// Used as a meter (nginx nodelay: ignore Delay) it admits exactly what
// TokenBucket admits with the same parameters.
//
// State: A the time the queue drains, whole microseconds, B its
// remainder in units of 1/Rate µs, as in GCRA.
func LeakyBucket(s State, p *Params, now, cost int64) (State, Result) {
	dq, dr := tatAt(s, now) // departure of this request
	nq, nr := tatAdd(dq, dr, cost, p)
	var res Result
	if res.Allowed = fitsBurst(nq, nr, now, p); res.Allowed {
		if cost > 0 {
			res.Delay = tatDelay(dq, dr, now)
		}
		dq, dr = nq, nr
	} else {
		res.RetryAfter = overBurst(nq, nr, now, p)
	}
	res.Remaining = tatRemaining(dq, dr, now, p)
	res.ResetAfter = tatDelay(dq, dr, now)
	return State{dq, dr, 0}, res
}
