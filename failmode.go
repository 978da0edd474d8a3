package sluice

import "fmt"

// FailMode says how a limit is decided while its store fails.
type FailMode uint8

const (
	// FailLocal, the default, decides in an in-memory stand-in (a
	// guard.Guard's Local) from each key's last decision; without one, as
	// FailOpen.
	FailLocal FailMode = iota
	// FailOpen allows requests: availability over enforcement.
	FailOpen
	// FailClosed denies them, with an error wrapping ErrStoreUnavailable.
	FailClosed
)

// String returns "local", "open" or "closed".
func (m FailMode) String() string {
	switch m {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return "local"
}

// ParseFailMode reads "local", "open" or "closed"; "" is FailLocal.
func ParseFailMode(s string) (FailMode, error) {
	switch s {
	case "", "local":
		return FailLocal, nil
	case "open":
		return FailOpen, nil
	case "closed":
		return FailClosed, nil
	}
	return FailLocal, fmt.Errorf("sluice: fail mode %q: want local, open or closed", s)
}
