package sluice_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestParseLimit(t *testing.T) {
	tests := []struct {
		in   string
		want sluice.Limit
	}{
		{"100/1m", sluice.Limit{Rate: 100, Period: time.Minute}},
		{"10/s", sluice.Limit{Rate: 10, Period: time.Second}},
		{"5000/1h burst 200", sluice.Limit{Rate: 5000, Period: time.Hour, Burst: 200}},
		{"token_bucket 10/s burst 50", sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 10, Period: time.Second, Burst: 50}},
		{"fixed_window 3/250ms", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: 250 * time.Millisecond}},
		{"sliding_log 1/d", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1, Period: 24 * time.Hour}},
		{"gcra 7/1m30s", sluice.Limit{Algorithm: sluice.GCRA, Rate: 7, Period: 90 * time.Second}},
		{"1000000000/8760h", sluice.Limit{Rate: 1e9, Period: 365 * 24 * time.Hour}},
		{"calendar 1000/day", sluice.Limit{Algorithm: sluice.Calendar, Rate: 1000, Period: sluice.CalendarDay}},
		{"calendar 50000/month tz=America/New_York", sluice.Limit{Algorithm: sluice.Calendar, Rate: 50000, Period: sluice.CalendarMonth, Zone: zone(t, "America/New_York")}},
		{"calendar 5/week count all tz=Asia/Kolkata", sluice.Limit{Algorithm: sluice.Calendar, Rate: 5, Period: sluice.CalendarWeek, CountAll: true, Zone: zone(t, "Asia/Kolkata")}},
	}
	for _, tt := range tests {
		got, err := sluice.ParseLimit(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		back, err := sluice.ParseLimit(got.String())
		if err != nil || back.Rate != got.Rate || back.Period != got.Period || back.Burst != got.Burst || back.Algorithm.Resolved() != got.Algorithm.Resolved() || back.Zone != got.Zone || back.CountAll != got.CountAll {
			t.Errorf("ParseLimit(%q).String() = %q does not read back: %+v, %v", tt.in, got.String(), back, err)
		}
	}
}

func TestParseLimitErrors(t *testing.T) {
	tests := []struct{ in, mention string }{
		{"", "empty"},
		{"0/s", "rate 0"},
		{"-1/s", "rate -1"},
		{"10/0s", "period 0s"},
		{"10/500us", "under 1ms"},
		{"10/1ns", "period"},
		{"10/fortnight", "period"},
		{"ten/s", "rate"},
		{"10/s burst", "want"},
		{"10/s burst -2", "burst -2"},
		{"10/s burst 0", "burst must be positive"},
		{"10/s bursts 5", "burst n"},
		{"leaky 10/s", "unknown algorithm"},
		{"2000000000000/s", "exceeds"},
		{"1/101y", "period"},
		{"1/36600d", "out of range"},
		{"1/8760h burst 1000", "to drain"},
		{"sliding_log 100000/s", "sliding_log"},
		{"calendar 10/fortnight", `calendar period "fortnight"`},
		{"calendar 10/1d", `calendar period "1d"`},
		{"calendar 10/day tz=Mars/Olympus_Mons", `unknown time zone "Mars/Olympus_Mons"`},
		{"calendar 10/day tz=", `unknown time zone ""`},
		{"10/1m tz=UTC", "a time zone is for calendar limits"},
	}
	for _, tt := range tests {
		_, err := sluice.ParseLimit(tt.in)
		if !errors.Is(err, sluice.ErrInvalidLimit) || !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("ParseLimit(%q) error = %v; want ErrInvalidLimit mentioning %q", tt.in, err, tt.mention)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	tests := []struct {
		l       sluice.Limit
		mention string
	}{
		{sluice.Limit{Rate: 0, Period: time.Second}, "rate"},
		{sluice.Limit{Rate: 1, Period: time.Second, Burst: -1}, "burst"},
		{sluice.Limit{Rate: 1, Period: time.Microsecond}, "period"},
		{sluice.Limit{Rate: 1, Period: 1500*time.Microsecond + 1}, "microseconds"},
		{sluice.Limit{Algorithm: 99, Rate: 1, Period: time.Second}, "algorithm"},
	}
	for _, tt := range tests {
		if err := tt.l.Validate(); err == nil || !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("%+v.Validate() = %v; want an error naming %q", tt.l, err, tt.mention)
		}
	}
}

func TestAlgorithmNames(t *testing.T) {
	for _, name := range []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket", "leaky_bucket", "gcra"} {
		a, err := sluice.ParseAlgorithm(name)
		if err != nil || a.String() != name {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", name, a, err)
		}
	}
	if sluice.AlgorithmDefault.Resolved() != sluice.GCRA {
		t.Error("the default algorithm is not GCRA")
	}
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"100/1m", "10/s", "5000/1h burst 200", "gcra 1/d", "x/y", "1/1ms burst 99999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := sluice.ParseLimit(s)
		if err != nil {
			if !errors.Is(err, sluice.ErrInvalidLimit) {
				t.Fatalf("ParseLimit(%q) error %v does not wrap ErrInvalidLimit", s, err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLimit(%q) returned an invalid limit: %v", s, err)
		}
		back, err := sluice.ParseLimit(l.String())
		if err != nil || back.Rate != l.Rate || back.Period != l.Period || back.Burst != l.Burst {
			t.Fatalf("ParseLimit(%q) = %v does not round-trip: %+v, %v", s, l, back, err)
		}
	})
}

// "count all" reads, prints back, and is only for the window counters.
func TestParseLimitCountAll(t *testing.T) {
	for in, want := range map[string]string{
		"sliding_window 10/s count all":    "sliding_window 10/s count all",
		"fixed_window 5/1m count admitted": "fixed_window 5/m",
		"token_bucket 10/s burst 3":        "token_bucket 10/s burst 3",
	} {
		l, err := sluice.ParseLimit(in)
		if err != nil || l.String() != want {
			t.Errorf("%q: %v, %v; want %q", in, l, err, want)
		}
	}
	// A burst is for the buckets and GCRA (HasBurst): on a window it would
	// be ignored, so it is refused where it is written.
	for a, want := range map[sluice.Algorithm]bool{sluice.AlgorithmDefault: true, sluice.GCRA: true, sluice.TokenBucket: true, sluice.LeakyBucket: true,
		sluice.FixedWindow: false, sluice.SlidingWindow: false, sluice.SlidingLog: false, sluice.Calendar: false} {
		if a.HasBurst() != want {
			t.Errorf("%v.HasBurst() = %v", a, !want)
		}
	}
	for _, in := range []string{"sliding_window 10/s burst 3", "sliding_window 10/s burst 3 count all", "fixed_window 5/1m burst 9", "sliding_log 5/15m burst 2", "calendar 100/day burst 5"} {
		if _, err := sluice.ParseLimit(in); err == nil || !strings.Contains(err.Error(), "burst is for token_bucket, leaky_bucket and gcra") {
			t.Errorf("%q: %v; want the burst refused", in, err)
		}
	}
	for _, in := range []string{"gcra 10/s count all", "10/s count all", "fixed_window 10/s count some", "fixed_window 10/s count"} {
		if _, err := sluice.ParseLimit(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	z, err := sluice.LoadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return z
}

func TestCalendarLimitsValidate(t *testing.T) {
	for _, l := range []sluice.Limit{
		{Algorithm: sluice.Calendar, Rate: 10, Period: 2 * sluice.CalendarDay},
		{Algorithm: sluice.Calendar, Rate: 10, Period: time.Second},
		{Algorithm: sluice.GCRA, Rate: 10, Period: time.Minute, Zone: time.UTC},
	} {
		if err := l.Validate(); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%+v: Validate() = %v; want ErrInvalidLimit", l, err)
		}
	}
	a, b := zone(t, "Europe/Paris"), zone(t, "Europe/Paris")
	if a != b {
		t.Error("LoadZone returned two locations for one name: limits read twice would differ")
	}
}
