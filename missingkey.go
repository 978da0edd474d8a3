package sluice

import "fmt"

// MissingKey decides a request whose identity cannot be found by a
// front door's key function: no API key header, no user in the context.
// Such a request is never unlimited by accident.
type MissingKey uint8

const (
	// MissingClientIP, the default, limits the request under the client's
	// address instead, with the policy's limits: a client that leaves out
	// its API key still counts against a limit, one per address.
	MissingClientIP MissingKey = iota
	// MissingDeny refuses the request (400 over HTTP, InvalidArgument over
	// gRPC), and it takes nothing from the request's other limits.
	MissingDeny
	// MissingSkip lets the request through unlimited by the policy: a
	// bypass, for a policy that limits only identified callers, which
	// another policy must cover.
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
