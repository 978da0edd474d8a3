package algorithm

// GCRA is the generic cell rate algorithm: one theoretical arrival time (TAT)
// per key. With emission interval T = Period/Rate and tolerance
// τ = (Burst − 1)×T, a request of cost is admitted when
//
//	max(TAT, now) + cost×T − now ≤ Burst×T
//
// so Burst requests may arrive at once and then one every T. It admits
// exactly what TokenBucket admits with the same parameters.
//
// T is rarely a whole number of microseconds, so TAT is kept as an exact
// fraction: whole microseconds plus a remainder in units of 1/Rate µs.
//
// A limit whose rate changes (a reload, an override, a plan) keeps what was
// used: a TAT kept at another rate is read as the same used capacity at the
// new one (see tatAt), so a key that used k of the old limit has the new
// Burst minus k left.
//
// State: A the TAT in whole microseconds, B its remainder (0 ≤ r < Rate),
// C the Rate it is kept at (0, as written by releases before it was kept:
// the limit's own).
func GCRA(s State, p *Params, now, cost int64) (State, Result) {
	next, allowed := gcraAdmit(s, p, now, cost)
	if allowed {
		remaining, reset := gcraReport(next, p, now)
		return next, Result{Allowed: true, Remaining: remaining, ResetAfter: reset}
	}
	s.A, s.B = tatAt(s, p, now)
	s.C = p.Rate
	return s, Result{
		RetryAfter: overBurst(next.A, next.B, now, p),
		Remaining:  tatRemaining(s.A, s.B, now, p),
		ResetAfter: tatDelay(s.A, s.B, now),
	}
}

// gcraAdmit is GCRA's admission: the TAT after taking cost at now, and
// whether it fits.
func gcraAdmit(s State, p *Params, now, cost int64) (next State, allowed bool) {
	tq, tr := tatAt(s, p, now)
	nq, nr := tatAdd(tq, tr, cost, p)
	return State{A: nq, B: nr, C: p.Rate}, fitsBurst(nq, nr, now, p)
}

// gcraReport returns the Result of a request of cost above 0 admitted from
// s to next: GCRA's or, with queue set, LeakyBucket's.
func gcraReport(next State, p *Params, now int64) (remaining, reset int64) {
	return tatRemaining(next.A, next.B, now, p), tatDelay(next.A, next.B, now)
}

// tatAt returns max(TAT, now) as whole and remainder at p's rate. A TAT
// kept at another rate (s.C) is converted first: its debt TAT − now, which
// is the used capacity times the old emission interval, becomes the same
// used capacity times p's, exactly: (debt × old rate) / p.Rate, in whole
// µs and a remainder over p.Rate. A debt that would pass maxDebt (forced
// costs far beyond any burst) is kept at maxDebt, which denies as surely.
func tatAt(s State, p *Params, now int64) (int64, int64) {
	switch {
	case s.A < now:
		return now, 0
	case s.C == 0 || s.C == p.Rate:
		return s.A, s.B
	}
	q, r := mulDiv(s.A-now, s.C, p.Rate)
	if q >= maxDebt {
		return now + maxDebt, 0
	}
	r += s.B // below p.Rate + s.C
	return now + q + r/p.Rate, r % p.Rate
}

// maxDebt bounds a converted TAT's distance from now: 2^50 µs, 35 years,
// which keeps it exact in the Lua twin's doubles.
const maxDebt = 1 << 50

// tatAdd returns (tq + tr/R) + cost×Period/Rate.
func tatAdd(tq, tr, cost int64, p *Params) (int64, int64) {
	iq, ir := p.tq, p.tr
	if cost != 1 {
		iq, ir = mulDiv(cost, p.Period, p.Rate)
	}
	tq, tr = tq+iq, tr+ir
	if tr >= p.Rate {
		tq, tr = tq+1, tr-p.Rate
	}
	return tq, tr
}

// fitsBurst reports whether TAT (nq + nr/R) − now ≤ Burst × Period / Rate.
func fitsBurst(nq, nr, now int64, p *Params) bool {
	d := nq - now
	return d < p.bq || (d == p.bq && nr <= p.br)
}

// overBurst returns ceil(TAT − now − Burst×T): how long until fitsBurst.
// Both remainders are below Rate, so the remainders' part is 0 or 1.
func overBurst(nq, nr, now int64, p *Params) int64 {
	d := nq - now - p.bq
	if nr > p.br {
		d++
	}
	return d
}

// tatRemaining returns Burst − ceil((TAT − now)/T), at least 0: how many
// events of cost 1 fit now.
func tatRemaining(tq, tr, now int64, p *Params) int64 {
	used, mr := mulDivBy(tq-now, p.Rate, &p.byPeriod)
	// + ceil((mr + tr)/Period), with 0 ≤ mr < Period, 0 ≤ tr < Rate: most
	// often 0 or 1, and never a divide instruction.
	switch x := mr + tr; {
	case x <= 0:
	case x <= p.Period:
		used++
	default:
		q, r := p.byPeriod.divmod(uint64(x))
		used += int64(q)
		if r != 0 {
			used++
		}
	}
	return max(p.Burst-used, 0)
}

// tatDelay returns ceil(TAT − now), at least 0.
func tatDelay(tq, tr, now int64) int64 {
	d := tq - now
	if tr > 0 {
		d++
	}
	return max(d, 0)
}

// gcraAdmitted is GCRA's Admitted.
func gcraAdmitted(_, next State, p *Params, now int64) (remaining, reset, delay int64) {
	remaining, reset = gcraReport(next, p, now)
	return remaining, reset, 0
}

// gcraDenied is Denied of GCRA and LeakyBucket, from the TAT Admit
// returned, without deciding again.
func gcraDenied(s, next State, p *Params, now int64) (remaining, retryAfter, resetAfter int64) {
	tq, tr := tatAt(s, p, now)
	return tatRemaining(tq, tr, now, p), overBurst(next.A, next.B, now, p), tatDelay(tq, tr, now)
}

// gcraRecord is Apply of GCRA and LeakyBucket: cost emission intervals
// onto the TAT, past the burst if they must.
func gcraRecord(s State, p *Params, cost int64) State {
	s.A, s.B = tatAdd(s.A, s.B, cost, p)
	return s
}

// gcraRefund is Refund of GCRA and LeakyBucket: cost emission intervals
// less the time since taken off the TAT, no earlier than now.
func gcraRefund(s State, p *Params, now, taken, cost int64) State {
	iq, ir := mulDiv(cost, p.Period, p.Rate)
	if elapsed := max(now-taken, 0); elapsed < iq || elapsed == iq && ir > 0 {
		// cost×T − elapsed off max(TAT, now): its whole µs and the
		// remainder below Rate.
		tq, tr := tatAt(s, p, now)
		tq, tr = tq-(iq-elapsed), tr-ir
		if tr < 0 {
			tq, tr = tq-1, tr+p.Rate
		}
		if tq < now {
			tq, tr = now, 0
		}
		s = State{A: tq, B: tr, C: p.Rate}
	}
	return s
}

// gcraFullAt is FullAt of GCRA and LeakyBucket: the TAT, rounded up.
func gcraFullAt(s State, _ *Params) int64 { return tatDelay(s.A, s.B, 0) }
