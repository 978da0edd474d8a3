package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/rotated"
)

// A user key holding braces, backslashes or binary bytes is always the
// whole hash tag: its keys share one slot whatever the limit, and two user
// keys never produce the same Redis key.
func TestKeysKeepTheirSlotAndNeverCollide(t *testing.T) {
	s := newStore(Options{})
	perSecond := sluice.Limit{Rate: 1, Period: time.Second}
	perHour := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 1, Period: time.Hour}
	users := []string{"a", "{a}", "a}", "{a", "}{", `\`, `\(`, "(", `a\)`, "a)", "\x00\xff", "x{y}z", "{}", "a{b}", "a{b}c"}
	seen := map[string]string{}
	for _, u := range users {
		k1, k2 := s.redisKey(u, perSecond), s.redisKey(u, perHour)
		if slot(k1) != slot(k2) {
			t.Errorf("user key %q: its two limits hash to slots %d and %d", u, slot(k1), slot(k2))
		}
		if slot(k1) != slot("{"+keyEscaper.Replace(u)+"}") {
			t.Errorf("user key %q: the hash tag is not the whole escaped key", u)
		}
		if other, ok := seen[k1]; ok {
			t.Errorf("user keys %q and %q share the Redis key %q", u, other, k1)
		}
		seen[k1] = u
	}
}

func TestParseURL(t *testing.T) {
	tests := []struct {
		url    string
		addrs  []string
		master string
		tls    bool
		user   string
	}{
		{"redis://127.0.0.1:6379", []string{"127.0.0.1:6379"}, "", false, ""},
		{"rediss://u:p@cache.example:6380/2", []string{"cache.example:6380"}, "", true, "u"},
		{"redis://h1:7000,h2:7001,h3:7002", []string{"h1:7000", "h2:7001", "h3:7002"}, "", false, ""},
		{"redis://h1:7000?addr=h2:7001", []string{"h1:7000", "h2:7001"}, "", false, ""},
		{"redis-sentinel://s1:26379,s2:26379/mymaster", []string{"s1:26379", "s2:26379"}, "mymaster", false, ""},
	}
	for _, tt := range tests {
		opt, _, err := parseURL(tt.url, TLS{}, "", nil, new([]rotated.Counted))
		if err != nil {
			t.Errorf("%s: %v", tt.url, err)
			continue
		}
		if len(opt.InitAddress) != len(tt.addrs) {
			t.Errorf("%s: addresses %v, want %v", tt.url, opt.InitAddress, tt.addrs)
			continue
		}
		for i := range tt.addrs {
			if opt.InitAddress[i] != tt.addrs[i] {
				t.Errorf("%s: addresses %v, want %v", tt.url, opt.InitAddress, tt.addrs)
			}
		}
		if opt.Sentinel.MasterSet != tt.master || (opt.TLSConfig != nil) != tt.tls || opt.Username != tt.user {
			t.Errorf("%s: master %q tls %v user %q", tt.url, opt.Sentinel.MasterSet, opt.TLSConfig != nil, opt.Username)
		}
	}
	for _, bad := range []string{"http://x", "redis-sentinel://s1:26379", "redis://h:notaport/x/y",
		"redis://h:6379?tls_ca_fle=ca.pem",                 // misspelt: never ignored
		"redis://h:6379?sentinel_password=p",               // not Sentinel
		"redis-sentinel://s1:26379/m?db=2&client_name=app", // rueidis's, which a sentinel URL does not read
	} {
		if _, _, err := parseURL(bad, TLS{}, "", nil, new([]rotated.Counted)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	// Sentinel: the sentinels' credentials apart from Redis's, and the
	// master asked for every few seconds, whichever form names it.
	for _, u := range []string{"redis-sentinel://u:p@s1:26379/m?sentinel_username=su&sentinel_password=sp", "redis://u:p@s1:26379?master_set=m&sentinel_username=su&sentinel_password=sp"} {
		opt, _, err := parseURL(u, TLS{}, "", nil, new([]rotated.Counted))
		if err != nil || opt.Sentinel.MasterSet != "m" || opt.Username != "u" || opt.Password != "p" || opt.Sentinel.Username != "su" || opt.Sentinel.Password != "sp" || opt.Sentinel.TopologyRefreshInterval != sentinelRefresh {
			t.Errorf("%s: %+v, %v", u, opt.Sentinel, err)
		}
	}
}

// A calendar limit's argument is computed once per window, and is the
// window's own whichever instant in it asks: across a month's end, a DST
// change and a zone whose hours start at half past.
func TestCalendarArgPerWindow(t *testing.T) {
	s := newStore(Options{})
	ny, err := sluice.LoadZone("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	kolkata, err := sluice.LoadZone("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	fresh := newStore(Options{})
	for _, l := range []sluice.Limit{
		{Algorithm: sluice.Calendar, Rate: 5, Period: sluice.CalendarMonth, Zone: ny},
		{Algorithm: sluice.Calendar, Rate: 5, Period: sluice.CalendarDay, Zone: ny},
		{Algorithm: sluice.Calendar, Rate: 5, Period: sluice.CalendarHour, Zone: kolkata},
	} {
		start := time.Date(2024, 2, 28, 0, 0, 0, 0, ny)
		for at := start; at.Before(start.AddDate(0, 0, 12)); at = at.Add(17 * time.Minute) {
			now := strconv.FormatInt(at.UnixMicro(), 10)
			want := fresh.limitArg(l, now)
			fresh.cals.Clear() // computed afresh for each instant
			if got := s.limitArg(l, now); got != want {
				t.Fatalf("%v at %v: cached argument %q; computed %q", l, at, got, want)
			}
		}
	}
}

// BenchmarkCalendarArg: a calendar limit's argument from the cache, and
// computed afresh as every call would without it.
func BenchmarkCalendarArg(b *testing.B) {
	ny, err := sluice.LoadZone("America/New_York")
	if err != nil {
		b.Fatal(err)
	}
	l := sluice.Limit{Algorithm: sluice.Calendar, Rate: 50_000, Period: sluice.CalendarMonth, Zone: ny}
	s := newStore(Options{})
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			s.limitArg(l, "-1")
		}
	})
	b.Run("computed", func(b *testing.B) {
		for b.Loop() {
			s.cals.Clear()
			s.limitArg(l, "-1")
		}
	})
}
