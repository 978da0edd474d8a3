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
