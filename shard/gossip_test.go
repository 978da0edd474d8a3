package shard_test

import (
	"context"
	"fmt"
	"net"
	"slices"
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

// With keys, gossip is encrypted: a process without the key, or with
// another, cannot join, nor does any member list it; a member whose first
// key is the members' second (mid-rotation) joins.
func TestGossipKeysKeepOutsidersOut(t *testing.T) {
	key, next, wrong := []byte("0123456789abcdef"), []byte("fedcba9876543210"), []byte("not-the-key-0000")
	start := func(self string, keys [][]byte, join []string) (*shard.Gossip, string) {
		t.Helper()
		bind := freeUDPTCPPort(t)
		g, err := shard.NewGossip(shard.GossipOptions{Self: self, Bind: bind, Join: join, Keys: keys})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		return g, bind
	}
	seed, seedBind := start("member-a", [][]byte{key, next}, nil)
	second, _ := start("member-b", [][]byte{key, next}, []string{seedBind})
	for _, o := range []struct {
		name string
		keys [][]byte
	}{{"no key", nil}, {"wrong key", [][]byte{wrong}}} {
		// NewGossip returns once its join was answered or refused.
		if g, _ := start("outsider "+o.name, o.keys, []string{seedBind}); len(g.Members(context.Background())) != 1 {
			t.Errorf("outsider with %s sees %v: it joined", o.name, g.Members(context.Background()))
		}
	}
	start("member-c", [][]byte{next, key}, []string{seedBind})
	for _, g := range []*shard.Gossip{seed, second} {
		deadline := time.Now().Add(10 * time.Second)
		for got := g.Members(context.Background()); !slices.Equal(got, []string{"member-a", "member-b", "member-c"}); got = g.Members(context.Background()) {
			if time.Now().After(deadline) {
				t.Fatalf("members %v; want the three members, no outsider", got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
