package sluice

import "fmt"

// MissingKey decides a request whose identity a front door cannot find
// (no API key header, no user): never unlimited by accident.
type MissingKey uint8

const (
	// MissingClientIP, the default, limits it under the client's address.
	MissingClientIP MissingKey = iota
	// MissingDeny refuses it (400, InvalidArgument), taking nothing.
	MissingDeny
	// MissingSkip lets it through unlimited by the policy: a bypass.
	MissingSkip
)

// String returns "client_ip", "deny" or "skip".
func (m MissingKey) String() string {
	switch m {
	case MissingDeny:
		return "deny"
	case MissingSkip:
		return "skip"
	}
	return "client_ip"
}

// ParseMissingKey reads "client_ip", "deny" or "skip"; "" is
// MissingClientIP.
func ParseMissingKey(s string) (MissingKey, error) {
	switch s {
	case "", "client_ip":
		return MissingClientIP, nil
	case "deny":
		return MissingDeny, nil
	case "skip":
		return MissingSkip, nil
	}
	return MissingClientIP, fmt.Errorf("sluice: missing %q: want client_ip, deny or skip", s)
}
