package algorithm

// LogEntry is one admitted request of a sliding log: its time in
// microseconds and its cost.
type LogEntry struct {
	T    int64
	Cost int64
}

// TakeLog is SlidingLog with Take's peek semantics for cost 0.
func TakeLog(log []LogEntry, p *Params, now, cost int64) (drop int, res Result, at int64) {
	if cost == 0 {
		_, one, _ := SlidingLog(log, p, now, 1)
		drop, res, at = SlidingLog(log, p, now, 0)
		res.Allowed, res.RetryAfter = one.Allowed, one.RetryAfter
		return drop, res, at
	}
	return SlidingLog(log, p, now, cost)
}

// SlidingLog is the exact sliding window: it keeps every admitted request
// and admits when the cost inside (now − Period, now] plus cost is at most
// Rate. Its state grows with Rate: up to Rate entries of 16 bytes.
//
// log is oldest first. SlidingLog returns how many leading entries have left
// the window (drop), the result, and the time at which an admitted request
// must be appended (now, or the newest entry's time if the clock went back).
// It does not modify log.
func SlidingLog(log []LogEntry, p *Params, now, cost int64) (drop int, res Result, at int64) {
	// A clock gone back is read as the newest entry's time; durations are
	// still measured from the caller's now.
	at = now
	if n := len(log); n > 0 && at < log[n-1].T {
		at = log[n-1].T
	}
	for drop < len(log) && log[drop].T <= at-p.Period {
		drop++
	}
	var sum int64
	for _, e := range log[drop:] {
		sum += e.Cost
	}
	newest := int64(-1)
	if drop < len(log) {
		newest = log[len(log)-1].T
	}
	if sum+cost <= p.Rate {
		res.Allowed = true
		sum += cost
		if cost > 0 {
			newest = at
		}
	} else {
		res.RetryAfter = logRetry(log[drop:], sum+cost-p.Rate, p, now)
	}
	res.Remaining = max(p.Rate-sum, 0)
	if newest >= 0 {
		res.ResetAfter = newest + p.Period - now
	}
	return drop, res, at
}

// logRetry returns how long until the oldest entries holding excess cost
// have left the window.
func logRetry(log []LogEntry, excess int64, p *Params, now int64) int64 {
	var freed int64
	for _, e := range log {
		if freed += e.Cost; freed >= excess {
			return e.T + p.Period - now
		}
	}
	return p.Period // unreachable for a validated cost ≤ Rate
}
