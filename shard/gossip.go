package shard

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// GossipOptions configures Gossip.
type GossipOptions struct {
	// Self is this instance's peer (gRPC) address, announced to the others.
	Self string
	// Bind is the gossip listen address (host:port). Several instances on
	// one host need one port each: the name of each member is its Self, so
	// they never collide on one IP.
	Bind string
	// Join lists gossip addresses of members to join; empty starts alone.
	Join []string
	// ProbeInterval is how often a member probes another. Default 200ms,
	// so a dead member is noticed within about a second.
	ProbeInterval time.Duration
	// Logs receives memberlist's own log lines. Default: discarded.
	Logs io.Writer
	// Keys encrypt and authenticate the gossip (AES-GCM, each 16, 24 or
	// 32 bytes): the first encrypts what this member sends, any of them
	// opens what it receives, and a message none opens is dropped, so a
	// process without a key can neither join nor be heard. Several let a
	// key be rotated: add the new one second everywhere, then first, then
	// drop the old. Empty: gossip in clear, open to anyone who reaches
	// Bind.
	Keys [][]byte
}

// Gossip is membership by gossip (github.com/hashicorp/memberlist, SWIM):
// members find each other from any one seed and notice deaths by probing.
type Gossip struct {
	list *memberlist.Memberlist
}

// NewGossip starts gossiping and joins opts.Join.
func NewGossip(opts GossipOptions) (*Gossip, error) {
	host, port, err := net.SplitHostPort(opts.Bind)
	if err != nil {
		return nil, fmt.Errorf("shard: gossip bind %q: %w", opts.Bind, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("shard: gossip bind %q: %w", opts.Bind, err)
	}
	c := memberlist.DefaultLANConfig()
	c.Name = opts.Self // unique per instance even on one IP
	c.BindAddr, c.BindPort = host, p
	c.AdvertiseAddr, c.AdvertisePort = host, p
	c.ProbeInterval = opts.ProbeInterval
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 200 * time.Millisecond
	}
	c.ProbeTimeout = c.ProbeInterval / 2
	c.GossipInterval = c.ProbeInterval / 2
	c.SuspicionMult = 2
	logs := opts.Logs
	if logs == nil {
		logs = io.Discard
	}
	c.Logger = log.New(logs, "memberlist: ", 0)
	if len(opts.Keys) > 0 {
		if c.Keyring, err = memberlist.NewKeyring(opts.Keys, opts.Keys[0]); err != nil {
			return nil, fmt.Errorf("shard: gossip keys: %w", err)
		}
		c.GossipVerifyIncoming, c.GossipVerifyOutgoing = true, true
	}
	list, err := memberlist.Create(c)
	if err != nil {
		return nil, fmt.Errorf("shard: gossip: %w", err)
	}
	if len(opts.Join) > 0 {
		if _, err := list.Join(opts.Join); err != nil {
			// Start anyway: the others may come later and join us.
			c.Logger.Printf("[WARN] joining %v: %v", opts.Join, err)
		}
	}
	return &Gossip{list: list}, nil
}

// Members returns the live members' peer addresses.
func (g *Gossip) Members(context.Context) []string {
	var out []string
	for _, m := range g.list.Members() {
		out = append(out, m.Name)
	}
	slices.Sort(out)
	return out
}

// Close leaves the cluster, telling the others, and stops.
func (g *Gossip) Close() error {
	g.list.Leave(time.Second)
	return g.list.Shutdown()
}
