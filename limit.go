package sluice

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
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
}

// String returns the algorithm's configuration name, such as "token_bucket".
func (a Algorithm) String() string {
	if a >= numAlgorithms {
		return "Algorithm(" + strconv.Itoa(int(a)) + ")"
	}
	return algorithmNames[a]
}

// Resolved returns a with AlgorithmDefault replaced by GCRA.
func (a Algorithm) Resolved() Algorithm {
	if a == AlgorithmDefault {
		return GCRA
	}
	return a
}

// ParseAlgorithm returns the Algorithm named s: fixed_window, sliding_log,
// sliding_window, token_bucket, leaky_bucket or gcra.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := FixedWindow; a < numAlgorithms; a++ {
		if algorithmNames[a] == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("sluice: unknown algorithm %q (want fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket or gcra)", s)
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
	// MaxSpan bounds Period and the time a full burst takes to drain
	// (Burst × Period / Rate): 100 years.
	MaxSpan = 100 * 365 * 24 * time.Hour
	// MaxSlidingLogRate bounds Rate for SlidingLog, whose state keeps one
	// entry per admitted request: at most 16 bytes × 65,536 = 1 MiB per key.
	MaxSlidingLogRate = 1 << 16
)

// Limit is Rate events per Period, enforced by Algorithm.
//
// Burst is the capacity of the bucket algorithms and GCRA: how many events may
// arrive at once. Zero means Rate. The window algorithms ignore it.
type Limit struct {
	Algorithm Algorithm
	Rate      int64
	Period    time.Duration
	Burst     int64
	// CountAll counts every request, denied ones too (ParseLimit's
	// "count all"), as Cloudflare's counters and envoyproxy/ratelimit's
	// do: a client over the limit stays limited while it keeps sending,
	// instead of being let through again as the window slides. For the
	// fixed window and the sliding window counter; stores decide such a
	// request as a forced one (Request.Forced). Default false: only
	// admitted requests count ("count admitted").
	CountAll bool
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

// Validate reports why l cannot be enforced, naming the field, or nil.
// It rejects a Rate or Burst that is negative, zero (Rate) or above MaxRate,
// a Period under MinPeriod, above MaxSpan or not a whole number of
// microseconds, a burst that takes longer than MaxSpan to drain, a sliding
// log above MaxSlidingLogRate, and an unknown Algorithm.
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
	case l.CountAll && l.Algorithm != FixedWindow && l.Algorithm != SlidingWindow:
		return fmt.Errorf("%w: count all is for fixed_window and sliding_window, not %v", ErrInvalidLimit, l.Algorithm.Resolved())
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
	b.WriteString(formatPeriod(l.Period))
	if l.Burst != 0 {
		b.WriteString(" burst ")
		b.WriteString(strconv.FormatInt(l.Burst, 10))
	}
	if l.CountAll {
		b.WriteString(" count all")
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

// ParseLimit reads a Limit written as "[algorithm] rate/period [burst n]
// [count all|admitted]": "100/1m", "10/s", "5000/1h burst 200",
// "token_bucket 10/s burst 50", "sliding_window 10/s count all".
// The period is a count and a unit (us, ms, s, m, h, d) with the count
// optional, or any time.ParseDuration string. The result is validated.
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
	if l.Period, err = parsePeriod(period); err != nil {
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
