package clientip_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/clientip"
)

func request(remote string, headers ...string) *http.Request {
	r, _ := http.NewRequest("GET", "http://example.com/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

func must(r *clientip.Resolver, err error) *clientip.Resolver {
	if err != nil {
		panic(err)
	}
	return r
}

func TestStrategies(t *testing.T) {
	lb := []string{"10.0.0.0/8", "192.168.1.1"}
	xff := must(clientip.RightmostUntrusted("X-Forwarded-For", lb, clientip.Options{}))
	fwd := must(clientip.RightmostUntrusted("Forwarded", lb, clientip.Options{}))
	hops := must(clientip.TrustedHops("X-Forwarded-For", 1, clientip.Options{}))
	real := must(clientip.Header("X-Real-IP", clientip.Options{}))
	remote := must(clientip.RemoteAddr(clientip.Options{}))
	tests := []struct {
		name string
		r    *clientip.Resolver
		req  *http.Request
		want string // "" means ErrNoClientIP
	}{
		{"remote addr", remote, request("203.0.113.7:5555"), "203.0.113.7"},
		{"remote addr ignores headers", remote, request("203.0.113.7:5555", "X-Forwarded-For", "1.2.3.4"), "203.0.113.7"},
		{"rightmost untrusted", xff, request("10.0.0.1:1", "X-Forwarded-For", "6.6.6.6, 203.0.113.7, 10.1.1.1"), "203.0.113.7"},
		{"spoofed leftmost is ignored", xff, request("10.0.0.1:1", "X-Forwarded-For", "1.1.1.1, 2.2.2.2, 203.0.113.7"), "203.0.113.7"},
		{"several header lines join in order", xff, request("10.0.0.1:1", "X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "203.0.113.7, 192.168.1.1"), "203.0.113.7"},
		{"untrusted peer is the client whatever it wrote", xff, request("198.51.100.9:1", "X-Forwarded-For", "1.2.3.4"), "198.51.100.9"},
		{"every hop trusted", xff, request("10.0.0.1:1", "X-Forwarded-For", "10.2.2.2"), ""},
		{"garbage entry", xff, request("10.0.0.1:1", "X-Forwarded-For", "6.6.6.6, not-an-ip"), ""},
		{"forwarded quoted v6 with port", fwd, request("10.0.0.1:1", "Forwarded", `for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https`), "2001:db8:cafe::17"},
		{"forwarded obfuscated node", fwd, request("10.0.0.1:1", "Forwarded", `for=_hidden`), ""},
		{"forwarded unknown", fwd, request("10.0.0.1:1", "Forwarded", `for=unknown`), ""},
		{"trusted hop count", hops, request("10.0.0.1:1", "X-Forwarded-For", "6.6.6.6, 203.0.113.9"), "203.0.113.9"},
		{"single header", real, request("10.0.0.1:1", "X-Real-IP", "203.0.113.5"), "203.0.113.5"},
		{"v4-mapped v6 unmapped", remote, request("[::ffff:203.0.113.7]:80"), "203.0.113.7"},
		{"zone dropped", remote, request("[fe80::1%eth0]:80"), "fe80::1"},
	}
	for _, tt := range tests {
		got, err := tt.r.ClientIP(tt.req)
		switch {
		case tt.want == "" && !errors.Is(err, clientip.ErrNoClientIP):
			t.Errorf("%s: got %v, %v; want ErrNoClientIP", tt.name, got, err)
		case tt.want != "" && (err != nil || got.String() != tt.want):
			t.Errorf("%s: got %v, %v; want %s", tt.name, got, err, tt.want)
		}
	}
}

func TestFallbackChain(t *testing.T) {
	r := must(clientip.RightmostUntrusted("X-Forwarded-For", []string{"10.0.0.0/8"}, clientip.Options{})).Or(must(clientip.RemoteAddr(clientip.Options{})))
	if ip, err := r.ClientIP(request("203.0.113.1:1")); err != nil || ip.String() != "203.0.113.1" {
		t.Fatalf("no header: %v, %v; want the remote address", ip, err)
	}
}

func TestIPv6Grouping(t *testing.T) {
	r := must(clientip.RemoteAddr(clientip.Options{}))
	a, _ := r.Key(request("[2001:db8:1:2:aaaa::1]:1"))
	b, _ := r.Key(request("[2001:db8:1:2:bbbb::9]:1"))
	c, _ := r.Key(request("[2001:db8:1:3::1]:1"))
	if a != b || a != "2001:db8:1:2::/64" || a == c {
		t.Fatalf("keys %q %q %q: one /64 must share a key, another must not", a, b, c)
	}
	r48 := must(clientip.RemoteAddr(clientip.Options{IPv6Prefix: 48}))
	if k, _ := r48.Key(request("[2001:db8:1:3::1]:1")); k != "2001:db8:1::/48" {
		t.Fatalf("/48 key %q", k)
	}
	if k, _ := r.Key(request("203.0.113.7:1")); k != "203.0.113.7" {
		t.Fatalf("IPv4 key %q", k)
	}
	if _, err := clientip.RemoteAddr(clientip.Options{IPv6Prefix: 129}); err == nil {
		t.Fatal("prefix 129 accepted")
	}
	r24 := must(clientip.RemoteAddr(clientip.Options{IPv4Prefix: 24}))
	if k, _ := r24.Key(request("203.0.113.7:1")); k != "203.0.113.0/24" {
		t.Fatalf("IPv4 /24 key %q", k)
	}
	if _, err := clientip.RemoteAddr(clientip.Options{IPv4Prefix: 33}); err == nil {
		t.Fatal("IPv4 prefix 33 accepted")
	}
}

// A chain of thousands of entries is cut to its tail, not parsed whole, and
// still resolves from the right.
func TestOversizedHeader(t *testing.T) {
	r := must(clientip.RightmostUntrusted("X-Forwarded-For", []string{"10.0.0.0/8"}, clientip.Options{}))
	long := strings.Repeat("6.6.6.6, ", 100_000) + "203.0.113.7, 10.0.0.2"
	ip, err := r.ClientIP(request("10.0.0.1:1", "X-Forwarded-For", long))
	if err != nil || ip.String() != "203.0.113.7" {
		t.Fatalf("got %v, %v", ip, err)
	}
}

func FuzzXForwardedFor(f *testing.F) {
	f.Add("1.2.3.4, 10.0.0.1", "10.0.0.9:80")
	f.Add(`"[::1]"`, "[::1]:1")
	f.Add(strings.Repeat(",", 5000), "bad")
	r := must(clientip.RightmostUntrusted("X-Forwarded-For", []string{"10.0.0.0/8"}, clientip.Options{}))
	f.Fuzz(func(t *testing.T, xff, remote string) {
		ip, err := r.ClientIP(request(remote, "X-Forwarded-For", xff))
		if err == nil && (!ip.IsValid() || ip.Zone() != "" || ip.Is4In6()) {
			t.Fatalf("invalid or unnormalised address %v for %q", ip, xff)
		}
		if err != nil && !errors.Is(err, clientip.ErrNoClientIP) {
			t.Fatalf("unexpected error %v", err)
		}
	})
}

func FuzzForwarded(f *testing.F) {
	f.Add(`for=192.0.2.60;proto=http;by=203.0.113.43`, "10.0.0.9:80")
	f.Add(`for="[2001:db8:cafe::17]:4711"`, "10.0.0.9:80")
	f.Add(`for="unbalanced`, "10.0.0.9:80")
	r := must(clientip.RightmostUntrusted("Forwarded", []string{"10.0.0.0/8"}, clientip.Options{}))
	f.Fuzz(func(t *testing.T, fwd, remote string) {
		ip, err := r.ClientIP(request(remote, "Forwarded", fwd))
		if err == nil && (!ip.IsValid() || ip.Zone() != "") {
			t.Fatalf("invalid address %v for %q", ip, fwd)
		}
	})
}
