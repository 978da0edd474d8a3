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
// remainder in units of 1/Rate µs, C the Rate they are kept at, as in GCRA
// (a queue whose limit changes keeps its length in requests).
func LeakyBucket(s State, p *Params, now, cost int64) (State, Result) {
	// The queue admits what GCRA admits; a request leaves when the queue
	// ahead of it has drained.
	dq, dr := tatAt(s, p, now)
	next, res := GCRA(s, p, now, cost)
	if res.Allowed && cost > 0 {
		res.Delay = tatDelay(dq, dr, now)
	}
	return next, res
}

// leakyAdmitted is LeakyBucket's Admitted: GCRA's, with the Delay of the
// queue ahead of the request.
func leakyAdmitted(s, next State, p *Params, now int64) (remaining, reset, delay int64) {
	remaining, reset = gcraReport(next, p, now)
	dq, dr := tatAt(s, p, now)
	return remaining, reset, tatDelay(dq, dr, now)
}
