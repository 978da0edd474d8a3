// Package shard is the per-shard distributed mode: every key is owned by
// one instance, found on a consistent-hash ring of the live members, and
// decided there from memory. An instance answers the keys it owns with no
// round trip, and forwards the others to their owner over gRPC, batching
// concurrent forwards to one peer into one call. Decisions are exact while
// membership is stable.
//
// When membership changes, the ring is rebuilt and swapped atomically, and
// keys move to their new owners with their state: an instance hands each
// key it no longer owns to its new owner (what the key used, as forced
// requests) as soon as it sees the new ring, and passes on the calls that
// peers still send it for such keys. An instance that joins, or returns,
// sends the checks of its keys to their previous owners until those have
// seen it and handed the keys over; one that leaves on purpose (Leave, on
// SIGTERM) hands all its keys over before it stops. A check for an owner
// that cannot be reached goes to its successor on the ring. Only a member
// that dies loses its keys' state: the survivors start them afresh. While two
// instances briefly disagree on the ring, a key can be decided by both:
// over-admission is bounded by the number of owners it had.
//
// A TakeAll whose keys have different owners is refused with
// ErrCrossOwner, not split: one all-or-nothing decision needs one owner.
// Give the keys of one decision the same key (several limits on one key)
// to keep them together.
package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
)

// Options configures a Store.
type Options struct {
	// Self is this instance's peer address, as the others reach it.
	Self string
	// Members lists the live members. Required.
	Members Membership
	// Local decides the keys this instance owns. Required.
	Local sluice.Store
	// Interval between membership checks. Default 1s.
	Interval time.Duration
	// Replicas is the virtual nodes per member. Default 128.
	Replicas int
	// Hash places keys and members on the ring. Default HashFNV.
	Hash func([]byte) uint64
	// BatchSize bounds the forwards to one peer that share a call. While
	// a few calls to a peer are running, further forwards queue and leave
	// together when one returns: no timer, so a lone forward waits for
	// nothing. Default 256.
	BatchSize int
	// Timeout bounds a forward. Default 200ms.
	Timeout time.Duration
	// Auth says who is a member, on both sides of the peer protocol: the
	// zero value admits anyone, in clear (see Auth).
	Auth   Auth
	Logger *slog.Logger
}

// ErrCrossOwner is returned by TakeAll for a batch whose keys have
// different owners.
var ErrCrossOwner = errors.New("shard: batch keys have different owners; one decision needs one owner")

// Store routes each key to its owner. It is safe for concurrent use; Close
// it to stop the membership loop.
type Store struct {
	opts Options
	ring atomic.Pointer[Ring]
	// moving is the hand-off in progress, nil for none; joining is this
	// instance's settling after it joined, nil when it is not; handedBy
	// are the members that have handed it their keys (see handoff.go).
	moving  atomic.Pointer[move]
	joining atomic.Pointer[join]
	// gate is held for reading while a check is decided here, from
	// reading the ring to Local's answer; a hand-off takes it for writing
	// once it has swapped the ring, so that it extracts the keys only
	// after the decisions made on the old ring (see owner).
	gate     sync.RWMutex
	hmu      sync.Mutex
	handedBy map[string]bool
	gone     map[string]time.Time // members that announced they left, until when they stay out; guarded by hmu
	leaving  atomic.Bool
	succ     atomic.Pointer[successorRing]
	rmu      sync.Mutex // serialises ring changes: refresh, drop, Leave
	mu       sync.Mutex
	// peers forwards this instance's own calls; hops and finals the calls
	// it passes on with FLAG_HOP and with FLAG_FINAL or FLAG_HANDOFF, on
	// streams of their own (see handoff.go).
	peers     map[string]*peer
	hops      map[string]*peer
	finals    map[string]*peer
	forwarded atomic.Int64
	handed    atomic.Int64 // keys handed to a new owner
	lost      atomic.Int64 // keys whose hand-off failed
	stop      chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

// Extractor is a Local store whose keys can be handed to another owner:
// memstore.Store is one. With another Local store, keys that move start
// afresh at their new owner.
type Extractor interface {
	// Extract removes the keys keep refuses and returns what each used,
	// as forced requests.
	Extract(keep func(key string) bool, now time.Time) []sluice.Request
}

var _ sluice.Store = (*Store)(nil)

// New builds the first ring and starts watching membership.
func New(opts Options) (*Store, error) {
	if opts.Members == nil || opts.Local == nil || opts.Self == "" {
		return nil, errors.New("shard: Self, Members and Local are required")
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Replicas <= 0 {
		opts.Replicas = 128
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 256
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 200 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Store{opts: opts, peers: map[string]*peer{}, hops: map[string]*peer{}, finals: map[string]*peer{}, handedBy: map[string]bool{}, gone: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	s.ring.Store(NewRing([]string{opts.Self}, opts.Replicas, opts.Hash))
	// The first check gives peers time to be reached: an instance that
	// starts deciding alone decides its peers' keys afresh meanwhile.
	s.refreshWithin(max(opts.Interval, firstCheck))
	go s.loop()
	return s, nil
}

func (s *Store) loop() {
	defer close(s.done)
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.refresh()
		}
	}
}

// refresh rebuilds the ring if membership changed, and hands the keys
// this instance no longer owns to their new owners.
func (s *Store) refresh() { s.refreshWithin(s.opts.Interval) }

// refreshWithin is refresh with d for the membership check.
func (s *Store) refreshWithin(d time.Duration) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if s.leaving.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	members := slices.DeleteFunc(s.opts.Members.Members(ctx), s.left)
	if !slices.Contains(members, s.opts.Self) {
		members = append(members, s.opts.Self)
	}
	r := NewRing(members, s.opts.Replicas, s.opts.Hash)
	old := s.ring.Load()
	if slices.Equal(r.Members(), old.Members()) {
		return
	}
	if len(old.Members()) == 1 && len(r.Members()) > 1 {
		s.startJoin(r)
	}
	s.opts.Logger.Info("shard: membership changed", "members", r.Members())
	s.change(old, r, s.added(old, r))
}

// Members returns the members of the current ring.
func (s *Store) Members() []string { return s.ring.Load().Members() }

// Forwarded returns how many calls were forwarded to other owners.
func (s *Store) Forwarded() int64 { return s.forwarded.Load() }

// Close stops watching membership and closes peer connections.
func (s *Store) Close() {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ps := range []map[string]*peer{s.peers, s.hops, s.finals} {
		for _, p := range ps {
			p.close()
		}
	}
}

// dropPeers closes the connections to addr; the next call opens new ones.
func (s *Store) dropPeers(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ps := range []map[string]*peer{s.peers, s.hops, s.finals} {
		if p := ps[addr]; p != nil {
			p.close()
			delete(ps, addr)
		}
	}
}

// peerFor returns the peer at addr for calls of flags: hops and finals
// have streams of their own.
func (s *Store) peerFor(flags uint32, addr string) (*peer, error) {
	switch {
	case flags&(finalFlags|handoffFlags|failoverFlags) != 0:
		return s.peerIn(s.finals, addr)
	case flags&hopFlags != 0:
		return s.peerIn(s.hops, addr)
	}
	return s.peerIn(s.peers, addr)
}

func (s *Store) peerIn(ps map[string]*peer, addr string) (*peer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := ps[addr]; p != nil {
		return p, nil
	}
	p, err := newPeer(addr, s.opts.BatchSize, s.opts.Timeout, s.opts.Auth.DialOptions())
	if err != nil {
		return nil, err
	}
	ps[addr] = p
	return p, nil
}

// Owner returns the member that owns key now.
func (s *Store) Owner(key string) string { return s.ring.Load().Owner(key) }

// Take decides req at its key's owner.
func (s *Store) Take(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	owner, flags, err := s.owner(ctx, req.Key)
	if err != nil {
		return sluice.Decision{}, err
	}
	if owner == s.opts.Self {
		defer s.gate.RUnlock()
		return s.opts.Local.Take(ctx, req)
	}
	if err := req.Validate(); err != nil {
		return sluice.Decision{}, err
	}
	var d [1]sluice.Decision
	if err := s.call(ctx, owner, flags, []sluice.Request{req}, false, d[:]); err != nil {
		return sluice.Decision{}, err
	}
	return d[0], nil
}

// call forwards a call to owner with flags. When the owner (of the ring:
// flags 0) cannot be reached, the call goes to its successor on the ring, the member that
// owns the key once the owner is gone (FLAG_FAILOVER): so the key is
// decided in one place, which keeps it, while membership catches up with
// a member that died.
func (s *Store) call(ctx context.Context, owner string, flags uint32, reqs []sluice.Request, reset bool, dst []sluice.Decision) error {
	err := s.forward(ctx, owner, flags, reqs, reset, dst)
	if err == nil || !errors.Is(err, ErrPeer) || ctx.Err() != nil || flags != 0 {
		return err // a call to a key's previous owner (flags) fails with it
	}
	next := s.successors(owner).Owner(reqs[0].Key)
	switch next {
	case "", owner:
		return err
	case s.opts.Self:
		return s.decideLocal(ctx, reqs, reset, dst)
	}
	if ferr := s.forward(ctx, next, failoverFlags, reqs, reset, dst); ferr == nil || !errors.Is(ferr, ErrPeer) {
		return ferr
	}
	return err
}

func (s *Store) forward(ctx context.Context, to string, flags uint32, reqs []sluice.Request, reset bool, dst []sluice.Decision) error {
	p, err := s.peerFor(flags, to)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrPeer, to, err)
	}
	s.forwarded.Add(1)
	return p.do(ctx, reqs, reset, flags, dst)
}

// decideLocal decides a call with Local.
func (s *Store) decideLocal(ctx context.Context, reqs []sluice.Request, reset bool, dst []sluice.Decision) error {
	switch {
	case reset:
		return s.opts.Local.Reset(ctx, reqs[0].Key, reqs[0].Limit)
	case len(reqs) == 1:
		d, err := s.opts.Local.Take(ctx, reqs[0])
		dst[0] = d
		return err
	}
	return s.opts.Local.TakeAll(ctx, reqs, dst)
}

// succeeds reports whether this instance owns key in the ring without
// member m: where a call for m's key goes when m cannot be reached.
func (s *Store) succeeds(m, key string) bool {
	return s.successors(m).Owner(key) == s.opts.Self
}

// successors returns the ring without member m, cached for the ring now.
func (s *Store) successors(m string) *Ring {
	r := s.ring.Load()
	if c := s.succ.Load(); c != nil && c.of == m && c.base == r {
		return c.ring
	}
	nr := NewRing(slices.DeleteFunc(slices.Clone(r.Members()), func(x string) bool { return x == m }), s.opts.Replicas, s.opts.Hash)
	s.succ.Store(&successorRing{of: m, base: r, ring: nr})
	return nr
}

// successorRing is a ring less one member, of, made from base.
type successorRing struct {
	of         string
	base, ring *Ring
}

// TakeAll decides reqs at their owner, all-or-nothing; keys of different
// owners are refused with ErrCrossOwner.
func (s *Store) TakeAll(ctx context.Context, reqs []sluice.Request, dst []sluice.Decision) error {
	if len(reqs) == 0 {
		return nil
	}
	if len(dst) < len(reqs) {
		return fmt.Errorf("shard: TakeAll: %d decisions for %d requests", len(dst), len(reqs))
	}
	ring := s.ring.Load()
	for _, r := range reqs[1:] {
		if ring.Owner(r.Key) != ring.Owner(reqs[0].Key) {
			return ErrCrossOwner
		}
	}
	owner, flags, err := s.owner(ctx, reqs[0].Key)
	if err != nil {
		return err
	}
	if owner == s.opts.Self {
		defer s.gate.RUnlock()
		return s.opts.Local.TakeAll(ctx, reqs, dst)
	}
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
	}
	return s.call(ctx, owner, flags, reqs, false, dst)
}

// Reset forgets key under limit at its owner.
func (s *Store) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	owner, flags, err := s.owner(ctx, key)
	if err != nil {
		return err
	}
	if owner == s.opts.Self {
		defer s.gate.RUnlock()
		return s.opts.Local.Reset(ctx, key, limit)
	}
	return s.call(ctx, owner, flags, []sluice.Request{{Key: key, Limit: limit}}, true, nil)
}
