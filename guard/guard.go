package guard

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/sample"
)

// Guard is the decision core every front door shares: httplimit,
// grpclimit, the service's HTTP, gRPC and Envoy APIs and the proxy, and
// the Limiters given it as their Store. For one check it asks the Store for the enforced requests in one
// all-or-nothing call bounded by a timeout, then for the shadow requests
// apart, so that a shadow denial never holds the enforced ones back. When
// the store fails it decides each enforced request by its FailMode, and a
// circuit breaker stops calling a store that keeps failing, so a hung store
// costs no timeout per check. Every change of the store's health is logged
// once, failed checks are logged sampled per label, and each check has one
// Outcome for metrics. While the breaker is open the Guard probes the store
// itself, and when the store recovers it tells it what the stand-in
// admitted meanwhile, so the end of an outage admits no more
// than the limit allows.
//
// A Guard is itself a sluice.Store (Take, TakeAll, Reset) that decides
// FailLocal requests with its stand-in while the store fails and returns
// the store's error, wrapped in sluice.ErrStoreUnavailable, where it
// cannot: give it to sluice.NewLimiter. A Guard is safe for concurrent
// use; one Guard per Store, given to every front door and Limiter on it,
// keeps one breaker and one stand-in. Nothing shares a Guard unless its
// caller passes the same one.
type Guard struct {
	store    sluice.Store
	opts     Options
	inproc   bool // the store cannot fail for reasons of its own (InProcess)
	breaker  breaker
	standin  *standin // nil without opts.Local
	logs     *sample.Sampler
	failures atomic.Int64 // checks decided by the failure policy, ever

	// The end of an outage (recovery.go).
	probing       atomic.Bool  // the prober runs
	lastFailed    atomic.Int64 // when a check last failed, Unix ns
	replaying     sync.Mutex   // held by the one replay at a time
	replayed      atomic.Int64 // cost the stand-in admitted and the store was told
	replayedBack  atomic.Int64 // cost given back locally and then to the store
	replayDropped atomic.Int64 // cost decided for keys past maxOwed, never told
}

// Options configures a Guard. Every field has a usable zero value.
type Options struct {
	// Timeout bounds each store call. Zero means sluice.DefaultTimeout; negative
	// means only the caller's context bounds it. A store that says it works
	// in process (InProcess) is called without one.
	Timeout time.Duration
	// Local is the stand-in that FailLocal decides with while the store
	// fails: a memory store (memstore.New) of its own, never the store
	// itself. Nil makes FailLocal decide as FailOpen.
	Local sluice.Store
	// Instances is how many processes share the store: while it fails, each
	// takes 1/Instances of what a key had left. Default 1.
	Instances int
	// BreakerFailures is how many store calls in a row must fail to open
	// the breaker. Default 5.
	BreakerFailures int
	// BreakerBackoff is how long an open breaker waits before it lets one
	// call probe the store; each failed probe doubles it, up to
	// BreakerMaxBackoff. Defaults 100ms and 500ms, so a store that comes
	// back is used again within a second.
	BreakerBackoff, BreakerMaxBackoff time.Duration
	// Logger receives the store's health changes (Warn and Info) and
	// sampled lines for failed checks. Default: none.
	Logger *slog.Logger
	// LogsPerSecond bounds the failed-check lines per label. Default 1.
	LogsPerSecond int64
	// OnStoreCall, if set, is called after every store call with its
	// duration and its error: nil for an answer, input errors included.
	// Calls the breaker spared are not made and not reported. It must be
	// cheap and safe for concurrent use.
	OnStoreCall func(took time.Duration, err error)
}

// InProcess is implemented by stores whose calls never leave the process
// and so never fail for reasons outside the request (the memory store): a
// Guard calls them without a timeout, breaker or stand-in, and the front
// doors hold their concurrency slots without renewing a lease.
type InProcess interface {
	InProcess() bool
}

// New returns a Guard deciding through store.
func New(store sluice.Store, opts Options) (*Guard, error) {
	if store == nil {
		return nil, errors.New("guard: New: nil store")
	}
	if opts.Local != nil && opts.Local == store {
		return nil, errors.New("guard: New: the Local stand-in must be a store of its own")
	}
	if opts.Timeout == 0 {
		opts.Timeout = sluice.DefaultTimeout
	}
	opts.Instances = max(opts.Instances, 1)
	g := &Guard{store: store, opts: opts, logs: sample.New(opts.LogsPerSecond)}
	g.inproc = inProcess(store)
	g.breaker.init(opts, g.transition)
	g.breaker.onRecover = g.recovered
	if opts.Local != nil && !g.inproc {
		g.standin = newStandin(opts.Local, opts.Instances)
	}
	return g, nil
}

// inProcess reports whether s says it is InProcess.
func inProcess(s any) bool {
	ip, ok := s.(InProcess)
	return ok && ip.InProcess()
}

// Store returns the store the Guard decides with.
func (g *Guard) Store() sluice.Store { return g.store }

// A Check is what one request asks of a Guard.
type Check struct {
	// Label names the check in logs: a policy or an Envoy domain.
	Label string
	// Enforced are decided together, all-or-nothing.
	Enforced []sluice.Request
	// Modes is each enforced request's FailMode, parallel to Enforced; nil
	// means FailLocal for all.
	Modes []sluice.FailMode
	// Shadow are decided after Enforced, apart from them, and never deny.
	Shadow []sluice.Request
	// Held is set by Guard.Hold when the request holds a slot its
	// fail mode gave it while the slots' store failed (FailedOpen or
	// LocalAllowed): an allowed check then has that outcome, so that the
	// request has one, and the failure is counted once.
	Held Outcome
}

// Outcome is a check's one result, for metrics: each check has exactly
// one.
type Outcome uint8

// The outcomes of a check.
const (
	Allowed      Outcome = iota // the store allowed every enforced request
	Denied                      // the store denied one
	ShadowDenied                // allowed, and a shadow request would have been denied
	LocalAllowed                // the store failed; the stand-in allowed (sluice.FailLocal)
	LocalDenied                 // the store failed; the stand-in denied (sluice.FailLocal)
	FailedOpen                  // the store failed; allowed without deciding (sluice.FailOpen)
	FailedClosed                // the store failed; denied without deciding (sluice.FailClosed)
	Invalid                     // the input is bad: nothing was counted
)

var outcomeNames = [...]string{"allowed", "denied", "shadow_denied", "local_allowed", "local_denied", "failed_open", "failed_closed", "invalid"}

// String returns the outcome's metric label, such as "failed_open".
func (o Outcome) String() string { return outcomeNames[o] }

// Failed reports whether the store failed and the failure policy decided.
func (o Outcome) Failed() bool { return o >= LocalAllowed && o <= FailedClosed }

// ShadowResult is what became of a check's shadow requests.
type ShadowResult uint8

// The results of a check's shadow requests.
const (
	ShadowAllowed   ShadowResult = iota // none, or every one allowed
	ShadowWouldDeny                     // one would have been denied
	ShadowFailed                        // not decided: the store failed; they took nothing, and settle nothing
)

// Verdict is a Guard's answer to a Check; the decisions themselves are
// written into the caller's slices.
type Verdict struct {
	Outcome Outcome
	// Shadow is what became of the shadow requests, whatever the Outcome.
	Shadow ShadowResult
	// Closest is the index of the enforced decision closest to its limit,
	// -1 when there is none (no enforced requests, Invalid, FailedClosed).
	Closest int
	// Err is the input error for Invalid, and for a failure the store's
	// error wrapped in ErrStoreUnavailable.
	Err error
}

// Allowed reports whether the check may proceed.
func (v *Verdict) Allowed() bool {
	switch v.Outcome {
	case Allowed, ShadowDenied, LocalAllowed, FailedOpen:
		return true
	}
	return false
}

// Took reports whether an enforced request of the check, under mode, took
// its cost: it was allowed, and decided by the store, or by the stand-in
// under FailLocal. One allowed because the store failed (FailedOpen, or a
// request of another mode beside a FailLocal one) took nothing: settling
// or giving back its cost would give back what was never taken.
func (v *Verdict) Took(mode sluice.FailMode) bool {
	switch {
	case !v.Allowed():
		return false
	case v.Err == nil: // decided by the store (a failure of the concurrency slots alone sets no Err)
		return true
	}
	return v.Outcome == LocalAllowed && mode == sluice.FailLocal
}

// Decide decides c: the enforced decisions are written to ds and the shadow
// ones to sds, each at least as long as its requests; a shadow request the
// store failed on is decided as one that fails open. Under FailOpen and
// FailLocal a failed check is allowed or decided locally with the store's
// error in Err; under FailClosed its decisions are denials with a RetryAfter
// of one second.
func (g *Guard) Decide(ctx context.Context, c *Check, ds, sds []sluice.Decision) Verdict {
	v := Verdict{Closest: -1}
	if n := len(c.Enforced); n > 0 {
		ds = ds[:n]
		err := g.call(ctx, c.Enforced, ds)
		switch {
		case err == nil:
			if g.standin != nil {
				g.standin.record(c.Enforced, c.Modes, ds)
			}
			v.Closest = Closest(ds)
			if !ds[v.Closest].Allowed {
				v.Outcome = Denied
			}
		case sluice.IsInputError(err):
			return Verdict{Outcome: Invalid, Closest: -1, Err: err}
		default:
			v = g.failed(ctx, c, ds, err)
		}
	}
	if c.Held.Failed() && (v.Outcome == Allowed || v.Outcome == ShadowDenied) {
		v.Outcome = c.Held
	}
	if len(c.Shadow) > 0 {
		sds = sds[:len(c.Shadow)]
		if err := g.call(ctx, c.Shadow, sds); err != nil {
			g.note(ctx, c.Label, "rate limit store failed (shadow)", err)
			v.Shadow = ShadowFailed
			for i, r := range c.Shadow { // decided as failing open, not left as the caller's slice held them
				sds[i] = sluice.Decision{Allowed: true, Limit: r.Limit, Remaining: r.Limit.Capacity() - r.Cost}
			}
		} else if !sds[Closest(sds)].Allowed {
			v.Shadow = ShadowWouldDeny
			if v.Outcome == Allowed {
				v.Outcome = ShadowDenied
			}
		}
	}
	return v
}

// take is Decide for a check of one enforced request and no shadow,
// without allocating: the decision is written to *d.
func (g *Guard) take(ctx context.Context, label string, req *sluice.Request, mode sluice.FailMode, d *sluice.Decision) Verdict {
	err := g.call1(ctx, req, d)
	switch {
	case err == nil:
		if g.standin != nil && mode == sluice.FailLocal {
			g.standin.record1(req, d)
		}
		if !d.Allowed {
			return Verdict{Outcome: Denied}
		}
		return Verdict{}
	case sluice.IsInputError(err):
		return Verdict{Outcome: Invalid, Closest: -1, Err: err}
	}
	ds := []sluice.Decision{{}}
	v := g.failed(ctx, &Check{Label: label, Enforced: []sluice.Request{*req}, Modes: []sluice.FailMode{mode}}, ds, err)
	*d = ds[0]
	return v
}

// call makes one store call for reqs, through the breaker and the timeout.
func (g *Guard) call(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) error {
	if g.inproc {
		return take(ctx, g.store, reqs, ds)
	}
	c, err := g.begin(ctx)
	if err != nil {
		return err
	}
	if c.detach {
		err = bounded(c.ctx, g.store, reqs, ds)
	} else {
		err = take(c.ctx, g.store, reqs, ds)
	}
	g.finish(ctx, c, err)
	return err
}

// call1 is call for one request.
func (g *Guard) call1(ctx context.Context, req *sluice.Request, d *sluice.Decision) (err error) {
	if g.inproc {
		*d, err = g.store.Take(ctx, *req)
		return err
	}
	c, err := g.begin(ctx)
	if err != nil {
		return err
	}
	if c.detach {
		ds := [1]sluice.Decision{}
		err = bounded(c.ctx, g.store, []sluice.Request{*req}, ds[:])
		*d = ds[0]
	} else {
		*d, err = g.store.Take(c.ctx, *req)
	}
	g.finish(ctx, c, err)
	return err
}

// bounded is take for a store that is failing: on a goroutine of its own,
// so that the caller gets its answer when ctx ends even if the store does
// not honour ctx (a client redialling a hung server may wait out its own
// dial timeout first). The call works on copies, as it may outlive its
// caller; the goroutine ends when the store returns.
func bounded(ctx context.Context, s sluice.Store, reqs []sluice.Request, ds []sluice.Decision) error {
	own := slices.Clone(reqs)
	out, err := detached(ctx, func(ctx context.Context) ([]sluice.Decision, error) {
		out := make([]sluice.Decision, len(own))
		return out, take(ctx, s, own, out)
	})
	copy(ds, out) // nil when ctx ended first
	return err
}

// detached runs f on a goroutine of its own and returns its results, or
// ctx's error as soon as ctx ends, whether f has returned or not.
func detached[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("sluice: store call: %w", ctx.Err())
	}
}

// do makes one call f to the store, other than a Take (a Slots call),
// through the breaker and the timeout; while the store fails, detached,
// as bounded makes a Take.
func do[T any](g *Guard, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	if g.inproc {
		return f(ctx)
	}
	c, err := g.begin(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	var v T
	if c.detach {
		v, err = detached(c.ctx, f)
	} else {
		v, err = f(c.ctx)
	}
	g.finish(ctx, c, err)
	return v, err
}

// storeCall is one call to the store, from begin to finish: every call
// (call, call1, do, the recovery's replay) goes through the breaker and
// the timeout this way.
type storeCall struct {
	ctx    context.Context    // bounded by the timeout
	cancel context.CancelFunc // nil for none
	start  time.Time          // when OnStoreCall wants it
	probe  bool               // the breaker's half-open probe
	detach bool               // the store is failing: run the call detached
}

// begin starts a store call, or returns the breaker's error when the
// breaker spares the store.
func (g *Guard) begin(ctx context.Context) (storeCall, error) {
	probe, ok := g.breaker.allow()
	if !ok {
		return storeCall{}, g.breaker.openError()
	}
	c := g.within(ctx)
	c.probe = probe
	c.detach = probe || g.breaker.failing.Load()
	return c, nil
}

// within returns a store call's context, bounded by the timeout, outside
// the breaker.
func (g *Guard) within(ctx context.Context) storeCall {
	var c storeCall
	if g.opts.OnStoreCall != nil {
		c.start = time.Now()
	}
	c.ctx = ctx
	if g.opts.Timeout > 0 && !deadlineWithin(ctx, g.opts.Timeout) {
		c.ctx, c.cancel = context.WithTimeout(ctx, g.opts.Timeout)
	}
	return c
}

// deadlineWithin reports whether ctx ends within d of now by its own
// deadline. A store call under such a context is bounded already, by the
// caller (Envoy sends a deadline with every check), and a timer of the
// Guard's would cost it a context, a timer and their cancelling: about a
// microsecond. Its end is then the caller's, as it would be with the
// timer: the caller gave up, which tells the breaker nothing.
func deadlineWithin(ctx context.Context, d time.Duration) bool {
	end, ok := ctx.Deadline()
	return ok && time.Until(end) <= d
}

// finish ends a store call, recording its result in the breaker; ctx is
// the caller's.
func (g *Guard) finish(ctx context.Context, c storeCall, err error) {
	if c.cancel != nil {
		c.cancel()
	}
	if g.opts.OnStoreCall != nil {
		if sluice.IsInputError(err) {
			g.opts.OnStoreCall(time.Since(c.start), nil)
		} else {
			g.opts.OnStoreCall(time.Since(c.start), err)
		}
	}
	switch {
	case err == nil || sluice.IsInputError(err):
		g.breaker.success(c.probe)
	case callerGone(ctx):
		// The caller gave up: that says nothing about the store.
		g.breaker.release(c.probe)
	default:
		g.breaker.failure(c.probe, err)
	}
}

// callerGone reports whether the caller's own context ended: cancelled,
// or past its deadline (a store may see that deadline pass a moment before
// the context says so).
func callerGone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// take decides reqs into ds: TakeAll for a batch, Take for one request.
func take(ctx context.Context, s sluice.Store, reqs []sluice.Request, ds []sluice.Decision) (err error) {
	if len(reqs) != 1 {
		return s.TakeAll(ctx, reqs, ds)
	}
	ds[0], err = s.Take(ctx, reqs[0])
	return err
}

// failed decides c's enforced requests by their fail modes after the store
// failed with err.
func (g *Guard) failed(ctx context.Context, c *Check, ds []sluice.Decision, err error) Verdict {
	if !c.Held.Failed() { // counted by Hold already
		g.failures.Add(1)
	}
	g.lastFailed.Store(time.Now().UnixNano())
	g.startProber()
	err = fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, err)
	v := Verdict{Outcome: FailedOpen, Closest: -1, Err: err}
	local := false
	for i := range c.Enforced {
		switch g.mode(c, i) {
		case sluice.FailClosed:
			v.Outcome = FailedClosed
		case sluice.FailLocal:
			local = local || g.standin != nil
		}
	}
	if v.Outcome == FailedClosed {
		for i, r := range c.Enforced {
			ds[i] = sluice.Decision{Limit: r.Limit, RetryAfter: time.Second}
		}
		g.note(ctx, c.Label, "rate limit store failed; denied (fail_mode closed)", err)
		return v
	}
	for i, r := range c.Enforced {
		ds[i] = sluice.Decision{Allowed: true, Limit: r.Limit, Remaining: r.Limit.Capacity() - r.Cost}
	}
	if local {
		if lerr := g.standin.decide(ctx, c, g.breaker.outage(), ds); lerr != nil {
			g.note(ctx, c.Label, "rate limit stand-in failed; allowed", lerr)
			return v
		}
		v.Outcome = LocalAllowed
		v.Closest = Closest(ds)
		if !ds[v.Closest].Allowed {
			v.Outcome = LocalDenied
		}
		g.note(ctx, c.Label, "rate limit store failed; decided locally (fail_mode local)", err)
		return v
	}
	v.Closest = Closest(ds)
	g.note(ctx, c.Label, "rate limit store failed; allowed (fail_mode open)", err)
	return v
}

func (g *Guard) mode(c *Check, i int) sluice.FailMode {
	if c.Modes == nil {
		return sluice.FailLocal
	}
	return c.Modes[i]
}

// note logs a failed check, sampled per label.
func (g *Guard) note(ctx context.Context, label, msg string, err error) {
	if g.opts.Logger == nil || !g.opts.Logger.Enabled(ctx, slog.LevelWarn) {
		return
	}
	if ok, held := g.logs.Allow(label); ok {
		g.opts.Logger.LogAttrs(ctx, slog.LevelWarn, msg, slog.String("policy", label),
			slog.String("error", err.Error()), slog.Int64("suppressed", held))
	}
}

// Health is a snapshot of the store's health as a Guard sees it.
type Health struct {
	// Failing reports that the last store call failed.
	Failing bool
	// Breaker is "closed" (calls go to the store), "open" (they don't) or
	// "half-open" (one call probes the store).
	Breaker string
	// Since is when the store started failing, zero while it is healthy.
	Since time.Time
	// LastError is the last store failure's message.
	LastError string
	// FailedChecks counts the checks decided by the failure policy since
	// the Guard was made.
	FailedChecks int64
	// Replayed is the cost the stand-in admitted during outages and the
	// store was told when it recovered; ReplayedBack the cost given back
	// during outages (refunds, GiveBack) beyond what the stand-in admitted,
	// and given back to the store when it recovered; ReplayDropped what
	// was admitted or given back for keys past the stand-in's bound, which
	// the store was never told. Since the Guard was made.
	Replayed, ReplayedBack, ReplayDropped int64
}

// Health reports the store's health.
func (g *Guard) Health() Health {
	h := g.breaker.health()
	h.FailedChecks = g.failures.Load()
	h.Replayed, h.ReplayedBack, h.ReplayDropped = g.replayed.Load(), g.replayedBack.Load(), g.replayDropped.Load()
	return h
}

// transition logs a change of the store's health, once.
func (g *Guard) transition(level slog.Level, msg string, attrs ...slog.Attr) {
	if g.opts.Logger != nil {
		attrs = append(attrs, slog.Int64("failed_checks", g.failures.Load()))
		g.opts.Logger.LogAttrs(context.Background(), level, msg, attrs...)
	}
}
