package redisstore

// Slot exposes slot to the external tests, which check it against Redis.
var Slot = slot

// ClockKnown reports whether s has measured Redis's clock.
func ClockKnown(s *Store) bool { return s.clock.known.Load() }
