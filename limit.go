package sluice

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Algorithm names the state machine that enforces a Limit.
type Algorithm uint8

// The algorithms. The zero value, AlgorithmDefault, means GCRA.
const (
	AlgorithmDefault Algorithm = iota
	FixedWindow                // counter per epoch-aligned window; up to 2x Rate across a boundary
	SlidingLog                 // exact; one entry per admitted request
	SlidingWindow              // two weighted windows; the usual production default
	TokenBucket                // capacity Burst, refilled continuously at Rate/Period
	LeakyBucket                // queue of capacity Burst draining at Rate/Period; reports Delay
	GCRA                       // one theoretical arrival time per key
	Calendar                   // counter per calendar minute, hour, day, week or month in a time zone
	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{
	AlgorithmDefault: "gcra",
	FixedWindow:      "fixed_window",
	SlidingLog:       "sliding_log",
	SlidingWindow:    "sliding_window",
	TokenBucket:      "token_bucket",
	LeakyBucket:      "leaky_bucket",
	GCRA:             "gcra",
	Calendar:         "calendar",
}

// String returns the algorithm's configuration name, such as "token_bucket".
func (a Algorithm) String() string {
	if a >= numAlgorithms {
		return "Algorithm(" + strconv.Itoa(int(a)) + ")"
	}
	return algorithmNames[a]
}

// HasBurst reports whether a takes a Burst: the buckets and GCRA.
func (a Algorithm) HasBurst() bool {
	switch a.Resolved() {
	case TokenBucket, LeakyBucket, GCRA:
		return true
	}
	return false
}

// Resolved returns a with AlgorithmDefault replaced by GCRA.
func (a Algorithm) Resolved() Algorithm {
	if a == AlgorithmDefault {
		return GCRA
	}
	return a
}

// ParseAlgorithm returns the Algorithm named s: fixed_window, sliding_log,
// sliding_window, token_bucket, leaky_bucket, gcra or calendar.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := FixedWindow; a < numAlgorithms; a++ {
		if algorithmNames[a] == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("sluice: unknown algorithm %q (want fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra or calendar)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (a Algorithm) MarshalText() ([]byte, error) { return []byte(a.Resolved().String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// Bounds on a Limit, chosen so that every intermediate value of every
// algorithm fits in an int64 in Go and is exact in a Lua double (2^53).
const (
	// MaxRate bounds Rate and Burst (about 1.1e12).
	MaxRate = 1 << 40
	// MinPeriod is the shortest Period.
	MinPeriod = time.Millisecond
	// MaxSpan bounds Period and Burst × Period / Rate: 100 years.
	MaxSpan = 100 * 365 * 24 * time.Hour
	// MaxSlidingLogRate bounds Rate for SlidingLog: 1 MiB of state a key.
	MaxSlidingLogRate = 1 << 16
)

// Limit is Rate events per Period, enforced by Algorithm. Burst is the
// capacity of the bucket algorithms and GCRA (events at once; zero means
// Rate); the window algorithms ignore it.
type Limit struct {
	Algorithm Algorithm
	Rate      int64
	Period    time.Duration
	Burst     int64
	// CountAll counts denied requests too ("count all"), so that a client
	// over the limit stays limited while it keeps sending: for the fixed
	// and sliding windows (Request.Forced). Default: admitted ones only.
	CountAll bool
	// Zone aligns a Calendar limit's windows (nil is UTC); other
	// algorithms refuse one. Load it with LoadZone.
	Zone *time.Location
}

// The periods of a Calendar limit. CalendarMonth is one calendar month,
// whatever its length; a week starts on Monday (ISO 8601).
const (
	CalendarMinute = time.Minute
	CalendarHour   = time.Hour
	CalendarDay    = 24 * time.Hour
	CalendarWeek   = 7 * CalendarDay
	CalendarMonth  = 31 * CalendarDay
)

var calendarUnits = []struct {
	name string
	d    time.Duration
}{
	{"minute", CalendarMinute}, {"hour", CalendarHour}, {"day", CalendarDay},
	{"week", CalendarWeek}, {"month", CalendarMonth},
}

// calendarUnit returns the name of a Calendar period, or "".
func calendarUnit(d time.Duration) string {
	for _, u := range calendarUnits {
		if u.d == d {
			return u.name
		}
	}
	return ""
}

var zones sync.Map // name → *time.Location

// LoadZone returns the IANA time zone named name, the same *time.Location
// for the same name, so that Limits read from one name compare equal.
func LoadZone(name string) (*time.Location, error) {
	if z, ok := zones.Load(name); ok {
		return z.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "" || name == "Local" {
		return nil, fmt.Errorf("%w: unknown time zone %q (want an IANA name such as America/New_York, or UTC)", ErrInvalidLimit, name)
	}
	if name == "UTC" {
		loc = time.UTC
	}
	z, _ := zones.LoadOrStore(name, loc)
	return z.(*time.Location), nil
}

// SameState reports whether l and o keep one state per key: the same
// algorithm, period and zone (a new rate or burst keeps the state).
func (l Limit) SameState(o Limit) bool {
	return l.Algorithm.Resolved() == o.Algorithm.Resolved() && l.Period == o.Period && sameZone(l.Zone, o.Zone)
}

// Equal reports whether l and o are the same limit, time zones compared
// by name.
func (l Limit) Equal(o Limit) bool {
	if l == o {
		return true
	}
	z, oz := l.Zone, o.Zone
	l.Zone, o.Zone = nil, nil
	return l == o && sameZone(z, oz)
}

// sameZone reports whether a and b are one time zone: the same pointer,
// or both set and of one name. (No zone is not UTC's: a calendar limit's
// state is kept apart from the same limit's with tz=UTC.)
func sameZone(a, b *time.Location) bool {
	return a == b || a != nil && b != nil && a.String() == b.String()
}

// PerSecond returns a Limit of n events per second with the default algorithm.
func PerSecond(n int64) Limit { return Limit{Rate: n, Period: time.Second} }

// PerMinute returns a Limit of n events per minute with the default algorithm.
func PerMinute(n int64) Limit { return Limit{Rate: n, Period: time.Minute} }

// Capacity returns how many events the Limit admits at once: Burst for the
// bucket algorithms and GCRA (Rate when Burst is 0), Rate for the windows.
func (l Limit) Capacity() int64 {
	switch l.Algorithm.Resolved() {
	case TokenBucket, LeakyBucket, GCRA:
		if l.Burst > 0 {
			return l.Burst
		}
	}
	return l.Rate
}

// ErrInvalidLimit is wrapped by every error Validate and ParseLimit return.
var ErrInvalidLimit = errors.New("sluice: invalid limit")

// Validate reports why l cannot be enforced, naming the field, or nil:
// past MaxRate, MinPeriod, MaxSpan or MaxSlidingLogRate, a Period that is
// not whole microseconds, or an unknown Algorithm.
func (l Limit) Validate() error {
	switch {
	case l.Algorithm >= numAlgorithms:
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalidLimit, l.Algorithm)
	case l.Rate <= 0:
		return fmt.Errorf("%w: rate %d must be positive", ErrInvalidLimit, l.Rate)
	case l.Rate > MaxRate:
		return fmt.Errorf("%w: rate %d exceeds %d", ErrInvalidLimit, l.Rate, int64(MaxRate))
	case l.Burst < 0:
		return fmt.Errorf("%w: burst %d must not be negative", ErrInvalidLimit, l.Burst)
	case l.Burst > MaxRate:
		return fmt.Errorf("%w: burst %d exceeds %d", ErrInvalidLimit, l.Burst, int64(MaxRate))
	case l.Period < MinPeriod:
		return fmt.Errorf("%w: period %v is under %v", ErrInvalidLimit, l.Period, MinPeriod)
	case l.Period > MaxSpan:
		return fmt.Errorf("%w: period %v exceeds %v", ErrInvalidLimit, l.Period, MaxSpan)
	case l.Period%time.Microsecond != 0:
		return fmt.Errorf("%w: period %v is not a whole number of microseconds", ErrInvalidLimit, l.Period)
	case l.CountAll && l.Algorithm != FixedWindow && l.Algorithm != SlidingWindow && l.Algorithm != Calendar:
		return fmt.Errorf("%w: count all is for fixed_window, sliding_window and calendar, not %v", ErrInvalidLimit, l.Algorithm.Resolved())
	case l.Algorithm == Calendar && calendarUnit(l.Period) == "":
		return fmt.Errorf("%w: calendar period %v: want a minute, hour, day, week or month", ErrInvalidLimit, l.Period)
	case l.Burst != 0 && !l.Algorithm.HasBurst():
		return fmt.Errorf("%w: burst is for token_bucket, leaky_bucket and gcra; %v admits its rate per period and no more", ErrInvalidLimit, l.Algorithm.Resolved())
	case l.Zone != nil && l.Algorithm != Calendar:
		return fmt.Errorf("%w: a time zone is for calendar limits, not %v", ErrInvalidLimit, l.Algorithm.Resolved())
	case l.Algorithm == SlidingLog && l.Rate > MaxSlidingLogRate:
		return fmt.Errorf("%w: rate %d exceeds %d for sliding_log, which stores one entry per request", ErrInvalidLimit, l.Rate, MaxSlidingLogRate)
	}
	// Burst × Period / Rate, computed without overflow: Burst ≤ 2^40 and the
	// period in microseconds is under 2^52.
	if span := float64(l.Capacity()) * float64(l.Period) / float64(l.Rate); span > float64(MaxSpan) {
		return fmt.Errorf("%w: burst %d at rate %d per %v takes longer than %v to drain", ErrInvalidLimit, l.Capacity(), l.Rate, l.Period, MaxSpan)
	}
	return nil
}

// String formats l as ParseLimit reads it, such as "gcra 100/1m burst 20".
func (l Limit) String() string {
	var b strings.Builder
	b.WriteString(l.Algorithm.Resolved().String())
	b.WriteByte(' ')
	b.WriteString(strconv.FormatInt(l.Rate, 10))
	b.WriteByte('/')
	if u := calendarUnit(l.Period); l.Algorithm == Calendar && u != "" {
		b.WriteString(u)
	} else {
		b.WriteString(formatPeriod(l.Period))
	}
	if l.Burst != 0 {
		b.WriteString(" burst ")
		b.WriteString(strconv.FormatInt(l.Burst, 10))
	}
	if l.CountAll {
		b.WriteString(" count all")
	}
	if l.Zone != nil && l.Zone != time.UTC {
		b.WriteString(" tz=")
		b.WriteString(l.Zone.String())
	}
	return b.String()
}

func formatPeriod(d time.Duration) string {
	for _, u := range periodUnits {
		if d%u.d == 0 {
			if d == u.d {
				return u.name
			}
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return d.String()
}

var periodUnits = []struct {
	name string
	d    time.Duration
}{
	{"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second},
	{"ms", time.Millisecond}, {"us", time.Microsecond},
}

// ParseLimit reads and validates "[algorithm] rate/period [burst n]
// [count all|admitted] [tz=ZONE]": "10/s", "5000/1h burst 200",
// "calendar 50000/month tz=America/New_York". A period is an optional
// count and a unit (us, ms, s, m, h, d) or a time.ParseDuration string; a
// calendar's is minute, hour, day, week or month.
func ParseLimit(s string) (Limit, error) {
	var l Limit
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return l, fmt.Errorf("%w: empty", ErrInvalidLimit)
	}
	if !strings.Contains(fields[0], "/") {
		a, err := ParseAlgorithm(fields[0])
		if err != nil {
			return l, fmt.Errorf("%w: %q: %v", ErrInvalidLimit, s, err)
		}
		l.Algorithm = a
		fields = fields[1:]
	}
	if n := len(fields); n > 1 && strings.HasPrefix(fields[n-1], "tz=") {
		z, err := LoadZone(strings.TrimPrefix(fields[n-1], "tz="))
		if err != nil {
			return l, fmt.Errorf("%w: %q: %v", ErrInvalidLimit, s, strings.TrimPrefix(err.Error(), ErrInvalidLimit.Error()+": "))
		}
		l.Zone, fields = z, fields[:n-1]
	}
	if len(fields) != 1 && len(fields) != 3 && len(fields) != 5 {
		return l, fmt.Errorf("%w: %q: want [algorithm] rate/period [burst n] [count all|admitted]", ErrInvalidLimit, s)
	}
	rate, period, ok := strings.Cut(fields[0], "/")
	if !ok {
		return l, fmt.Errorf("%w: %q: want rate/period, such as 100/1m", ErrInvalidLimit, s)
	}
	var err error
	if l.Rate, err = strconv.ParseInt(rate, 10, 64); err != nil {
		return l, fmt.Errorf("%w: %q: rate %q is not an integer", ErrInvalidLimit, s, rate)
	}
	if l.Algorithm == Calendar {
		if l.Period = calendarPeriod(period); l.Period == 0 {
			return l, fmt.Errorf("%w: %q: calendar period %q: want minute, hour, day, week or month", ErrInvalidLimit, s, period)
		}
	} else if l.Period, err = parsePeriod(period); err != nil {
		return l, fmt.Errorf("%w: %q: %v", ErrInvalidLimit, s, err)
	}
	for i := 1; i+1 < len(fields); i += 2 {
		switch word, arg := fields[i], fields[i+1]; {
		case word == "burst" && l.Burst == 0:
			if l.Burst, err = strconv.ParseInt(arg, 10, 64); err != nil {
				return l, fmt.Errorf("%w: %q: burst %q is not an integer", ErrInvalidLimit, s, arg)
			}
			if l.Burst == 0 {
				return l, fmt.Errorf("%w: %q: burst must be positive", ErrInvalidLimit, s)
			}
		case word == "count" && (arg == "all" || arg == "admitted"):
			l.CountAll = arg == "all"
		default:
			return l, fmt.Errorf("%w: %q: want \"burst n\" or \"count all|admitted\" after the rate, got %q", ErrInvalidLimit, s, word+" "+arg)
		}
	}
	if err := l.Validate(); err != nil {
		return l, err
	}
	return l, nil
}

// calendarPeriod returns the Calendar period named s, or 0.
func calendarPeriod(s string) time.Duration {
	for _, u := range calendarUnits {
		if u.name == s {
			return u.d
		}
	}
	return 0
}

func parsePeriod(s string) (time.Duration, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	unit := s[i:]
	for _, u := range periodUnits {
		if u.name != unit && !(u.name == "us" && unit == "µs") {
			continue
		}
		if i == 0 {
			return u.d, nil
		}
		n, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil || n > int64(MaxSpan/u.d) {
			return 0, fmt.Errorf("period %q is out of range", s)
		}
		return time.Duration(n) * u.d, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("period %q: want a count and a unit (us, ms, s, m, h, d), such as 1m", s)
	}
	return d, nil
}
