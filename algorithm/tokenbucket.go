package algorithm

// TokenBucket is a bucket of capacity Burst, refilled continuously at
// Rate/Period and starting full. A request of cost takes cost tokens when the
// bucket holds at least that many.
//
// The bucket is kept as a deficit so that the zero State is full: tokens =
// Burst − deficit + carry/Period, with 0 ≤ carry < Period holding the
// fraction of a token refilled so far, exactly.
//
// State: A the deficit in whole tokens, B the time of the last refill, C
// the carry.
func TokenBucket(s State, p *Params, now, cost int64) (State, Result) {
	next, allowed := tokenAdmit(s, p, now, cost)
	remaining, reset := tokenReport(next, p, now)
	var retry int64
	if !allowed {
		retry = next.B - now + refillTime(next.A+cost-p.Burst, next.C, p)
	}
	return next, Result{Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// tokenAdmit is TokenBucket's admission: the bucket refilled to now and,
// when cost fits, with cost taken.
func tokenAdmit(s State, p *Params, now, cost int64) (next State, allowed bool) {
	deficit, last, carry := s.A, s.B, s.C
	if now > last {
		if deficit > 0 {
			q, r := mulDivBy(now-last, p.Rate, &p.byPeriod)
			if r += carry; r >= p.Period {
				q, r = q+1, r-p.Period
			}
			if q >= deficit {
				deficit, carry = 0, 0
			} else {
				deficit, carry = deficit-q, r
			}
		}
		last = now
	}
	// A clock gone back refills nothing; durations count from the caller's
	// now, and the refill resumes at last.
	if allowed = deficit+cost <= p.Burst; allowed {
		deficit += cost
	}
	return State{deficit, last, carry}, allowed
}

// tokenReport returns Remaining and ResetAfter of the bucket next at now.
func tokenReport(next State, p *Params, now int64) (remaining, reset int64) {
	deficit, behind := next.A, next.B-now
	if deficit > 0 {
		reset = behind + refillTime(deficit, next.C, p)
	}
	return max(p.Burst-deficit, 0), reset // a forced cost can leave a debt
}

// refillTime returns how long until need whole tokens have been refilled,
// carry/Period of the first being there already: ceil((need×P − carry)/R).
func refillTime(need, carry int64, p *Params) int64 {
	q, r := mulDivBy(need, p.Period, &p.byRate)
	return q + ceilDiv(r-carry, p.Rate)
}

// tokenAdmitted is TokenBucket's Admitted.
func tokenAdmitted(_, next State, p *Params, now int64) (remaining, reset, delay int64) {
	remaining, reset = tokenReport(next, p, now)
	return remaining, reset, 0
}

// tokenRecord is TokenBucket's Apply: cost into the deficit, past Burst
// if it must.
func tokenRecord(s State, _ *Params, cost int64) State {
	s.A += cost
	return s
}

// tokenFullAt is TokenBucket's FullAt: when the deficit has refilled.
func tokenFullAt(s State, p *Params) int64 {
	if s.A > 0 {
		return s.B + refillTime(s.A, s.C, p)
	}
	return 0
}
