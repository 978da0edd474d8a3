package shard_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shard"
)

func freeUDPTCPPort(t *testing.T) string {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if u, err := net.ListenPacket("udp", addr); err == nil {
			u.Close()
			return addr
		}
	}
	t.Fatal("no free port")
	return ""
}

// Three members on one IP, different ports, find each other from one seed,
// and see a member that leaves go.
func TestGossipOnOneHost(t *testing.T) {
	var gs []*shard.Gossip
	var binds []string
	for i := range 3 {
		bind := freeUDPTCPPort(t)
		var join []string
		if i > 0 {
			join = binds[:1]
		}
		g, err := shard.NewGossip(shard.GossipOptions{Self: fmt.Sprintf("127.0.0.1:%d", 9000+i), Bind: bind, Join: join})
		if err != nil {
			t.Fatal(err)
		}
		binds = append(binds, bind)
		gs = append(gs, g)
	}
	defer func() {
		for _, g := range gs[:2] {
			g.Close()
		}
	}()
	waitMembers := func(g *shard.Gossip, n int) {
		deadline := time.Now().Add(10 * time.Second)
		for len(g.Members(context.Background())) != n {
			if time.Now().After(deadline) {
				t.Fatalf("members %v, want %d", g.Members(context.Background()), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, g := range gs {
		waitMembers(g, 3)
	}
	gs[2].Close()
	waitMembers(gs[0], 2)
	waitMembers(gs[1], 2)
}

// DNS membership resolves a name on every call: localhost, here.
func TestDNSMembership(t *testing.T) {
	got := shard.DNS("localhost", 8081).Members(context.Background())
	found := false
	for _, m := range got {
		if m == "127.0.0.1:8081" {
			found = true
		}
	}
	if !found {
		t.Fatalf("DNS(localhost, 8081) = %v; want 127.0.0.1:8081 among them", got)
	}
	if got := shard.DNS("no-such-host.invalid", 1).Members(context.Background()); len(got) != 0 {
		t.Fatalf("an unresolvable name gave members %v", got)
	}
}
