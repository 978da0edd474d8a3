package clientip_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/clientip"
)

// FuzzClientIP feeds the resolvers arbitrary X-Forwarded-For and
// Forwarded headers and peer addresses. None panics; an address found is
// normalised (no zone, IPv4 unmapped); behind trusted proxies it is never
// one of them while an untrusted address is in the chain, and a peer that
// is not a trusted proxy is the client whatever the headers say.
func FuzzClientIP(f *testing.F) {
	f.Add("203.0.113.7, 10.0.0.2", `for=203.0.113.7;proto=https, for="[2001:db8::1]:443"`, "10.0.0.1:443")
	f.Add("1.1.1.1,2.2.2.2,,10.1.1.1", `for=unknown`, "192.0.2.1:1")
	f.Add("::ffff:10.0.0.9, fe80::1%eth0", `for="_hidden"`, "[::1]:80")
	f.Add("", "", "10.0.0.1")
	trusted := netip.MustParsePrefix("10.0.0.0/8")
	xff, err := clientip.RightmostUntrusted("X-Forwarded-For", []string{trusted.String()}, clientip.Options{})
	if err != nil {
		f.Fatal(err)
	}
	fwd, err := clientip.RightmostUntrusted("Forwarded", []string{trusted.String()}, clientip.Options{})
	if err != nil {
		f.Fatal(err)
	}
	hops, err := clientip.TrustedHops("X-Forwarded-For", 1, clientip.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, xffValue, forwarded, remote string) {
		r := request(remote, "X-Forwarded-For", xffValue, "Forwarded", forwarded)
		var peer netip.Addr
		if host, _, err := net.SplitHostPort(remote); err == nil {
			peer, _ = netip.ParseAddr(host)
		}
		peer = peer.WithZone("").Unmap()
		for name, res := range map[string]*clientip.Resolver{"xff": xff, "forwarded": fwd, "hops": hops} {
			a, err := res.ClientIP(r)
			if err != nil {
				continue
			}
			if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
				t.Fatalf("%s: %v is not normalised", name, a)
			}
			if name == "hops" {
				continue
			}
			if peer.IsValid() && !trusted.Contains(peer) && a != peer {
				t.Fatalf("%s: an untrusted peer %v, yet the client is %v", name, peer, a)
			}
			if _, err := res.Key(r); err != nil {
				t.Fatalf("%s: an address but no key: %v", name, err)
			}
		}
	})
}
