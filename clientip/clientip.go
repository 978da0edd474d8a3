// Package clientip finds the client's address in an HTTP request, with a
// strategy the deployment chooses explicitly: the connection's RemoteAddr;
// the rightmost address not in a list of trusted proxies, over every
// X-Forwarded-For (or RFC 7239 Forwarded) header in order; a trusted number
// of hops from the right; or one header a trusted proxy sets, such as
// X-Real-IP or CF-Connecting-IP.
//
// It never trusts the leftmost X-Forwarded-For entry: any client can write
// it. Parsing is github.com/realclientip/realclientip-go's; this package
// adds what a rate limiter needs on top: addresses normalised (zones
// dropped, IPv4-mapped IPv6 unmapped), IPv6 grouped by prefix (a /64 is one
// subscriber, who can otherwise rotate through 2^64 addresses), a bound on
// header size, and an error instead of an empty address.
package clientip

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/realclientip/realclientip-go"
)

// ErrNoClientIP is returned when the strategy finds no valid address: a
// misconfiguration (a proxy not in the trusted list) or a malformed header.
// Callers must not fall back to a shared key for everybody.
var ErrNoClientIP = errors.New("clientip: no client address found")

// maxHeaderBytes bounds the header bytes parsed: the rightmost strategies
// need only the end of a chain, and parsing a megabyte of X-Forwarded-For
// per request would be a denial of service.
const maxHeaderBytes = 4096

// Resolver finds a request's client address. It is safe for concurrent use.
type Resolver struct {
	strategy realclientip.Strategy
	header   string         // the header the strategy reads, "" for RemoteAddr
	trusted  []netip.Prefix // RightmostUntrusted: the proxies
	next     *Resolver
	v6Bits   int
	v4Bits   int
}

// Options configures a Resolver: how addresses are grouped into keys.
// The zero value is the default.
type Options struct {
	// IPv6Prefix groups IPv6 addresses by their first bits. Default 64:
	// one key per /64, what one customer is usually given.
	IPv6Prefix int
	// IPv4Prefix groups IPv4 addresses likewise. Default 32: one key per
	// address.
	IPv4Prefix int
}

func newResolver(s realclientip.Strategy, header string, opts Options) (*Resolver, error) {
	r := &Resolver{strategy: s, header: header, v6Bits: cmp.Or(opts.IPv6Prefix, 64), v4Bits: cmp.Or(opts.IPv4Prefix, 32)}
	if r.v6Bits < 1 || r.v6Bits > 128 || r.v4Bits < 1 || r.v4Bits > 32 {
		return nil, fmt.Errorf("clientip: prefix lengths %d (IPv6) and %d (IPv4) out of range: want 1..128 and 1..32", r.v6Bits, r.v4Bits)
	}
	return r, nil
}

// RemoteAddr uses the connection's peer address: right when clients connect
// directly, wrong behind any proxy (every client would share its address).
func RemoteAddr(opts Options) (*Resolver, error) {
	return newResolver(realclientip.RemoteAddrStrategy{}, "", opts)
}

// RightmostUntrusted reads the chain of addresses a request came through,
// from the right: the connection's peer, then header (X-Forwarded-For or
// Forwarded, all its lines joined in order), and returns the first address
// not in trusted (CIDRs or addresses of your proxies and load balancers).
// A peer that is not a trusted proxy is the client, whatever it wrote in the
// header.
func RightmostUntrusted(header string, trusted []string, opts Options) (*Resolver, error) {
	nets, err := realclientip.AddressesAndRangesToIPNets(trusted...)
	if err != nil {
		return nil, fmt.Errorf("clientip: trusted proxies: %w", err)
	}
	s, err := realclientip.NewRightmostTrustedRangeStrategy(header, nets)
	if err != nil {
		return nil, fmt.Errorf("clientip: %w", err)
	}
	r, err := newResolver(s, header, opts)
	if err != nil {
		return nil, err
	}
	for _, n := range nets {
		a, _ := netip.AddrFromSlice(n.IP)
		ones, _ := n.Mask.Size()
		if a.Is4In6() && ones >= 96 {
			a, ones = a.Unmap(), ones-96
		}
		r.trusted = append(r.trusted, netip.PrefixFrom(a.Unmap(), ones))
	}
	return r, nil
}

// TrustedHops reads header from the right and returns the address hops
// entries from the end: right when exactly hops proxies you control each
// append one entry (hops 1: one load balancer).
func TrustedHops(header string, hops int, opts Options) (*Resolver, error) {
	s, err := realclientip.NewRightmostTrustedCountStrategy(header, hops)
	if err != nil {
		return nil, fmt.Errorf("clientip: %w", err)
	}
	return newResolver(s, header, opts)
}

// Header reads a single address from header, such as X-Real-IP or
// CF-Connecting-IP: right only when a trusted proxy always sets (and
// overwrites) it.
func Header(header string, opts Options) (*Resolver, error) {
	s, err := realclientip.NewSingleIPHeaderStrategy(header)
	if err != nil {
		return nil, fmt.Errorf("clientip: %w", err)
	}
	return newResolver(s, header, opts)
}

// Or returns a Resolver that tries r, then next when r finds nothing (for
// example RightmostUntrusted, then RemoteAddr for requests that did not come
// through the proxies).
func (r *Resolver) Or(next *Resolver) *Resolver {
	c := *r
	c.next = next
	return &c
}

// ClientIP returns the client's address, normalised: no zone, IPv4-mapped
// IPv6 as IPv4. It returns ErrNoClientIP when no strategy finds one.
func (r *Resolver) ClientIP(req *http.Request) (netip.Addr, error) {
	for s := r; s != nil; s = s.next {
		if s.trusted != nil {
			// Headers count only when a trusted proxy sent them: a peer
			// that is not one, or that cannot be told, is not believed.
			peer, ok := remoteAddr(req)
			if ok && !s.isTrusted(peer) {
				return peer, nil
			}
			if !ok {
				continue
			}
		}
		if s.header == "" { // RemoteAddr, parsed without allocating
			if peer, ok := remoteAddr(req); ok {
				return peer, nil
			}
			continue
		}
		h := bounded(req.Header, s.header)
		ip := s.strategy.ClientIP(h, req.RemoteAddr)
		if ip == "" {
			continue
		}
		a, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		return a.WithZone("").Unmap(), nil
	}
	return netip.Addr{}, ErrNoClientIP
}

// remoteAddr parses the peer's address: host:port, [host]:port, or a bare
// address.
func remoteAddr(req *http.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(req.RemoteAddr)
	if err == nil {
		return ap.Addr().WithZone("").Unmap(), true
	}
	host := req.RemoteAddr
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	return a.WithZone("").Unmap(), err == nil
}

func (r *Resolver) isTrusted(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Prefix returns the client's address grouped by the configured prefix
// lengths: the identity to rate-limit.
func (r *Resolver) Prefix(req *http.Request) (netip.Prefix, error) {
	a, err := r.ClientIP(req)
	if err != nil {
		return netip.Prefix{}, err
	}
	bits := r.v4Bits
	if a.Is6() {
		bits = r.v6Bits
	}
	return netip.PrefixFrom(a, bits).Masked(), nil
}

// Key returns Prefix as a string: "203.0.113.7" for a whole IPv4 address,
// "2001:db8:1:2::/64" for a group.
func (r *Resolver) Key(req *http.Request) (string, error) {
	p, err := r.Prefix(req)
	if err != nil {
		return "", err
	}
	if p.IsSingleIP() {
		return p.Addr().String(), nil
	}
	return p.String(), nil
}

// bounded returns h with header's lines cut to their last maxHeaderBytes,
// starting at an entry boundary, when longer; otherwise h itself.
func bounded(h http.Header, header string) http.Header {
	lines := h.Values(header)
	n := 0
	for _, l := range lines {
		n += len(l) + 1
	}
	if n <= maxHeaderBytes {
		return h
	}
	joined := strings.Join(lines, ",")
	tail := joined[len(joined)-maxHeaderBytes:]
	if i := strings.IndexByte(tail, ','); i >= 0 {
		tail = tail[i+1:]
	} else {
		tail = ""
	}
	c := http.Header{}
	c.Set(header, tail)
	return c
}
