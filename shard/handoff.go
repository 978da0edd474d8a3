package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	shardv1 "github.com/sluicehq/sluice/api/shardv1"
)

// Hand-off: when the ring changes, a key that moves goes with its state.
//
// The member that held it (the old owner) marks the change as a move,
// swaps its ring, takes the keys it no longer owns out of Local and sends
// each to its new owner as a forced request of what it used (FLAG_HOP |
// FLAG_HANDOFF), then tells every member that joined that it has handed
// it everything (Batch.handed_off). Until then a check of a moving key
// waits for the move, here or at the peer service, so that no check is
// decided between the key's state leaving and arriving.
//
// The member that joins settles: the checks of the keys it now owns, its
// own and those peers send it, go to their owner in the ring without it
// until that owner has handed them over, leaves the ring, or the settling
// ends (settleFor: a member that never sees it then shares the key, as in
// any split of the ring). That owner decides them while it holds the key,
// and once it has handed the key over passes them back, to be decided on
// the state it sent.
//
// A member never decides a key its ring gives to another: it passes the
// call on, counting the passes in the call's flags (FLAG_HOP once,
// FLAG_FINAL twice, both three times), and a call passed three times is
// decided by a member that owns it or else fails, so rings that disagree
// cannot send it round. Each count has streams of its own, so a pass never
// waits behind a call that waits for it.
//
// A member that leaves on purpose (Leave) moves all its keys to the ring
// without it, tells the others, which drop it at once, and passes on the
// checks that still reach it. One that dies takes its keys' state with
// it: the survivors start them afresh.

// move is a hand-off in progress: checks of the keys that old gives to
// this instance and new to another wait for done.
type move struct {
	old, new *Ring
	done     chan struct{}
}

// join is this instance's settling after it joined: a key it owns that
// without gives to another member stays that member's until it has handed
// this instance its keys, or until deadline.
type join struct {
	without  *Ring    // where the keys were
	from     []string // the members expected to hand keys over
	deadline time.Time
}

// handoffWorkers is how many forwards of a hand-off run at once per owner.
const handoffWorkers = 64

// settleFor is how long a member that joined waits at most for the others
// to hand it its keys: far past a membership interval and the gRPC
// reconnection a returning member's address needs.
func (s *Store) settleFor() time.Duration {
	return max(10*s.opts.Interval, 10*time.Second) + s.opts.Timeout
}

// change swaps ring old for r, hands the keys that move to their new
// owners, and tells each member of tell that it has.
func (s *Store) change(old, r *Ring, tell []string) {
	m := &move{old: old, new: r, done: make(chan struct{})}
	for _, added := range r.Members() {
		if !slices.Contains(old.Members(), added) {
			// A member back on its address: its old connections may be
			// waiting to reconnect; new ones reach it now.
			s.dropPeers(added)
		}
	}
	s.moving.Store(m) // before the ring: a check that sees r sees the move
	s.ring.Store(r)
	// The checks being decided here on the old ring finish first: a
	// key extracted before one of them is decided would be decided again
	// from nothing, and admit what its state would have denied.
	s.gate.Lock()
	//lint:ignore SA2001 a barrier: it waits for the readers, and holds nothing
	s.gate.Unlock()
	// A second pass takes the keys that checks in flight at the swap, on
	// the old ring, made again meanwhile.
	reqs := s.extract(r)
	reqs = append(reqs, s.extract(r)...)
	s.send(r, reqs)
	s.tell(tell, false)
	s.moving.CompareAndSwap(m, nil)
	close(m.done)
}

// added returns the members of r that old lacks, this instance aside.
func (s *Store) added(old, r *Ring) []string {
	var out []string
	for _, m := range r.Members() {
		if m != s.opts.Self && !slices.Contains(old.Members(), m) {
			out = append(out, m)
		}
	}
	return out
}

// tell announces to members that this instance has handed them its keys,
// and with leaving that it leaves.
func (s *Store) tell(members []string, leaving bool) {
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(func() {
			if p, err := s.peerFor(finalFlags, m); err == nil {
				p.announce(s.opts.Self, leaving)
			}
		})
	}
	wg.Wait()
}

// startJoin begins this instance's settling in ring r, which it joins.
func (s *Store) startJoin(r *Ring) {
	others := slices.DeleteFunc(slices.Clone(r.Members()), func(m string) bool { return m == s.opts.Self })
	s.hmu.Lock()
	defer s.hmu.Unlock()
	// handedBy is not cleared: a member may have seen this one, and handed
	// it its keys, before this one saw it.
	s.joining.Store(&join{without: NewRing(others, s.opts.Replicas, s.opts.Hash), from: others, deadline: time.Now().Add(s.settleFor())})
}

// Leave hands every key this instance holds to its owner among the other
// members, and from then on sends every check there, its own and those
// that peers still forward to it: call it when the instance stops on
// purpose, before its peer service stops, so that its keys keep their
// state. The members that remain see it leave when its health check
// fails; until then they reach its keys through it.
func (s *Store) Leave() {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if s.leaving.Swap(true) {
		return
	}
	old := s.ring.Load()
	others := slices.DeleteFunc(slices.Clone(old.Members()), func(m string) bool { return m == s.opts.Self })
	if len(others) == 0 {
		return // the last member: nobody to hand its keys to
	}
	s.joining.Store(nil)
	s.opts.Logger.Info("shard: leaving; handing keys to the other members", "members", others)
	// The others drop this instance first, and send the checks of its
	// keys here until it has handed them over.
	s.tell(others, true)
	s.change(old, NewRing(others, s.opts.Replicas, s.opts.Hash), others)
}

// hasLeft reports whether this instance has left the ring and handed its
// keys over.
func (s *Store) hasLeft() bool { return s.leaving.Load() && s.moving.Load() == nil }

// drop takes member m, which announced it leaves, out of the ring now, and
// keeps it out for goneFor, whatever membership says meanwhile (its
// health check may pass once more). The keys m owned stay its, as a
// joining member's stay their previous owner's, until it has handed them
// over.
func (s *Store) drop(m string) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	old := s.ring.Load()
	s.hmu.Lock()
	s.gone[m] = time.Now().Add(goneFor)
	delete(s.handedBy, m)
	s.joining.Store(&join{without: old, from: []string{m}, deadline: time.Now().Add(s.settleFor())})
	s.hmu.Unlock()
	if !slices.Contains(old.Members(), m) || s.leaving.Load() {
		return
	}
	r := NewRing(slices.DeleteFunc(slices.Clone(old.Members()), func(x string) bool { return x == m }), s.opts.Replicas, s.opts.Hash)
	s.opts.Logger.Info("shard: a member left", "member", m, "members", r.Members())
	s.change(old, r, nil)
}

// goneFor is how long a member that left stays out of the ring.
const goneFor = time.Minute

// left reports whether member m announced it left, lately.
func (s *Store) left(m string) bool {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	until, ok := s.gone[m]
	if ok && time.Now().After(until) {
		delete(s.gone, m)
		return false
	}
	return ok
}

// extract takes the keys of Local that r gives to another member out of
// it, as forced requests of what each used.
func (s *Store) extract(r *Ring) []sluice.Request {
	ex, ok := s.opts.Local.(Extractor)
	if !ok {
		return nil
	}
	self := s.opts.Self
	return ex.Extract(func(key string) bool { o := r.Owner(key); return o == self || o == "" }, time.Now())
}

// send hands reqs to their owners in r.
func (s *Store) send(r *Ring, reqs []sluice.Request) {
	if len(reqs) == 0 {
		return
	}
	byOwner := map[string][]sluice.Request{}
	for _, q := range reqs {
		o := r.Owner(q.Key)
		byOwner[o] = append(byOwner[o], q)
	}
	var failed atomic.Int64
	var wg sync.WaitGroup
	for owner, qs := range byOwner {
		p, err := s.peerFor(handoffFlags, owner)
		if err != nil {
			failed.Add(int64(len(qs)))
			continue
		}
		// Concurrent forwards to one peer leave in shared batches.
		var next atomic.Int64
		for range min(handoffWorkers, len(qs)) {
			wg.Go(func() {
				var d [1]sluice.Decision
				for i := next.Add(1) - 1; i < int64(len(qs)); i = next.Add(1) - 1 {
					if p.do(context.Background(), qs[i:i+1], false, handoffFlags, d[:]) != nil {
						failed.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	n := failed.Load()
	s.handed.Add(int64(len(reqs)) - n)
	s.lost.Add(n)
	if n > 0 {
		s.opts.Logger.Warn("shard: keys not handed to their new owner start afresh there", "handed", int64(len(reqs))-n, "failed", n)
		return
	}
	s.opts.Logger.Info("shard: keys handed to their new owners", "keys", len(reqs), "owners", len(byOwner))
}

const (
	hopFlags     = uint32(shardv1.Flag_FLAG_HOP)
	handoffFlags = uint32(shardv1.Flag_FLAG_HANDOFF)
	finalFlags   = uint32(shardv1.Flag_FLAG_FINAL)
	// failoverFlags marks a call to the successor of an owner that cannot
	// be reached: it decides it.
	failoverFlags = uint32(shardv1.Flag_FLAG_FAILOVER)
	maxPasses     = 3
)

// passes returns how many times a call of flags was passed on.
func passes(flags uint32) int {
	n := 0
	if flags&hopFlags != 0 {
		n++
	}
	if flags&finalFlags != 0 {
		n += 2
	}
	return n
}

// passFlags returns the flags of a call passed on n times.
func passFlags(n int) uint32 {
	var f uint32
	if n&1 != 0 {
		f |= hopFlags
	}
	if n&2 != 0 {
		f |= finalFlags
	}
	return f
}

// HandedOff returns how many keys this instance handed to a new owner, and
// how many it could not (those start afresh there).
func (s *Store) HandedOff() (handed, failed int64) { return s.handed.Load(), s.lost.Load() }

// owner returns where a check of key that this instance was asked goes:
// itself, or the member to forward it to with flags. It waits while key
// moves away. While this instance settles, a key whose state is still at
// its previous owner goes there (FLAG_HOP). When it returns this instance,
// it holds s.gate for reading, and the caller releases it once Local has
// decided.
func (s *Store) owner(ctx context.Context, key string) (string, uint32, error) {
	to, flags, _, err := s.ownerFor(ctx, key, time.Time{}, func() (string, uint32) {
		if w, ok := s.settled(key); !ok {
			return w, hopFlags
		}
		return "", 0
	})
	if to == "" && err == nil {
		return s.opts.Self, 0, nil
	}
	return to, flags, err
}

// ownerFor is owner for a key of this ring with here deciding where a key
// that this instance owns goes instead ("" for nowhere: it is decided
// here). It returns "" holding s.gate for reading. A wait for key's move
// ends at ctx's end or at dl (none when zero); waited reports whether
// there was one.
func (s *Store) ownerFor(ctx context.Context, key string, dl time.Time, here func() (string, uint32)) (to string, flags uint32, waited bool, err error) {
	for {
		w, err := s.waitMove(ctx, key, dl)
		waited = waited || w
		if err != nil {
			return "", 0, waited, err
		}
		s.gate.RLock()
		if s.movingAway(key) != nil {
			s.gate.RUnlock() // a hand-off of key began meanwhile: wait for it
			continue
		}
		owner := s.ring.Load().Owner(key)
		if owner != s.opts.Self && owner != "" {
			s.gate.RUnlock()
			return owner, 0, waited, nil
		}
		if to, flags := here(); to != "" {
			s.gate.RUnlock()
			return to, flags, waited, nil
		}
		return "", 0, waited, nil
	}
}

// movingAway returns the hand-off in progress if it takes key away from
// this instance, or nil.
func (s *Store) movingAway(key string) *move {
	m := s.moving.Load()
	if m == nil || m.old.Owner(key) != s.opts.Self || m.new.Owner(key) == s.opts.Self {
		return nil
	}
	return m
}

// waitMove waits while key is leaving this instance in a hand-off, until
// ctx ends or dl passes (none when zero), and reports whether it waited.
// The timer is made only for a wait.
func (s *Store) waitMove(ctx context.Context, key string, dl time.Time) (waited bool, err error) {
	m := s.movingAway(key)
	if m == nil {
		return false, nil
	}
	var late <-chan time.Time
	if !dl.IsZero() {
		t := time.NewTimer(time.Until(dl))
		defer t.Stop()
		late = t.C
	}
	select {
	case <-m.done:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	case <-late:
		return true, context.DeadlineExceeded
	}
}

// settled reports whether this instance, settling after a join, holds
// key's state, or else which member still does.
func (s *Store) settled(key string) (string, bool) {
	j := s.joining.Load()
	if j == nil {
		return "", true
	}
	if time.Now().After(j.deadline) {
		s.joining.CompareAndSwap(j, nil)
		return "", true
	}
	w := j.without.Owner(key)
	if w == "" || w == s.opts.Self {
		return "", true
	}
	s.hmu.Lock()
	defer s.hmu.Unlock()
	_, left := s.gone[w]
	if !left && !slices.Contains(s.ring.Load().Members(), w) {
		return "", true // a member that died since: its state went with it
	}
	if s.handedBy[w] {
		if !slices.ContainsFunc(j.from, func(m string) bool { return !s.handedBy[m] }) {
			s.joining.CompareAndSwap(j, nil) // every member has: settled
		}
		return "", true
	}
	return w, false
}

// noteHanded records that member from has handed this instance its keys.
func (s *Store) noteHanded(from string) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.handedBy[from] = true
}

// pass sends a call on to member to, with flags (FLAG_HOP or FLAG_FINAL).
func (s *Store) pass(ctx context.Context, to string, reqs []sluice.Request, reset bool, flags uint32, dst []sluice.Decision) error {
	p, err := s.peerFor(flags, to)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrPeer, to, err)
	}
	s.forwarded.Add(1)
	return p.do(ctx, reqs, reset, flags, dst)
}

// Register adds the peer service to a gRPC server: it decides the calls
// for keys this instance owns with Options.Local, and passes the others
// on to their owner (FLAG_HOP), so that a peer whose ring is behind, after
// a member joined or while this one leaves, still reaches the key's state.
// It serves only the members Options.Auth admits: give it a server of
// its own, on the members' network, never one that clients reach.
func (s *Store) Register(srv *grpc.Server) {
	shardv1.RegisterPeerServer(srv, &service{local: s.opts.Local, route: s, auth: &s.opts.Auth})
}

// serve decides a call of reqs into ds (or with reset, resets the first
// request's key and limit), or passes it on: a hand-off (FLAG_HANDOFF) is
// decided here; a call for a key another member owns in this one's ring
// is passed to it, and one for a key this instance owns whose state is
// still at the previous owner, while it settles, is passed there; the
// rest is decided here. A call passed maxPasses times already is decided
// here when this instance owns its key, and fails otherwise: the members
// disagree on its owner. A key moving away waits for its move first.
//
// A call that arrived (in its batch) at arrived is not decided once its
// caller's time is up: the budget its sender said it had left (µs; 0 for
// none said), and never past the Timeout from arrived, since its caller's
// own Timeout started before it sent the call. The caller has answered
// its check with an error by then, so a call still waiting here (for its
// key's move, or passed on to another member) is failed, and nobody is
// charged for a check they were answered an error for; one whose caller
// had given up before it was sent (a negative budget) is failed at once.
// A call that waits for nothing costs no timer. Hand-offs are state,
// recorded however late.
func (sv *service) serve(ctx context.Context, arrived time.Time, budget int64, reqs []sluice.Request, reset bool, flags uint32, ds []sluice.Decision) ([]sluice.Decision, error) {
	if budget < 0 && flags&handoffFlags == 0 {
		return ds, context.DeadlineExceeded // its caller had given up before it was sent
	}
	if s := sv.route; s != nil && flags&(handoffFlags|failoverFlags) == 0 {
		key := reqs[0].Key
		n := passes(flags)
		dl := arrived.Add(s.opts.Timeout)
		if b := time.Duration(budget) * time.Microsecond; budget > 0 && b < s.opts.Timeout {
			dl = arrived.Add(b)
		}
		to, _, waited, err := s.ownerFor(ctx, key, dl, func() (string, uint32) {
			if w, ok := s.settled(key); !ok && n < 2 {
				return w, 0 // a call the previous owner passed back is decided here
			}
			return "", 0
		})
		switch {
		case err != nil:
			return ds, err
		case to == "":
			defer s.gate.RUnlock()
		case n >= maxPasses:
			return ds, status.Errorf(codes.Unavailable, "shard: members disagree on the owner of key %q; passed on %d times", key, n)
		default:
			out := append(ds, make([]sluice.Decision, len(reqs))...)
			pctx, cancel := context.WithDeadline(ctx, dl)
			err := s.pass(pctx, to, reqs, reset, passFlags(n+1), out)
			ended := pctx.Err() != nil // read before cancel ends it
			cancel()
			if err == nil || !errors.Is(err, ErrPeer) || ended || !s.succeeds(to, key) {
				return out, err
			}
			// to cannot be reached and this instance owns the key
			// without it: decided here, as the caller's own failover
			// would be, so that a caller whose ring has dropped to
			// before this one has still reaches one decider.
			waited = true
		}
		if waited && !time.Now().Before(dl) {
			return ds, context.DeadlineExceeded // its caller has given up
		}
	}
	return serveCall(ctx, sv.local, reqs, reset, ds)
}
