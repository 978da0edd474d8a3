// Package grpclimit is sluice's gRPC server interceptors: the policy model
// of package httplimit for gRPC, with the full method name as the route and
// the peer address or a metadata value as the key.
//
// A denied call fails with codes.ResourceExhausted carrying a RetryInfo
// detail (google.rpc.RetryInfo) with the retry delay, and the same delay
// in the grpc-retry-pushback-ms trailer, which gRPC's own retry policy
// waits for; its x-ratelimit-* numbers are trailers, an allowed call's
// response headers. A store failure under a fail-closed policy fails with
// codes.Unavailable, told a second the same two ways; under the default
// fail-local policy it is decided by an in-memory stand-in.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/door"
	"github.com/sluicehq/sluice/internal/sample"
)

// KeyFunc returns the identity to limit for a call.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// ErrNoKey is wrapped by key functions that find no identity.
var ErrNoKey = errors.New("grpclimit: no key for call")

// ErrAmbiguousKey is returned by Compose for a part that holds a NUL byte,
// the separator of the parts; the call is refused with InvalidArgument.
var ErrAmbiguousKey = errors.New("grpclimit: a part of the rate limit key holds a NUL byte")

// ErrInvalidKey is wrapped by key functions that find an identity no
// counter may be kept under: empty, longer than sluice.MaxIdentityLen,
// not UTF-8 or holding a control character (NUL too), the rule every
// front door of sluice applies. The call is refused with
// InvalidArgument, charged nothing. The interceptor applies the rule to
// every key it is given, a composition's NUL separators aside.
var ErrInvalidKey = door.ErrInvalidIdentity

// PeerAddr keys by the peer's IP address, IPv6 grouped by /64. Behind a
// proxy, key by a metadata value the proxy sets instead.
func PeerAddr() KeyFunc { return peerAddr }

// peerAddr is PeerAddr's key function, and the identity of a call whose
// policy's key is missing.
func peerAddr(ctx context.Context, _ string) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "", fmt.Errorf("%w: no peer", ErrNoKey)
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		host = p.Addr.String()
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return "", fmt.Errorf("%w: peer %q", ErrNoKey, p.Addr)
	}
	a = a.WithZone("").Unmap()
	if a.Is6() {
		return netip.PrefixFrom(a, 64).Masked().String(), nil
	}
	return a.String(), nil
}

// Metadata keys by the first value of the incoming metadata key, such as
// "x-api-key"; a value no counter may be kept under is refused
// (ErrInvalidKey).
func Metadata(key string) KeyFunc {
	key = strings.ToLower(key)
	return func(ctx context.Context, _ string) (string, error) {
		if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 && v[0] != "" {
			if err := door.Identity(v[0]); err != nil {
				return "", fmt.Errorf("grpclimit: %s metadata: %w", key, err)
			}
			return v[0], nil
		}
		return "", fmt.Errorf("%w: no %s metadata", ErrNoKey, key)
	}
}

// Method keys by the full method name: one limit shared by all callers.
func Method() KeyFunc {
	return func(_ context.Context, m string) (string, error) { return m, nil }
}

// Compose keys by several identities at once, joined with a NUL byte. A
// part that holds a NUL itself could name another combination's counter:
// the call is refused with InvalidArgument (ErrAmbiguousKey).
func Compose(keys ...KeyFunc) KeyFunc {
	return func(ctx context.Context, m string) (string, error) {
		parts := make([]string, len(keys))
		for i, k := range keys {
			v, err := k(ctx, m)
			if err != nil {
				return "", err
			}
			if strings.IndexByte(v, 0) >= 0 {
				return "", ErrAmbiguousKey
			}
			parts[i] = v
		}
		return strings.Join(parts, "\x00"), nil
	}
}

// Policy is one limit on the calls its Method matches.
type Policy struct {
	// Name identifies the policy in keys. Required, unique.
	Name string
	// Method is a full method name ("/pkg.Service/Method"), a service
	// prefix ending in "/" ("/pkg.Service/"), or empty for every call.
	Method string
	// Limit is enforced per key. Required unless Concurrency is set; the
	// zero Limit then means no rate limit.
	Limit sluice.Limit
	Key   KeyFunc
	// Concurrency, if above 0, is how many of the policy's calls one key
	// may have in flight (a stream is in flight until its handler
	// returns): a call over it fails ResourceExhausted, after
	// ConcurrencyWait if set. A refused call holds nothing and is charged
	// nothing. The slots are kept by Options.Slots.
	Concurrency     int64
	ConcurrencyWait time.Duration
	// Cost per call. Zero means 1.
	Cost int64
	// FailMode when the store fails: FailLocal (the default), FailOpen or
	// FailClosed.
	FailMode sluice.FailMode
	// Missing decides a call whose Key finds no identity (no metadata):
	// MissingClientIP (the default) limits it by its peer's address
	// (PeerAddr) under the policy's limit, MissingDeny fails it
	// InvalidArgument, MissingSkip lets it through unlimited by this
	// policy. Each is logged, sampled.
	Missing sluice.MissingKey
	// Shadow decides and records but never fails a call.
	Shadow bool

	rules  door.Policy     // what every front door's rules read
	limits [1]sluice.Limit // Limit, as Batch.Add takes it
}

func (p *Policy) matches(method string) bool {
	switch {
	case p.Method == "":
		return true
	case strings.HasSuffix(p.Method, "/"):
		return strings.HasPrefix(method, p.Method)
	}
	return p.Method == method
}

// Options configures an Interceptor.
type Options struct {
	// Store decides. Required unless Guard is set.
	Store sluice.Store
	// Guard, if set, is the decision core to share with the other front
	// doors on its store; Store and Timeout are then the Guard's. Default: a
	// Guard of its own, with a memory store as the stand-in of FailLocal
	// policies.
	Guard    *guard.Guard
	Policies []Policy
	// Timeout bounds each store call: zero means sluice.DefaultTimeout,
	// negative only the call's context. Not applied to the memory store.
	Timeout time.Duration
	// OnShadowDenied, if set, is called when a shadow policy would deny.
	OnShadowDenied func(policy, method string)
	// OnResult, if set, sees every decided call's verdict (for metrics).
	OnResult func(method string, v *guard.Verdict)
	// Logger receives sampled lines for missing keys and store failures.
	// Default: none.
	Logger *slog.Logger
	// Slots keeps the slots of policies with Concurrency. Default: the
	// store, when it keeps slots (the memory and Redis stores do).
	Slots guard.Slots
}

// Interceptor limits gRPC calls. It is safe for concurrent use.
type Interceptor struct {
	opts     Options
	guard    *guard.Guard
	policies []Policy
	logs     *sample.Sampler
}

// New validates opts and returns an Interceptor.
func New(opts Options) (*Interceptor, error) {
	if (opts.Store == nil && opts.Guard == nil) || len(opts.Policies) == 0 {
		return nil, errors.New("grpclimit: a Store and at least one Policy are required")
	}
	i := &Interceptor{opts: opts, guard: opts.Guard, logs: sample.New(1)}
	store := opts.Store
	if i.guard != nil {
		store = i.guard.Store()
	}
	local := door.StandIn(store) // of FailLocal policies; nil for the memory store
	if opts.Slots == nil {
		opts.Slots, _ = store.(guard.Slots)
	}
	if i.guard == nil {
		var standin sluice.Store
		if local != nil {
			standin = local
		}
		g, err := guard.New(opts.Store, guard.Options{Timeout: opts.Timeout, Local: standin, Logger: opts.Logger})
		if err != nil {
			return nil, err
		}
		i.guard = g
	}
	seen := map[string]bool{}
	for _, p := range opts.Policies {
		switch {
		case p.Name == "" || seen[p.Name]:
			return nil, fmt.Errorf("grpclimit: policy name %q is empty or repeated", p.Name)
		case p.Key == nil:
			return nil, fmt.Errorf("grpclimit: policy %q: no Key", p.Name)
		case p.Concurrency < 0:
			return nil, fmt.Errorf("grpclimit: policy %q: %w: %d", p.Name, sluice.ErrInvalidConcurrency, p.Concurrency)
		case p.Concurrency > 0 && p.Limit == (sluice.Limit{}):
			// Concurrency alone.
		case p.Cost < 0 || p.Cost > p.Limit.Capacity():
			return nil, fmt.Errorf("grpclimit: policy %q: cost %d out of range", p.Name, p.Cost)
		default:
			if err := p.Limit.Validate(); err != nil {
				return nil, fmt.Errorf("grpclimit: policy %q: %w", p.Name, err)
			}
		}
		if p.Concurrency > 0 {
			if opts.Slots == nil {
				return nil, fmt.Errorf("grpclimit: policy %q: concurrency needs Options.Slots: the store keeps none", p.Name)
			}
			c := &sluice.Concurrency{Slots: opts.Slots, Max: p.Concurrency, Wait: p.ConcurrencyWait,
				Timeout: opts.Timeout, FailMode: p.FailMode, Logger: opts.Logger}
			if local != nil {
				c.Local = local
			}
			i.guard.Bind(c)
			if err := c.Validate(); err != nil {
				return nil, fmt.Errorf("grpclimit: policy %q: %w", p.Name, err)
			}
			p.rules.Conc = c
		}
		if p.Cost == 0 {
			p.Cost = 1
		}
		p.rules.Name, p.rules.Shadow, p.rules.FailMode, p.rules.Missing = p.Name, p.Shadow, p.FailMode, p.Missing
		p.limits[0] = p.Limit
		seen[p.Name] = true
		i.policies = append(i.policies, p)
	}
	return i, nil
}

// Unary returns the unary server interceptor.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		release, err := i.check(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		defer release()
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor: a stream is limited once,
// when it opens.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		release, err := i.check(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		defer release()
		return handler(srv, ss)
	}
}

// check decides a call; a non-nil error is the status to fail it with.
// Otherwise release gives back the concurrency slots the call holds.
func (i *Interceptor) check(ctx context.Context, method string) (release func(), err error) {
	b := new(door.Batch[*Policy])
	if err := i.decide(ctx, method, b); err != nil {
		b.Release()
		return nil, err
	}
	return b.Release, nil
}

// decide is check, holding the slots it takes in b; the rules are
// package door's.
func (i *Interceptor) decide(ctx context.Context, method string, b *door.Batch[*Policy]) error {
	for j := range i.policies {
		p := &i.policies[j]
		if !p.matches(method) {
			continue
		}
		r := &p.rules
		key, err := p.Key(ctx, method)
		if errors.Is(err, ErrAmbiguousKey) || errors.Is(err, ErrInvalidKey) {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if err == nil {
			// The one identity rule of every door, on what the key
			// function found; the fallback identity below is the door's own.
			if err := door.Key(key); err != nil {
				return status.Errorf(codes.InvalidArgument, "grpclimit: policy %s: %v", p.Name, err)
			}
		} else {
			i.note(p.Name+" (missing key)", "rate limit key not found; decided by the policy's missing: "+p.Missing.String(), err)
			switch door.OnMissing(r) {
			case door.Skip:
				continue
			case door.Refuse:
				return status.Errorf(codes.InvalidArgument, "no rate limit identity for policy %s: %v", p.Name, err)
			}
			peerKey, perr := peerAddr(ctx, method)
			if perr != nil {
				return status.Errorf(codes.InvalidArgument, "no rate limit identity for policy %s: %v; and %v", p.Name, err, perr)
			}
			key = "\x00" + peerKey // a NUL, which no metadata value holds, then the address
		}
		req := sluice.Request{Key: p.Name + "\x00" + key, Cost: p.Cost}
		b.Apply(p, r, req.Key)
		if a, d, v := b.Hold(ctx, i.guard, p, r, req.Key); a != door.Proceed {
			// Refused here: counted under this policy.
			if i.opts.OnResult != nil {
				i.opts.OnResult(method, &v)
			}
			if err := statusOf(ctx, a, v); err != nil {
				return err
			}
			return refused(ctx, codes.ResourceExhausted, fmt.Sprintf("concurrency limited: %d calls in flight already", p.Concurrency), d.RetryAfter)
		}
		if p.Limit != (sluice.Limit{}) {
			b.Add(p, r, req, p.limits[:])
		}
	}
	if b.Empty() {
		return nil
	}
	ds, sds := make([]sluice.Decision, len(b.Check.Enforced)), make([]sluice.Decision, len(b.Check.Shadow))
	v, a := b.Decide(ctx, i.guard, ds, sds)
	if i.opts.OnResult != nil {
		i.opts.OnResult(method, &v)
	}
	if v.Shadow == guard.ShadowWouldDeny && i.opts.OnShadowDenied != nil {
		for j, d := range sds {
			if !d.Allowed {
				i.opts.OnShadowDenied(b.Shadow[j].Name, method)
			}
		}
	}
	if err := statusOf(ctx, a, v); err != nil {
		return err
	}
	if v.Closest < 0 {
		return nil
	}
	d := ds[v.Closest]
	rate := []string{
		"x-ratelimit-limit", strconv.FormatInt(d.Limit.Rate, 10),
		"x-ratelimit-remaining", strconv.FormatInt(max(d.Remaining, 0), 10),
		"x-ratelimit-reset", strconv.FormatInt(int64((d.ResetAfter+time.Second-1)/time.Second), 10),
	}
	if a == door.Limited {
		return refused(ctx, codes.ResourceExhausted, "rate limited", d.RetryAfter, rate...)
	}
	grpc.SetHeader(ctx, metadata.Pairs(rate...))
	return nil
}

// statusOf is the status of an Invalid or Unavailable answer; nil for the
// others.
func statusOf(ctx context.Context, a door.Answer, v guard.Verdict) error {
	switch a {
	case door.Invalid:
		return status.Error(codes.InvalidArgument, v.Err.Error())
	case door.Unavailable:
		return refused(ctx, codes.Unavailable, "rate limiter unavailable", door.UnavailableRetry)
	}
	return nil
}

// refused is the status code of a refused call, with its retry delay in
// the message, as RetryInfo, and in whole milliseconds, rounded up, as the
// grpc-retry-pushback-ms trailer, which gRPC's own retry policy waits for
// (it reads no RetryInfo). The rate metadata goes in the trailer too, with
// no header: an answer with headers commits the call, and gRPC's retry
// would not retry it at all.
func refused(ctx context.Context, code codes.Code, msg string, retry time.Duration, rate ...string) error {
	ms := int64((retry + time.Millisecond - 1) / time.Millisecond)
	grpc.SetTrailer(ctx, metadata.Pairs(append(rate, "grpc-retry-pushback-ms", strconv.FormatInt(ms, 10))...))
	st := status.New(code, fmt.Sprintf("%s; retry in %v", msg, retry))
	if detailed, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
		st = detailed
	}
	return st.Err()
}

// note logs a problem with a call, sampled per policy.
func (i *Interceptor) note(policy, msg string, err error) {
	if i.opts.Logger == nil {
		return
	}
	if ok, held := i.logs.Allow(policy); ok {
		i.opts.Logger.Warn(msg, "policy", policy, "error", err.Error(), "suppressed", held)
	}
}
