package sluice

import "fmt"

// FailMode says how a limit is decided while its store fails.
type FailMode uint8

const (
	// FailLocal, the default, decides from an in-memory stand-in while the
	// store fails: a guard.Guard with a Local store (guard.Options.Local)
	// starts each key from the last decision it saw for it. An outage then
	// neither opens the gates nor shuts them. Where there is no stand-in,
	// or it fails, FailLocal decides as FailOpen.
	FailLocal FailMode = iota
	// FailOpen allows requests while the store fails: availability over
	// enforcement.
	FailOpen
	// FailClosed denies requests while the store fails, with an error
	// wrapping ErrStoreUnavailable so the caller can tell it from a denial.
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
