package door

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/memstore"
)

// Policy is what the rules read of one policy.
type Policy struct {
	Name     string
	Shadow   bool
	FailMode sluice.FailMode
	Missing  sluice.MissingKey
	Conc     *sluice.Concurrency // nil: no concurrency limit
}

// Action is what a policy does for a request whose key it cannot find.
type Action uint8

const (
	// ByAddress limits the request by the client's address instead, under
	// the policy's limits (MissingClientIP, the default).
	ByAddress Action = iota
	// Refuse answers the request as invalid (MissingDeny).
	Refuse
	// Skip leaves the request unlimited by this policy (MissingSkip, and a
	// shadow policy that would refuse: a shadow never refuses).
	Skip
)

// OnMissing is p's action for a request without its key.
func OnMissing(p *Policy) Action {
	switch {
	case p.Missing == sluice.MissingSkip:
		return Skip
	case p.Missing == sluice.MissingDeny && p.Shadow:
		return Skip
	case p.Missing == sluice.MissingDeny:
		return Refuse
	}
	return ByAddress
}

// UnavailableRetry is the wait a caller refused for a failed store under
// a fail-closed policy is told (HTTP's 503 Retry-After, gRPC's
// Unavailable): a second, long enough not to hammer the store it failed
// on, short enough to find it back.
const UnavailableRetry = time.Second

// ErrInvalidIdentity is wrapped by the errors of Identity and Key: the
// request names no identity a counter may be kept under, and is refused
// (400, InvalidArgument) having charged nothing.
var ErrInvalidIdentity = errors.New("invalid request identity")

// ErrIdentityTooLong is wrapped by the error of Identity and Key for an
// identity past sluice.MaxIdentityLen; it wraps ErrInvalidIdentity.
var ErrIdentityTooLong = fmt.Errorf("%w: too long", ErrInvalidIdentity)

// Identity refuses id, an identity a client names (an API key, a user, a
// descriptor's value, a key to inspect), unless a counter may be kept
// under it. It is refused when it is
//
//   - empty;
//   - longer than sluice.MaxIdentityLen bytes, which must not slip
//     through unlimited;
//   - not valid UTF-8, or holding U+FFFD, which is what an invalid byte
//     or a lone surrogate escape decodes to (two such identities would
//     share one counter);
//   - holding a control character: U+0000 to U+001F but the tab (which a
//     header value may hold), or DEL (U+007F). NUL separates the parts of
//     a counter's name, so an identity holding one could name another's.
//
// The error wraps ErrInvalidIdentity and says which rule refused id,
// quoting none of it: an identity may be a credential.
func Identity(id string) error { return check(id, false) }

// Key refuses key, what a door's key function found (httplimit's and
// grpclimit's: a header, metadata, a user, or a composition of parts
// joined by NUL), by Identity's rule, two things aside: a NUL, which a
// composition puts between parts and keeps out of each part itself, and
// an empty key, which only the application's own choice makes (the
// route of a policy that matches every request): a client's empty value
// is a missing key.
func Key(key string) error { return check(key, true) }

// check is Identity, or Key when composed is set.
func check(id string, composed bool) error {
	switch {
	case id == "" && !composed:
		return fmt.Errorf("%w: empty", ErrInvalidIdentity)
	case len(id) > sluice.MaxIdentityLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrIdentityTooLong, len(id), sluice.MaxIdentityLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c-0x20 < 0x7f-0x20: // printable ASCII, the common case
			continue
		case c == '\t' || c == 0 && composed:
			continue
		case c < utf8.RuneSelf:
			return fmt.Errorf("%w: holds a control character (U+0000 to U+001F but the tab, or U+007F)", ErrInvalidIdentity)
		}
		r, n := utf8.DecodeRuneInString(id[i:])
		if r == utf8.RuneError {
			return fmt.Errorf("%w: not valid UTF-8 (or holds U+FFFD)", ErrInvalidIdentity)
		}
		i += n - 1
	}
	return nil
}

// StandIn returns the stand-in that FailLocal policies decide with while
// store fails: a memory store of its own, or nil for a store that cannot
// fail (the memory store).
func StandIn(store sluice.Store) *memstore.Store {
	if ip, ok := store.(guard.InProcess); ok && ip.InProcess() {
		return nil
	}
	return memstore.New(memstore.Options{MaxKeys: 1 << 20})
}

// Answer is how a door answers a request.
type Answer uint8

const (
	Proceed     Answer = iota // pass it on
	Invalid                   // 400, InvalidArgument: Verdict.Err says why
	Unavailable               // 503, Unavailable: the store failed and a policy fails closed
	Limited                   // 429, ResourceExhausted: the decision at Closest (or the slot's) says when to retry
)

// Batch gathers one request's checks across its policies; P is the door's
// own policy type, which each call gives with its rules. Its slices may be
// backed by a door's pooled arrays: Reset keeps their capacity.
type Batch[P comparable] struct {
	Check guard.Check
	// Enforced and Shadow are the policy of each of Check.Enforced and
	// Check.Shadow.
	Enforced, Shadow []P
	// Held are the release functions of the slots the request holds.
	Held []func() error
	// Labeled is the policy the request is counted under, once (the zero
	// P until one applies), and Key its key.
	Labeled P
	Key     string
	shadow  bool // Labeled is a shadow policy
}

// Reset empties b for another request, keeping its slices' arrays.
func (b *Batch[P]) Reset() {
	c := &b.Check
	*c = guard.Check{Enforced: c.Enforced[:0], Modes: c.Modes[:0], Shadow: c.Shadow[:0]}
	b.Enforced, b.Shadow, b.Held = b.Enforced[:0], b.Shadow[:0], b.Held[:0]
	var none P
	b.Labeled, b.Key, b.shadow = none, "", false
}

// Apply notes that p, with rules r, applies to the request under key:
// the request is counted under the first enforced policy that applies,
// else the first shadow one.
func (b *Batch[P]) Apply(p P, r *Policy, key string) {
	var none P
	if b.Labeled == none || b.shadow && !r.Shadow {
		b.Labeled, b.Key, b.shadow = p, key, r.Shadow
		b.Check.Label = r.Name
	}
}

// Add adds p's requests: req under each of limits.
func (b *Batch[P]) Add(p P, r *Policy, req sluice.Request, limits []sluice.Limit) {
	c := &b.Check
	for _, l := range limits {
		req.Limit = l
		if r.Shadow {
			b.Shadow, c.Shadow = append(b.Shadow, p), append(c.Shadow, req)
		} else {
			b.Enforced, c.Enforced, c.Modes = append(b.Enforced, p), append(c.Enforced, req), append(c.Modes, r.FailMode)
		}
	}
}

// Hold takes the concurrency slot of p, with rules r, for key through g,
// where it is an enforced policy with one. Refused, it releases every
// slot the request holds, counts the request under p, and returns the
// answer with the slot's decision and verdict.
func (b *Batch[P]) Hold(ctx context.Context, g *guard.Guard, p P, r *Policy, key string) (Answer, sluice.Decision, guard.Verdict) {
	if r.Shadow || r.Conc == nil {
		return Proceed, sluice.Decision{}, guard.Verdict{}
	}
	release, d, v := g.Hold(ctx, r.Conc, &b.Check, r.Name, key)
	if release != nil {
		b.Held = append(b.Held, release)
		return Proceed, d, v
	}
	b.Release()
	b.Labeled, b.Key, b.shadow = p, key, false
	b.Check.Label = r.Name
	switch v.Outcome {
	case guard.Invalid:
		return Invalid, d, v
	case guard.FailedClosed:
		return Unavailable, d, v
	}
	return Limited, d, v
}

// Release gives back every slot the request holds.
func (b *Batch[P]) Release() {
	for _, f := range b.Held {
		f()
	}
	b.Held = b.Held[:0]
}

// Empty reports whether nothing applies to the request: no rate to decide
// and no slot held.
func (b *Batch[P]) Empty() bool {
	return len(b.Check.Enforced)+len(b.Check.Shadow)+len(b.Held) == 0
}

// Decide decides b's requests through g into ds and sds (each at least as
// long as its requests), and returns the verdict and the answer. A request
// refused (Invalid, Unavailable, Limited) holds no slot after it.
func (b *Batch[P]) Decide(ctx context.Context, g *guard.Guard, ds, sds []sluice.Decision) (guard.Verdict, Answer) {
	v := g.Decide(ctx, &b.Check, ds, sds)
	a := Proceed
	switch {
	case v.Outcome == guard.Invalid:
		a = Invalid
	case v.Outcome == guard.FailedClosed:
		a = Unavailable
	case v.Closest >= 0 && !ds[v.Closest].Allowed:
		a = Limited
	}
	if a != Proceed {
		b.Release()
	}
	return v, a
}
