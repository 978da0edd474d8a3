package redisstore

import (
	"context"
	"runtime"
	"time"
)

// Slot exposes slot to the external tests, which check it against Redis.
var Slot = slot

// ClockKnown reports whether s has measured Redis's clock.
func ClockKnown(s *Store) bool { return s.clock.known.Load() }

// ClockDue makes a measurement of Redis's clock due at s's next call, as
// every clockRefresh does, and returns a function that reports whether
// none is running.
func ClockDue(s *Store) (idle func() bool) {
	s.clock.next.Store(0)
	return func() bool { return !s.clock.measures.Load() }
}

// SkewClock puts s's measure of Redis's clock d behind it, as a failover
// to a host whose clock is d ahead of the one measured would.
func SkewClock(s *Store, d time.Duration) { s.clock.offset.Add(-d.Microseconds()) }

// ClockIdle reports whether no measurement of Redis's clock is running.
func ClockIdle(s *Store) bool { return !s.clock.measures.Load() }

// OwnConnection reports whether a lone call of s goes on its own
// connection, the one Redis's clock is measured on.
func OwnConnection(s *Store) bool { return s.clock.own.works.Load() }

// MeasureClock measures Redis's clock on s's own connection now, as a
// refresh does, with no call beside it, and returns when it is done; the
// next refresh is then clockRefresh away.
func MeasureClock(s *Store) error {
	for !s.clock.measures.CompareAndSwap(false, true) {
		runtime.Gosched() // one a call started: wait for it
	}
	s.clock.next.Store(time.Now().Add(clockRefresh).UnixNano())
	client, _, err := s.conn()
	if err != nil {
		s.clock.measures.Store(false)
		return err
	}
	s.clock.measure(context.Background(), client, true)
	return nil
}
