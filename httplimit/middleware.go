package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/door"
)

// Options configures a Middleware.
type Options struct {
	// Store decides. Required unless Guard is set.
	Store sluice.Store
	// Guard, if set, is the decision core to share with the other front
	// doors on its store (one breaker, one stand-in); Store and Timeout are
	// then the Guard's. Default: a Guard of its own on Store, with a memory
	// store as the stand-in of FailLocal policies.
	Guard *guard.Guard
	// Policies are checked in order; every one whose Pattern matches a
	// request applies to it. Required.
	Policies []Policy
	// Timeout bounds each store call: zero means sluice.DefaultTimeout,
	// negative only the request's context. Not applied to the memory store.
	Timeout time.Duration
	// ResetFormat of X-RateLimit-Reset. Default ResetUnix.
	ResetFormat ResetFormat
	// OnDenied, if set, answers denied requests (429) and requests failed
	// closed (503) instead of the default problem+json responses. The rate
	// headers are already set on w. res is borrowed, as in OnResult.
	OnDenied func(w http.ResponseWriter, r *http.Request, res *Result)
	// OnResult, if set, sees every decision (for metrics). It must be
	// cheap and safe for concurrent use. res is borrowed: it and its
	// slices are valid until the hook returns, and then reused for another
	// request; copy what you keep (slices.Clone for its slices).
	OnResult func(r *http.Request, res *Result)
	// Logger receives sampled denial and failure logs. Default: none.
	Logger *slog.Logger
	// OnSettle, if set, sees the settled charge of every policy that
	// charges by its answer (Policy.ChargeStatus, Policy.CostFrom), once
	// the answer is complete: for metrics of estimates against actuals.
	// It must be cheap and safe for concurrent use.
	OnSettle func(r *http.Request, s Settlement)
	// LogsPerSecond bounds denial lines per policy. Default 1.
	LogsPerSecond int64
	// Slots keeps the slots of policies with Concurrency. Default: the
	// store, when it keeps slots (the memory and Redis stores do).
	Slots guard.Slots
	// ClientIP finds the client's address that limits a request whose
	// policy's key is missing (Policy.Missing). Default: the connection's
	// peer (clientip.RemoteAddr); behind a proxy, the resolver its ClientIP
	// keys use.
	ClientIP *clientip.Resolver
}

// Result is the outcome for one request.
type Result struct {
	// Policies applied, enforced and then shadow, and their decisions.
	Policies  []*Policy
	Decisions []sluice.Decision
	// Outcome is the check's one result, for metrics.
	Outcome guard.Outcome
	// Closest is the index of the enforced decision closest to its limit,
	// or -1 when no enforced policy decided.
	Closest int
	// Denied reports that the request was answered 429; FailedClosed that
	// it was answered 503 because the store or a key failed.
	Denied, FailedClosed bool
	// ShadowDenied reports that a shadow policy would have denied;
	// ShadowFailed that the shadow policies were not decided (the store
	// failed): they took nothing.
	ShadowDenied, ShadowFailed bool
	// Err is the store or key error, if any.
	Err error
	// MissingKey reports that a policy found no identity for the request
	// (Err says why), and its Missing decided it.
	MissingKey bool
	// InFlight reports that the denial was a policy's Concurrency: its key
	// had as many requests in flight as it allows.
	InFlight bool
	// Label is the policy the request is counted under, once: the one
	// whose concurrency refused it, else the first enforced policy that
	// applied, else the first shadow one; empty when none applied.
	// Identity is the client's identity under it: its key without the
	// policy's name.
	Label, Identity string
}

// Middleware limits HTTP requests by policy. Make it with New; it is safe
// for concurrent use.
type Middleware struct {
	opts     Options
	guard    *guard.Guard
	base     time.Time // wall time at New; now is base plus the monotonic time since
	policies []*Policy
	fallback KeyFunc // the identity of a request whose key is missing
	log      *sampler
	scratch  sync.Pool
	charges  bool // a policy charges by its answer
	shapes   bool // a policy shapes: a request may wait, and leave
}

// New validates opts and returns a Middleware.
func New(opts Options) (*Middleware, error) {
	if opts.Store == nil && opts.Guard == nil {
		return nil, errors.New("httplimit: no Store")
	}
	if len(opts.Policies) == 0 {
		return nil, errors.New("httplimit: no Policies")
	}
	if opts.LogsPerSecond <= 0 {
		opts.LogsPerSecond = 1
	}
	if opts.ClientIP == nil {
		opts.ClientIP, _ = clientip.RemoteAddr(clientip.Options{})
	}
	m := &Middleware{opts: opts, guard: opts.Guard, base: time.Now(), log: newSampler(opts.Logger, opts.LogsPerSecond),
		fallback: ClientIP(opts.ClientIP)}
	if m.guard == nil {
		var local sluice.Store // nil, not a nil *memstore.Store, for the memory store
		if l := door.StandIn(opts.Store); l != nil {
			local = l
		}
		g, err := guard.New(opts.Store, guard.Options{Timeout: opts.Timeout, Local: local,
			Logger: opts.Logger, LogsPerSecond: opts.LogsPerSecond})
		if err != nil {
			return nil, err
		}
		m.guard = g
	}
	if opts.Slots == nil {
		opts.Slots, _ = m.guard.Store().(guard.Slots)
	}
	var localSlots guard.Slots
	if l := door.StandIn(m.guard.Store()); l != nil {
		localSlots = l
	}
	seen := map[string]bool{}
	for i := range opts.Policies {
		p := opts.Policies[i] // a copy: the caller's slice stays theirs
		if err := p.prepare(); err != nil {
			return nil, err
		}
		if p.Concurrency > 0 {
			if opts.Slots == nil {
				return nil, fmt.Errorf("httplimit: policy %q: concurrency needs Options.Slots: the store keeps none", p.Name)
			}
			p.rules.Conc = &sluice.Concurrency{Slots: opts.Slots, Max: p.Concurrency, Wait: p.ConcurrencyWait,
				Timeout: opts.Timeout, FailMode: p.FailMode, Local: localSlots, Logger: opts.Logger}
			m.guard.Bind(p.rules.Conc)
			if err := p.rules.Conc.Validate(); err != nil {
				return nil, fmt.Errorf("httplimit: policy %q: %w", p.Name, err)
			}
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("httplimit: two policies named %q", p.Name)
		}
		seen[p.Name] = true
		m.charges = m.charges || p.charges()
		m.shapes = m.shapes || p.Shape
		m.policies = append(m.policies, &p)
	}
	m.opts.Slots = opts.Slots
	m.scratch.New = func() any { return new(scratch) }
	return m, nil
}

// now reads the clock for X-RateLimit-Reset: the monotonic clock only,
// half the cost of time.Now.
func (m *Middleware) now() time.Time { return m.base.Add(time.Since(m.base)) }

// scratch is one request's working memory, pooled so that the allowed
// path allocates as little as it can.
type scratch struct {
	res      Result
	policies [8]*Policy
	reqs     [8]sluice.Request
	modes    [8]sluice.FailMode
	ds       [8]sluice.Decision
	shadow   [8]*Policy
	sreqs    [8]sluice.Request
	sds      [8]sluice.Decision
	// batch is the request's checks, on the arrays above; it holds the
	// release functions of the concurrency slots the request holds.
	batch door.Batch[*Policy]
	// keys holds the keys and the rate header values of this and earlier
	// requests, back to back. Only the space past them is ever written, so
	// a key handed to a store or a value to a header map is never
	// overwritten; a full buffer is replaced, never reused.
	keys []byte
	hdr  headerBuf
	// body is a refusal's problem body, written from here and not kept.
	body []byte
	// taken is when the check was decided, when a policy charges by its
	// answer or shapes: the time its refunds give back from.
	taken time.Time
	// verdict is the check's, which says what its requests took.
	verdict guard.Verdict
}

// keyArena is the size of a scratch's key buffer.
const keyArena = 4096

// Handler wraps next: the func(http.Handler) http.Handler form.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := m.scratch.Get().(*scratch)
		defer m.scratch.Put(s)
		defer s.batch.Release()
		if !m.decide(w, r, s) {
			return
		}
		if st := m.settling(r, s); st != nil {
			// Settled also when the handler aborts: ReverseProxy panics
			// with http.ErrAbortHandler when the client leaves mid-answer.
			defer st.finish()
			next.ServeHTTP(st.wrap(w), r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// decide applies the policies to r and answers a denial itself. It reports
// whether the request may proceed.
func (m *Middleware) decide(w http.ResponseWriter, r *http.Request, s *scratch) bool {
	b := &s.batch
	if cap(b.Enforced) == 0 {
		b.Enforced, b.Shadow = s.policies[:0], s.shadow[:0]
		b.Check.Enforced, b.Check.Modes, b.Check.Shadow = s.reqs[:0], s.modes[:0], s.sreqs[:0]
	}
	b.Reset()
	if cap(s.keys)-len(s.keys) < 256 {
		s.keys = make([]byte, 0, keyArena)
	}
	s.keys = s.keys[len(s.keys):]
	res := &s.res
	*res = Result{Closest: -1}
	for _, p := range m.policies {
		if !p.matches(r) {
			continue
		}
		rules := &p.rules
		req, err := m.request(r, p, s)
		if errors.Is(err, errKeyMissing) {
			res.Err, res.MissingKey = err, true
			m.log.note(r.Context(), slog.LevelWarn, p.Name+" (missing key)", "rate limit key not found; decided by the policy's missing: "+p.Missing.String(),
				slog.String("error", err.Error()))
			if door.OnMissing(rules) == door.Skip {
				continue // unlimited by this policy, as asked
			}
		}
		if err != nil {
			// Refused before any store call: nothing is charged, and the
			// slots of earlier policies are released by Handler.
			res.Label, res.Outcome, res.Err = p.Name, guard.Invalid, err
			m.report(r, res)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return false
		}
		b.Apply(p, rules, req.Key)
		if a, d, v := b.Hold(r.Context(), m.guard, p, rules, req.Key); a != door.Proceed {
			m.refuseSlot(w, r, s, p, req.Key, a, d, v)
			return false // answered; nothing charged
		}
		var chosen []sluice.Limit
		if p.Limits != nil {
			chosen = p.Limits(r, req.Key[len(p.Name)+1:])
		}
		if len(chosen) == 0 {
			if !p.rated() {
				continue // concurrency alone
			}
			chosen = p.limit[:]
		}
		b.Add(p, rules, req, chosen)
	}
	reqs, sreqs := b.Check.Enforced, b.Check.Shadow
	ds, sds := s.ds[:], s.sds[:]
	if len(reqs) > len(ds) {
		ds = make([]sluice.Decision, len(reqs))
	}
	if len(sreqs) > len(sds) {
		sds = make([]sluice.Decision, len(sreqs))
	}
	if b.Labeled != nil {
		res.Label, res.Identity = b.Labeled.Name, b.Key[len(b.Labeled.Name)+1:]
	}
	if m.charges || m.shapes {
		s.taken = time.Now()
	}
	v, a := b.Decide(r.Context(), m.guard, ds, sds)
	s.verdict = v
	ds, sds = ds[:len(reqs)], sds[:len(sreqs)]
	enforced := b.Enforced
	res.Outcome, res.ShadowDenied, res.ShadowFailed = v.Outcome, v.Shadow == guard.ShadowWouldDeny, v.Shadow == guard.ShadowFailed
	if v.Err != nil {
		res.Err = v.Err
	}
	switch a {
	case door.Invalid:
		m.report(r, res)
		http.Error(w, v.Err.Error(), http.StatusBadRequest)
		return false
	case door.Unavailable:
		enforced, ds = enforced[:0], ds[:0]
	}
	res.Policies, res.Decisions = enforced, ds
	if i := v.Closest; i >= 0 && a != door.Unavailable {
		res.Closest = i
		s.hdr.set(w.Header(), &s.keys, m.now(), m.opts.ResetFormat, i, enforced, ds)
		res.Denied = a == door.Limited
	}
	if len(sreqs) > 0 {
		m.noteShadow(r, b.Shadow, sds, res)
	}
	switch a {
	case door.Unavailable:
		res.FailedClosed = true
		m.report(r, res)
		m.refuse(w, r, s, res, http.StatusServiceUnavailable, door.UnavailableRetry)
		return false
	case door.Limited:
		d := ds[res.Closest]
		m.report(r, res)
		m.log.note(r.Context(), slog.LevelInfo, enforced[res.Closest].Name, "rate limited",
			slog.Duration("retry_after", d.RetryAfter), slog.String("method", r.Method), slog.String("path", r.URL.Path))
		m.refuse(w, r, s, res, http.StatusTooManyRequests, d.RetryAfter)
		return false
	}
	m.report(r, res)
	if !m.shapeWait(r, enforced, ds) {
		m.giveBack(r, s)
		return false
	}
	return true
}

// giveBack returns what the request s decided took, as a refund of its
// take: its client went away while it waited its turn in a shaping
// queue, and it never reaches the handler. Its place in the queue is
// then free for the next request, as Limiter.Wait frees one, instead of
// the queue filling with clients that timed out and refusing live ones
// while the upstream idles. A limit that counts every request
// (Limit.CountAll) keeps it, and a request that took nothing (failed
// open) gives nothing.
func (m *Middleware) giveBack(r *http.Request, s *scratch) {
	ctx := context.WithoutCancel(r.Context()) // the client is gone; the refund is not
	b := &s.batch
	for i, p := range b.Enforced {
		if req := b.Check.Enforced[i]; req.Cost > 0 && !req.Limit.CountAll && s.verdict.Took(b.Check.Modes[i]) {
			m.guard.Settle(ctx, p.Name, req, s.taken, req.Cost, 0, p.FailMode)
		}
	}
	if s.res.ShadowDenied || s.res.ShadowFailed {
		return // the shadow requests, all or none, took nothing
	}
	for i, p := range b.Shadow {
		if req := b.Check.Shadow[i]; req.Cost > 0 && !req.Limit.CountAll {
			m.guard.Settle(ctx, p.Name, req, s.taken, req.Cost, 0, sluice.FailOpen)
		}
	}
}

// settling returns the charges of the request s allowed that its answer
// settles, or nil for none. A request that took nothing (failed open, or
// a shadow policy's that would have denied or whose store failed) has
// nothing to settle: its estimate was never charged.
func (m *Middleware) settling(r *http.Request, s *scratch) *settling {
	if !m.charges {
		return nil
	}
	var st *settling
	b := &s.batch
	add := func(p *Policy, req sluice.Request, took bool) {
		if !p.charges() || req.Cost == 0 || !took {
			return
		}
		if st == nil {
			st = &settling{m: m, r: r, taken: s.taken}
		}
		st.items = append(st.items, charge{p: p, req: req, estimate: req.Cost, charged: req.Cost, mode: p.FailMode})
	}
	for i, p := range b.Enforced {
		add(p, b.Check.Enforced[i], s.verdict.Took(b.Check.Modes[i]))
	}
	for i, p := range b.Shadow {
		add(p, b.Check.Shadow[i], !s.res.ShadowDenied && !s.res.ShadowFailed)
	}
	return st
}

// refuseSlot answers a request that p's concurrency refused (answer a of
// Batch.Hold, with the slot's decision and verdict): 400 for bad input,
// 503 when the slots failed under FailClosed, else 429.
func (m *Middleware) refuseSlot(w http.ResponseWriter, r *http.Request, s *scratch, p *Policy, key string, a door.Answer, d sluice.Decision, v guard.Verdict) {
	res := &s.res
	res.Label, res.Identity, res.Outcome = p.Name, key[len(p.Name)+1:], v.Outcome
	switch a {
	case door.Invalid:
		res.Err = v.Err
		m.report(r, res)
		http.Error(w, v.Err.Error(), http.StatusBadRequest)
		return
	case door.Unavailable:
		res.Err, res.FailedClosed = v.Err, true
		m.report(r, res)
		m.refuse(w, r, s, res, http.StatusServiceUnavailable, door.UnavailableRetry)
		return
	}
	res.Err = v.Err // the store's, when the stand-in denied
	res.Policies, res.Decisions, res.Closest = []*Policy{p}, []sluice.Decision{d}, 0
	res.Denied, res.InFlight = true, true
	s.hdr.set(w.Header(), &s.keys, m.now(), m.opts.ResetFormat, 0, res.Policies, res.Decisions)
	m.report(r, res)
	m.log.note(r.Context(), slog.LevelInfo, p.Name, "concurrency limited",
		slog.Int64("in_flight", p.Concurrency), slog.String("method", r.Method), slog.String("path", r.URL.Path))
	m.refuse(w, r, s, res, http.StatusTooManyRequests, d.RetryAfter)
}

// shapeWait sleeps the longest Delay of the shaping policies, and reports
// false if the client went away meanwhile.
func (m *Middleware) shapeWait(r *http.Request, policies []*Policy, ds []sluice.Decision) bool {
	var wait time.Duration
	for i, p := range policies {
		if p.Shape {
			wait = max(wait, ds[i].Delay)
		}
	}
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

var (
	errBadCost = errors.New("httplimit: bad request cost")
	// errKeyMissing wraps the key function's error for a request the
	// policy's Missing did not key by the client's address.
	errKeyMissing = errors.New("httplimit: the request has no identity for the policy")
)

// request builds p's Request for r. Its key is "<policy>\x00<identity>",
// written into s.keys, whose bytes are never written again once a key
// points into them (see scratch.keys).
func (m *Middleware) request(r *http.Request, p *Policy, s *scratch) (sluice.Request, error) {
	start := len(s.keys)
	keys := append(append(s.keys, p.Name...), 0)
	keys, err := p.Key(keys, r, p)
	switch {
	case err == nil:
		// The one identity rule of every door, on what the key function
		// found; the fallback identity below is the door's own.
		id := keys[start+len(p.Name)+1:]
		if err := door.Key(unsafe.String(unsafe.SliceData(id), len(id))); err != nil {
			return sluice.Request{}, fmt.Errorf("httplimit: policy %s: %w", p.Name, err)
		}
	case errors.Is(err, ErrAmbiguousKey), errors.Is(err, ErrInvalidKey):
		return sluice.Request{}, err
	default:
		missing := err
		if door.OnMissing(&p.rules) != door.ByAddress {
			return sluice.Request{}, fmt.Errorf("%w: %w", errKeyMissing, missing)
		}
		// The fallback identity: a NUL (which no header value holds), then
		// the client's address.
		keys = append(append(s.keys, p.Name...), 0, 0)
		if keys, err = m.fallback(keys, r, p); err != nil {
			return sluice.Request{}, fmt.Errorf("%w: %w; and no client address: %w", errKeyMissing, missing, err)
		}
		defer m.log.note(r.Context(), slog.LevelWarn, p.Name+" (missing key)", "rate limit key not found; limited by the client's address",
			slog.String("error", missing.Error()))
	}
	s.keys = keys
	cost := p.Cost
	if p.CostFunc != nil {
		if cost, err = p.CostFunc(r); err != nil || cost < 0 || cost > p.Limit.Capacity() {
			return sluice.Request{}, fmt.Errorf("%w: %d, %v", errBadCost, cost, err)
		}
	}
	// An append that grew s.keys left earlier keys in the old array,
	// which stays alive and unchanged while they point into it.
	key := unsafe.String(&keys[start], len(keys)-start)
	return sluice.Request{Key: key, Limit: p.Limit, Cost: cost}, nil
}

// noteShadow logs the shadow policies that would have denied and adds
// them to res.
func (m *Middleware) noteShadow(r *http.Request, policies []*Policy, ds []sluice.Decision, res *Result) {
	for i, d := range ds {
		if !d.Allowed {
			m.log.note(r.Context(), slog.LevelInfo, policies[i].Name, "would rate limit (shadow)",
				slog.String("method", r.Method), slog.String("path", r.URL.Path))
		}
	}
	res.Policies = append(res.Policies[:len(res.Policies):len(res.Policies)], policies...)
	res.Decisions = append(res.Decisions[:len(res.Decisions):len(res.Decisions)], ds...)
}

func (m *Middleware) report(r *http.Request, res *Result) {
	if m.opts.OnResult != nil {
		m.opts.OnResult(r, res)
	}
}

// refuse answers a denial or a closed failure, through OnDenied if set,
// else with an RFC 9457 problem body (appendProblem). Its header values
// are handed out as the rate headers' are (headerBuf), and its body is
// written from the scratch's buffer, which Write does not keep.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, s *scratch, res *Result, status int, retry time.Duration) {
	secs := retryAfterSeconds(retry)
	h := w.Header()
	h["Retry-After"] = s.hdr.number(&s.keys, secs)
	if m.opts.OnDenied != nil {
		m.opts.OnDenied(w, r, res)
		return
	}
	s.body = appendProblem(s.body[:0], status, res, secs)
	writeProblem(w, status, s.body, s.hdr.lines(1), s.hdr.number(&s.keys, int64(len(s.body))))
}

// WriteRefusal answers a refused request as the middleware does by
// default, with status in place of its 429 or 503: the problem+json body
// naming the policy and the retry delay. It is for an OnDenied that
// changes only the status, such as a gateway's auth check that may pass
// on 403 alone. Call it from OnDenied: it reads the Retry-After the
// middleware set on w.
func WriteRefusal(w http.ResponseWriter, status int, res *Result) {
	secs, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
	if err != nil || secs < 1 {
		secs = 1
	}
	body := appendProblem(nil, status, res, secs)
	writeProblem(w, status, body, make([]string, 1), []string{strconv.Itoa(len(body))})
}

// writeProblem writes a problem+json answer: ct and cl are the lines of
// Content-Type (set here) and Content-Length, which w's header keeps.
func writeProblem(w http.ResponseWriter, status int, body []byte, ct, cl []string) {
	ct[0] = "application/problem+json"
	h := w.Header()
	h["Content-Type"] = ct
	h["Content-Length"] = cl
	w.WriteHeader(status)
	w.Write(body)
}

// appendProblem appends the problem body (RFC 9457) of a refusal with
// status, secs its Retry-After: type, title, status, detail, the policy
// that denied (none when res is not a denial: a closed failure) and
// retry_after, as
// encoding/json writes them (TestProblemBodyIsWhatJSONWrites). Every
// string in it is JSON as it stands: status texts, and policy names,
// which are restricted to characters that need no escaping.
func appendProblem(b []byte, status int, res *Result, secs int64) []byte {
	b = append(append(append(b, `{"type":"about:blank","title":"`...), http.StatusText(status)...), `","status":`...)
	b = append(strconv.AppendInt(b, int64(status), 10), `,"detail":"`...)
	if !res.Denied || res.Closest < 0 {
		b = append(b, `the rate limiter is unavailable; retry shortly"`...)
	} else {
		p := res.Policies[res.Closest]
		if res.InFlight {
			b = append(append(append(b, `concurrency limit \"`...), p.Name...), `\": `...)
			b = append(strconv.AppendInt(b, p.Concurrency, 10), ` requests in flight already; retry in `...)
		} else {
			b = append(append(append(b, `rate limit \"`...), p.Name...), `\" exceeded; retry in `...)
		}
		b = append(strconv.AppendInt(b, secs, 10), ` s"`...)
		b = append(append(append(b, `,"policy":"`...), p.Name...), '"')
	}
	b = strconv.AppendInt(append(b, `,"retry_after":`...), secs, 10)
	return append(b, '}')
}
