// Package freeport hands out loopback ports for the servers tests start
// in processes of their own, which must be told a port before they
// listen.
//
// A port the kernel picked for a listener (":0") comes from the range it
// also takes outgoing connections' local ports from: between the test
// closing its probe and the server binding, any connection the test, or a
// test running beside it, opens may take it ("address already in use").
// The ports here come from below that range, where no connection's port
// is ever taken, and none is handed out twice by one process.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
)

// lowest is the first port handed out: above the well-known and most
// registered ones a host runs.
const lowest = 12000

var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Port returns a port free on 127.0.0.1 whose every port+offset is free
// too (Redis Cluster's bus listens on port+10000), all of them below the
// kernel's range for outgoing connections.
func Port(t testing.TB, offsets ...int) int {
	t.Helper()
	// Candidates are below top; where the range starts too low for any,
	// anywhere up to 65535, as the kernel would pick.
	start := ephemeralStart()
	top := start
	for _, o := range offsets {
		top = min(top, start-o)
	}
	if top <= lowest {
		top = 65536
		for _, o := range offsets {
			top = min(top, 65536-o)
		}
	}
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 1000 {
		p := lowest + rand.IntN(top-lowest)
		if handedOut.ports[p] || !free(p) {
			continue
		}
		ok := true
		for _, o := range offsets {
			ok = ok && !handedOut.ports[p+o] && free(p+o)
		}
		if ok {
			handedOut.ports[p] = true
			for _, o := range offsets {
				handedOut.ports[p+o] = true
			}
			return p
		}
	}
	t.Fatal("freeport: no free port found")
	return 0
}

// Addr returns "127.0.0.1:port" of a Port.
func Addr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", Port(t))
}

// free reports whether port can be listened on at 127.0.0.1 now.
func free(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ephemeralStart returns the first port of the kernel's range for
// outgoing connections: Linux's ip_local_port_range, or 32768 (Linux's
// default, below the IANA range other systems use) where it cannot be
// read.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var lo int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &lo); err != nil {
		return 32768
	}
	return lo
}
