package algorithm

import (
	"time"

	"github.com/sluicehq/sluice"
)

// Calendar counts events in windows aligned to the calendar of Params'
// zone: minutes, hours, days (midnight to midnight), weeks (from Monday)
// or months (from the first), as long as they really are there: a day
// across a daylight-saving change is 23 or 25 hours, a month 28 to 31
// days. It denies when count + cost exceeds Rate; denied requests do not
// count. RetryAfter and ResetAfter count down to the window's end.
//
// State: A the start of the current window, B its count, C its end. The
// end is kept, so that the calendar is read once per window, not per
// decision, and the state's life is known without the zone.
func Calendar(s State, p *Params, now, cost int64) (State, Result) {
	next, allowed := calendarAdmit(s, p, now, cost)
	remaining, reset := calendarReport(next, p, now)
	var retry int64
	if !allowed {
		retry = next.C - now
	}
	return next, Result{Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// calendarAdmit is Calendar's admission: the window rolled to now, with
// cost counted when it fits.
func calendarAdmit(s State, p *Params, now, cost int64) (State, bool) {
	start, count, end := s.A, s.B, s.C
	// A clock gone back stays in the newest window, as the fixed window's.
	if now >= end {
		start, end = p.Window(now)
		count = 0
	}
	allowed := count+cost <= p.Rate
	if allowed {
		count += cost
	}
	return State{start, count, end}, allowed
}

// calendarReport returns Remaining and ResetAfter of the window s at now.
func calendarReport(s State, p *Params, now int64) (remaining, reset int64) {
	if s.B > 0 {
		reset = s.C - now
	}
	return max(p.Rate-s.B, 0), reset // a forced cost can overfill the window
}

// Window returns the calendar window of a Calendar limit that holds now:
// its start and its end, in µs. Params of other limits have windows of
// Period aligned to the Unix epoch.
func (p *Params) Window(now int64) (start, end int64) {
	if p.zone == nil {
		start = floorWindow(now, p.Period)
		return start, start + p.Period
	}
	t := time.UnixMicro(now).In(p.zone)
	y, mo, d := t.Date()
	var from, to time.Time
	switch time.Duration(p.Period) * time.Microsecond {
	case sluice.CalendarMinute, sluice.CalendarHour:
		// Aligned in local time, by the offset in force at now: an hour
		// of a zone half an hour off UTC starts at half past.
		_, off := t.Zone()
		local := now + int64(off)*1_000_000
		start = floorWindow(local, p.Period) - int64(off)*1_000_000
		return start, start + p.Period
	case sluice.CalendarDay:
		from, to = time.Date(y, mo, d, 0, 0, 0, 0, p.zone), time.Date(y, mo, d+1, 0, 0, 0, 0, p.zone)
	case sluice.CalendarWeek:
		d -= (int(t.Weekday()) + 6) % 7 // back to Monday
		from, to = time.Date(y, mo, d, 0, 0, 0, 0, p.zone), time.Date(y, mo, d+7, 0, 0, 0, 0, p.zone)
	default: // sluice.CalendarMonth
		from, to = time.Date(y, mo, 1, 0, 0, 0, 0, p.zone), time.Date(y, mo+1, 1, 0, 0, 0, 0, p.zone)
	}
	start, end = from.UnixMicro(), to.UnixMicro()
	// Where midnight does not exist (a zone that changes its clocks at
	// midnight), time.Date moves it; now stays inside its window.
	start = min(start, now)
	if end <= now {
		end = now + 1
	}
	return start, end
}

// calendarAdmitted is Calendar's Admitted.
func calendarAdmitted(_, next State, p *Params, now int64) (remaining, reset, delay int64) {
	remaining, reset = calendarReport(next, p, now)
	return remaining, reset, 0
}

// calendarRefund is Calendar's Refund: cost off the window taken falls in,
// while it is the current one.
func calendarRefund(s State, _ *Params, _, taken, cost int64) State {
	if s.A <= taken && taken < s.C {
		s.B -= min(cost, s.B)
	}
	return s
}

// calendarFullAt is Calendar's FullAt: the window's end, once it counts.
func calendarFullAt(s State, _ *Params) int64 {
	if s.B > 0 {
		return s.C
	}
	return 0
}
