package freeport

import (
	"fmt"
	"net"
	"testing"
)

// Ports come from below the kernel's range for outgoing connections, are
// free to listen on with their offsets, and are never handed out twice.
func TestPortsBelowTheEphemeralRangeOnce(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p := Port(t, 10000)
		for _, q := range []int{p, p + 10000} {
			if seen[q] {
				t.Fatalf("port %d handed out twice", q)
			}
			seen[q] = true
			if start := ephemeralStart(); start > lowest+10000 && q >= start {
				t.Fatalf("port %d is in the ephemeral range, from %d", q, start)
			}
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", q))
			if err != nil {
				t.Fatalf("port %d handed out: %v", q, err)
			}
			l.Close()
		}
	}
}
