package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/door"
)

// Bounds on one request, so that a hostile one costs bounded memory and
// time.
const (
	maxChecks      = 100
	maxDescriptors = 64
	maxEntries     = 16
	maxBodyBytes   = 1 << 20
)

// errInput marks a problem with the caller's request (400 /
// InvalidArgument), as opposed to a store failure.
var errInput = errors.New("invalid request")

func inputError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errInput, fmt.Sprintf(format, args...))
}

// subject is what a check is counted under: a policy, or an Envoy domain.
type subject struct {
	name   string
	domain bool
}

// labels returns the policy and domain labels of the subject's metrics:
// one of them empty.
func (s subject) labels() (policy, domain string) {
	if s.domain {
		return "", s.name
	}
	return s.name, ""
}

// count counts a check of sub once, decided at start with outcome o for
// client (its key without the policy's or domain's name): in
// sluice_checks_total, in the near-limit counter when it was allowed with
// at most the config's near-limit share of its closest limit left
// (envoyproxy/ratelimit's near_limit), and in the status page's activity.
// closest is the enforced decision closest to its limit, nil for none.
func (s *Server) count(sub subject, o guard.Outcome, client string, closest *sluice.Decision, start time.Time) {
	s.metrics.check(sub, o)
	cfg := s.state().cfg
	if closest != nil && o == guard.Allowed &&
		float64(closest.Remaining) <= float64(closest.Limit.Capacity())*(1-cfg.Metrics.NearLimitRatio) {
		s.metrics.nearLimitFor(sub).Inc()
	}
	s.activity.record(sub.name, o, client, cfg.UI.TopKeys, start)
}

// shownKey is how the status page, the admin API and the logs show
// client, a key under the policy or domain label: hashed
// (config.ShownKey) where it is a credential. A policy's keys are when
// the policy says so (config.Policy.SecretKeys); a domain's entries'
// values are when the entry's key is named like a credential
// (config.CredentialName: api_key, authorization).
func shownKey(cfg *config.Config, label, client string) string {
	if p := cfg.Policy(label); p != nil {
		return config.ShownKey(client, p.SecretKeys)
	}
	if cfg.Domains[label] == nil || !strings.Contains(client, "=") {
		return client
	}
	parts := strings.Split(client, "\x00")
	for i, part := range parts {
		if k, v, ok := strings.Cut(part, "="); ok && config.CredentialName(k) {
			parts[i] = k + "=" + config.ShownKey(v, true)
		}
	}
	return strings.Join(parts, "\x00")
}

// CountCheck counts a check of policy that another front door on this
// server's Guard decided (the proxy), as the server counts its own: once
// in sluice_checks_total under the policy, near-limit, the status page's
// activity and its top keys (identity is the client's part of the key).
func (s *Server) CountCheck(policy string, o guard.Outcome, identity string, closest *sluice.Decision, start time.Time) {
	s.count(subject{name: policy}, o, identity, closest, start)
}

// CountSettled counts the settled charge of a request of policy that
// charges by its answer: its estimate, what it was charged, and whether
// the answer's cost could not be read.
func (s *Server) CountSettled(policy string, estimate, actual int64, unread bool) {
	m := s.metrics
	m.estimated.WithLabelValues(policy).Add(float64(estimate))
	m.charged.WithLabelValues(policy).Add(float64(actual))
	if unread {
		m.unread.WithLabelValues(policy).Inc()
	}
	s.activity.settled(policy, estimate, actual, unread)
}

// CountUpstreamFailure counts a request `sluice proxy` forwarded that its
// upstream failed, by reason (unreachable, timeout, cut); the proxy logs
// it.
func (s *Server) CountUpstreamFailure(reason string) {
	s.metrics.upstreamFailed.WithLabelValues(reason).Inc()
}

// outcome is the decision for one check or descriptor: every limit's
// decision and the one closest to its limit.
type outcome struct {
	Decisions []sluice.Decision
	Closest   int
	Shadow    bool // decided but never denies
	Result    guard.Outcome
	Err       error     // an input error, or the store's under fail_mode closed
	Taken     time.Time // read before the store call: what a refund of it gives back from
	// Took reports that the check took its cost (guard.Verdict.Took):
	// allowed by the store or by the stand-in. One that failed open, or
	// was denied (a shadow check's denial too), took nothing, and has
	// nothing to give back or settle.
	Took bool
}

// decide takes cost from key under limits, all-or-nothing, through the
// Guard, and counts the check once under sub. A shadow check's limits
// are decided as enforced ones that fail open, and its denial is reported,
// never enforced.
func (s *Server) decide(ctx context.Context, sub subject, key string, limits []sluice.Limit, cost int64, shadow bool, fail sluice.FailMode) (out outcome) {
	out = outcome{Closest: -1, Shadow: shadow}
	if len(limits) == 0 {
		return out
	}
	var span trace.Span
	if s.tracing != nil {
		ctx, span = s.tracing.check(ctx, sub.name, sub.domain)
		defer endCheckSpan(span, &out)
	}
	if shadow {
		fail = sluice.FailOpen
	}
	var check guard.Check
	ds, err := fillCheck(&check, sub.name, key, limits, cost, fail)
	if err != nil {
		out.Err = err
		return out
	}
	start := time.Now()
	v := s.guard.Decide(ctx, &check, ds, nil)
	s.decided(&out, sub, &check, v, ds, shadow, start, span)
	return out
}

// fillCheck fills in c, the Guard's check of cost on key under limits,
// each failing by fail, and returns the decisions it fills in; an input
// error for a bad request. Apart from decide, as decided is, so that
// decide's frame, on the stack while the store decides, holds little more
// than the check.
func fillCheck(c *guard.Check, label, key string, limits []sluice.Limit, cost int64, fail sluice.FailMode) ([]sluice.Decision, error) {
	reqs := make([]sluice.Request, len(limits))
	modes := make([]sluice.FailMode, len(limits))
	for i, l := range limits {
		reqs[i], modes[i] = sluice.Request{Key: key, Limit: l, Cost: cost}, fail
		if err := reqs[i].Validate(); err != nil {
			return nil, inputError("%v", strings.TrimPrefix(err.Error(), "sluice: "))
		}
	}
	c.Label, c.Enforced, c.Modes = label, reqs, modes
	return make([]sluice.Decision, len(reqs)), nil
}

// decided fills in out, the outcome of check c (one key, cost and fail
// mode for all its requests) decided at start as v into ds, and counts it
// once: in metrics, the log of denials, the latency histogram (with its
// trace, under span).
func (s *Server) decided(out *outcome, sub subject, c *guard.Check, v guard.Verdict, ds []sluice.Decision, shadow bool, start time.Time, span trace.Span) {
	key, cost, fail := c.Enforced[0].Key, c.Enforced[0].Cost, c.Modes[0]
	out.Took = v.Took(fail) // before a shadow's denial, or Envoy's 0 hits, is reported as allowed
	switch {
	case shadow && v.Outcome == guard.Denied:
		v.Outcome = guard.ShadowDenied
	case cost == 0 && sub.domain && (v.Outcome == guard.Denied || v.Outcome == guard.LocalDenied):
		// Envoy's 0 hits ask for nothing, which no limit refuses
		// (envoyproxy/ratelimit is over only once hits pass the limit);
		// a native check of cost 0 peeks: would one more be allowed.
		if v.Outcome == guard.Denied {
			v.Outcome = guard.Allowed
		} else {
			v.Outcome = guard.LocalAllowed
		}
		for i := range ds {
			ds[i].Allowed = true
		}
	}
	out.Result, out.Taken = v.Outcome, start
	var closest *sluice.Decision
	if v.Closest >= 0 {
		closest = &ds[v.Closest]
	}
	_, client, _ := strings.Cut(key, "\x00") // after the policy's or domain's name
	s.count(sub, v.Outcome, client, closest, start)
	if closest != nil && (v.Outcome == guard.Denied || v.Outcome == guard.LocalDenied) {
		s.noteDenied(sub, *closest)
	}
	took := time.Since(start).Seconds()
	if span != nil && span.SpanContext().IsSampled() {
		// The check's trace beside its latency, for a dashboard to follow.
		s.metrics.latencyFor(sub).(prometheus.ExemplarObserver).ObserveWithExemplar(took,
			prometheus.Labels{"trace_id": span.SpanContext().TraceID().String()})
	} else {
		s.metrics.latencyFor(sub).Observe(took)
	}
	switch v.Outcome {
	case guard.Invalid:
		out.Err = inputError("%v", strings.TrimPrefix(v.Err.Error(), "sluice: "))
	case guard.FailedClosed:
		out.Err = v.Err
	default:
		out.Decisions, out.Closest = ds, v.Closest
	}
}

// endCheckSpan ends a check's span with its result.
func endCheckSpan(span trace.Span, out *outcome) {
	span.SetAttributes(attribute.String("sluice.result", out.Result.String()))
	span.End()
}

// giveBack returns hits to key's limits (Guard.GiveBack): an Envoy
// descriptor's is_negative_hits, which refills what earlier checks took.
// It is never denied. When the store fails, fail_mode local gives the
// hits back to the stand-in that counted them, and to the store when it
// recovers; open and closed give nothing back (failed open, logged and
// counted by the Guard). Returning is not a check, and it is not counted
// as one.
func (s *Server) giveBack(ctx context.Context, domain, key string, limits []sluice.Limit, hits int64, shadow bool, fail sluice.FailMode) outcome {
	out := outcome{Shadow: shadow, Decisions: make([]sluice.Decision, len(limits))}
	if shadow {
		fail = sluice.FailOpen // a shadow limit's checks were never decided locally
	}
	for i, l := range limits {
		v := s.guard.GiveBack(ctx, domain, sluice.Request{Key: key, Limit: l, Cost: hits}, fail, &out.Decisions[i])
		switch v.Outcome {
		case guard.Invalid:
			return outcome{Closest: -1, Err: inputError("%v", strings.TrimPrefix(v.Err.Error(), "sluice: "))}
		case guard.FailedOpen:
			out.Result = guard.FailedOpen
		}
	}
	out.Closest = guard.Closest(out.Decisions)
	return out
}

// nativeCheck is a native check made ready to decide: its policy, the key it
// counts under, its limits and its cost.
type nativeCheck struct {
	ck       Check
	p        *config.Policy
	storeKey string
	limits   []sluice.Limit
	cost     int64
}

// resolve returns what native check ck decides under cfg, or an input
// error: a request's checks are all resolved before any is decided, so
// that a bad one refuses the request having charged nothing.
func (s *Server) resolve(cfg *config.Config, ck Check) (nativeCheck, error) {
	p := cfg.Policy(ck.Policy)
	if p == nil {
		return nativeCheck{}, inputError("unknown policy %q", ck.Policy)
	}
	if ck.Key == "" {
		return nativeCheck{}, inputError("key is required")
	}
	n := nativeCheck{ck: ck, p: p, storeKey: p.Name + "\x00" + ck.Key, limits: s.overrides.LimitsFor(p, ck.Key, ck.Plan), cost: p.Cost}
	if len(n.limits) == 0 {
		// A check cannot say when its request ends: holding a slot is for
		// front doors that see the request through.
		return nativeCheck{}, inputError("policy %q limits only requests in flight (concurrency), which sluice proxy and the middleware enforce; it has no rate to check", ck.Policy)
	}
	if ck.Cost != nil {
		n.cost = *ck.Cost
	}
	for _, l := range n.limits {
		req := sluice.Request{Key: n.storeKey, Limit: l, Cost: n.cost}
		if err := req.Validate(); err != nil {
			return nativeCheck{}, inputError("%v", strings.TrimPrefix(err.Error(), "sluice: "))
		}
	}
	return n, nil
}

// checkPolicy decides one native check against its policy.
func (s *Server) checkPolicy(ctx context.Context, n nativeCheck) outcome {
	if n.ck.Plan != "" && !n.p.HasPlan(n.ck.Plan) {
		s.NoteUnknownPlan(n.p.Name, n.ck.Plan)
	}
	return s.decide(ctx, subject{name: n.p.Name}, n.storeKey, n.limits, n.cost, n.p.Shadow, n.p.FailMode)
}

// giveBackChecks gives back what the checks of a request that is refused
// whole (one of its checks failed closed, or the store found one bad)
// took: its caller learns none of their results, and retries them.
func (s *Server) giveBackChecks(ctx context.Context, ns []nativeCheck, outs []outcome) {
	for i := range outs {
		s.giveBackTaken(ctx, ns[i].p.Name, ns[i].storeKey, &outs[i], ns[i].cost, ns[i].p.FailMode)
	}
}

// giveBackTaken gives back what outcome o, a check of cost on key, took,
// undoing its take (Guard.GiveBack, from o.Taken), and reports whether
// it gave any back. A check that took nothing (denied, a shadow
// check's denial too, failed open, or of cost 0) gives nothing, and a
// limit that counts every request (count: all) keeps its charge.
func (s *Server) giveBackTaken(ctx context.Context, label, key string, o *outcome, cost int64, fail sluice.FailMode) bool {
	if cost == 0 || !o.Took {
		return false
	}
	if o.Shadow {
		fail = sluice.FailOpen // decided as one that fails open
	}
	back := false
	for _, d := range o.Decisions {
		if !d.Limit.CountAll {
			var dec sluice.Decision
			s.guard.GiveBack(ctx, label, sluice.Request{Key: key, Limit: d.Limit, Cost: cost, Refund: o.Taken}, fail, &dec)
			back = true
		}
	}
	return back
}

// descriptor is a request descriptor's decision: the node of the domain's
// tree it matched, the limits decided (after replaces), parallel to the
// outcome's decisions, and the override the request carried, if any.
type descriptor struct {
	outcome
	Node      *config.Descriptor
	Limits    []config.RateLimit
	Unlimited bool
	Returned  bool   // its hits given back (is_negative_hits), not taken
	Key       string // the store key its limits were decided on
	Hits      int64  // what it asked of them
}

// addend is what a request descriptor asks of its limits: hits to take,
// or, with back set (is_negative_hits), hits to give back. 0 hits take
// and give nothing, and report what is left.
type addend struct {
	hits int64
	back bool
}

// override is a request descriptor's own limit (RateLimitDescriptor.limit).
type override struct {
	Rate  int64
	Unit  string
	Units int64 // unit_multiplier, 1 when not sent
}

// checkDescriptors decides an envoyproxy/ratelimit request as it does:
// each descriptor against the domain's tree (or its own override), its
// limits all-or-nothing, with limits that another matched descriptor
// replaces left out. An unknown domain decides nothing: every descriptor
// is OK without a limit, as envoyproxy/ratelimit answers, so an Envoy
// configured ahead of the service is not turned into errors. Hits past a
// limit are over it, without a store call; 0 hits never are. Hits given
// back (a descriptor's is_negative_hits) go to its limits (giveBack).
func (s *Server) checkDescriptors(ctx context.Context, cfg *config.Config, domain string, descs [][]config.Entry, adds []addend, overrides []*override) ([]descriptor, error) {
	outs, err := s.matchDescriptors(cfg, domain, descs, overrides)
	if err != nil {
		return nil, err
	}
	for i := range outs {
		s.decideDescriptor(ctx, cfg, domain, &outs[i], adds[i], overrides[i] != nil)
	}
	return outs, nil
}

// matchDescriptors finds each descriptor's limits, in the domain's tree
// or its own override, and the key they are decided on; a descriptor
// without limits has no key. Apart from checkDescriptors' loop, so that
// its frame is not on the stack while the store decides.
func (s *Server) matchDescriptors(cfg *config.Config, domain string, descs [][]config.Entry, overrides []*override) ([]descriptor, error) {
	if len(descs) == 0 || len(descs) > maxDescriptors {
		return nil, inputError("%d descriptors: want 1 to %d", len(descs), maxDescriptors)
	}
	for i, entries := range descs {
		if err := checkEntries(i, entries); err != nil {
			return nil, err
		}
	}
	outs := make([]descriptor, len(descs))
	d := cfg.Domains[domain]
	if d == nil {
		s.metrics.checks.WithLabelValues("", unknownDomain, "unknown_domain").Add(float64(len(descs)))
		s.noteUnknownDomain(domain)
		for i := range outs {
			outs[i].Closest = -1
		}
		return outs, nil
	}
	var values [][]string // made when a descriptor counts under other values
	replaced := map[string]bool{}
	for i, entries := range descs {
		outs[i].Closest = -1
		if o := overrides[i]; o != nil {
			// The request's own limit: no shadow, no name, no replaces.
			unit, ok := config.Unit(o.Unit)
			if !ok {
				return nil, inputError("descriptor %d: limit override unit %q", i, o.Unit)
			}
			period, err := config.Units(unit, o.Units)
			if err != nil {
				return nil, inputError("descriptor %d: limit override unit_multiplier %v", i, err)
			}
			outs[i].Node = &config.Descriptor{Key: entries[len(entries)-1].Key}
			outs[i].Limits = []config.RateLimit{{Unit: o.Unit, Units: uint32(o.Units), Rate: o.Rate, Block: o.Rate == 0,
				Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: max(o.Rate, 1), Period: period}}}
			continue
		}
		n, vals := d.Match(entries)
		outs[i].Node = n
		if vals != nil {
			if values == nil {
				values = make([][]string, len(descs))
			}
			values[i] = vals
		}
		if n == nil {
			continue
		}
		outs[i].Unlimited = n.Unlimited
		for _, r := range n.Replaces {
			replaced[r] = true
		}
	}
	for i := range outs {
		o := &outs[i]
		if overrides[i] == nil {
			if o.Node == nil || o.Unlimited {
				continue
			}
			if len(replaced) == 0 {
				o.Limits = o.Node.Limits // read, never written
			} else {
				for _, l := range o.Node.Limits {
					if l.Name == "" || !replaced[l.Name] {
						o.Limits = append(o.Limits, l)
					}
				}
			}
		}
		if len(o.Limits) == 0 {
			continue
		}
		var vals []string
		if values != nil {
			vals = values[i]
		}
		// Every key before any descriptor is decided: a request refused
		// for one takes nothing from the others.
		o.Key = descriptorKey(domain, descs[i], vals)
		if len(o.Key) > sluice.MaxKeyLen {
			return nil, inputError("descriptor %d: its entries make a key of %d bytes; at most %d", i, len(o.Key), sluice.MaxKeyLen)
		}
	}
	return outs, nil
}

// decideDescriptor decides descriptor o, matched, asking a of its limits
// (own: they are the request's override).
func (s *Server) decideDescriptor(ctx context.Context, cfg *config.Config, domain string, o *descriptor, a addend, own bool) {
	if o.Key == "" {
		return // no limit
	}
	shadow := o.Node.Shadow && !own
	o.Hits = a.hits
	limits, h, over := descriptorLimits(o.Limits, a.hits)
	switch {
	case a.back:
		o.outcome, o.Returned = s.giveBack(ctx, domain, o.Key, limits, a.hits, shadow, cfg.Store.FailMode), true
	case over:
		o.outcome = s.overLimit(subject{name: domain, domain: true}, o.Key, limits, shadow)
	default:
		o.outcome = s.decide(ctx, subject{name: domain, domain: true}, o.Key, limits, h, shadow, cfg.Store.FailMode)
	}
}

// descriptorLimits are a descriptor's limits as the store takes them, the
// hits it takes of them (at most the capacity of a limit that counts every
// request: past it, the capacity), and whether a limit refuses the hits
// without a store call (a block, or more than its capacity).
func descriptorLimits(rls []config.RateLimit, hits int64) (limits []sluice.Limit, h int64, over bool) {
	limits, h = make([]sluice.Limit, len(rls)), hits
	for j, l := range rls {
		limits[j] = l.Limit
		switch c := l.Limit.Capacity(); {
		case l.Block:
			over = true
		case h > c && l.Limit.CountAll:
			h = c // counted whole: past the capacity, the capacity
		case h > c:
			over = true
		}
	}
	return limits, h, over
}

// giveBackRefused gives back what the descriptors of a request answered
// OVER_LIMIT took, as refunds of their takes (Guard.Settle): Envoy
// refuses the request, and a refused request takes nothing, whichever of
// its descriptors refused it (envoyproxy/ratelimit keeps every hit), or
// it is refused whole as invalid. A limit that counts every request
// (count: all) keeps its charge. Each status given back reports what is
// left without the request (sts nil: no statuses).
func (s *Server) giveBackRefused(ctx context.Context, domain string, outs []descriptor, sts []descriptorStatus, fail sluice.FailMode) {
	for i := range outs {
		o := &outs[i]
		if o.Returned || o.Unlimited || !s.giveBackTaken(ctx, domain, o.Key, &o.outcome, o.Hits, fail) || sts == nil {
			continue
		}
		if st := &sts[i].status; st.CurrentLimit != nil {
			c := o.Limits[o.Closest].Limit.Capacity()
			st.LimitRemaining = uint32(min(int64(st.LimitRemaining)+o.Hits, c, math.MaxUint32))
		}
	}
}

// checkEntries refuses descriptor i's entries unless they name one
// counter that no other entries can: 1 to maxEntries of them, keys
// without '=', keys and values (but an empty value) that pass the one
// identity rule (door.Identity: see descriptorKey).
func checkEntries(i int, entries []config.Entry) error {
	if len(entries) == 0 || len(entries) > maxEntries {
		return inputError("descriptor %d has %d entries: want 1 to %d", i, len(entries), maxEntries)
	}
	for j, e := range entries {
		if err := door.Identity(e.Key); err != nil {
			return inputError("descriptor %d entry %d: key %v", i, j, err)
		}
		if strings.IndexByte(e.Key, '=') >= 0 {
			return inputError("descriptor %d entry %d: key %.40q holds '='", i, j, e.Key)
		}
		if err := door.Identity(e.Value); err != nil && e.Value != "" {
			return inputError("descriptor %d entry %d (%.40q): value %v", i, j, e.Key, err)
		}
	}
	return nil
}

// noteDenied logs a denial, sampled per policy or domain as the
// middleware logs them: at most one line a second each, with the count
// held back.
func (s *Server) noteDenied(sub subject, d sluice.Decision) {
	if ok, held := s.logs.Allow(sub.name); ok {
		kind := "policy"
		if sub.domain {
			kind = "domain"
		}
		s.log.Info("rate limited", kind, sub.name, "limit", d.Limit.String(), "retry_after", d.RetryAfter, "suppressed", held)
	}
}

// NoteUnknownPlan counts a check of policy that named plan, which the
// policy does not have (a plan renamed or removed in the policy file while
// callers still send it, or a caller's typo): its key's override, or else
// the policy's own limits, decide it, as documented, and never silently.
// The line is sampled per policy: once a second at most, with the count
// held back. The proxy calls it for its plan_from header.
func (s *Server) NoteUnknownPlan(policy, plan string) {
	s.metrics.unknownPlan.WithLabelValues(policy).Inc()
	if ok, held := s.logs.Allow("plan:" + policy); ok {
		var plans []string
		if p := s.state().cfg.Policy(policy); p != nil {
			plans = slices.Sorted(maps.Keys(p.Plans))
		}
		s.log.Warn("a check named a plan its policy does not have: the key's override, or else the policy's own limits, decided it",
			"policy", policy, "plan", fmt.Sprintf("%.100q", plan), "plans", plans, "suppressed", held)
	}
}

// noteUnknownDomain logs a request for a domain the config does not have,
// sampled: once a second at most, with the count held back.
func (s *Server) noteUnknownDomain(domain string) {
	if ok, held := s.logs.Allow(unknownDomain); ok {
		s.log.Warn("envoy: a request for an unknown domain: every descriptor OK, no limit",
			"domain", fmt.Sprintf("%.100q", domain), "suppressed", held)
	}
}

// descriptorKey is the key a descriptor counts under:
// "<domain>\x00<key>=<value>..." with each entry's value, or the value
// Match says it counts under (a share_threshold wildcard) when values is
// not nil.
func descriptorKey(domain string, entries []config.Entry, values []string) string {
	n := len(domain)
	for i, e := range entries {
		n += 2 + len(e.Key) + len(e.Value)
		if values != nil {
			n += len(values[i]) - len(e.Value)
		}
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteByte(0)
		b.WriteString(e.Key)
		b.WriteByte('=')
		if values != nil {
			b.WriteString(values[i])
		} else {
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// unknownDomain labels the checks of domains the config does not have: one
// label, so that callers cannot grow the series.
const unknownDomain = "(unknown domain)"

// overLimit is the outcome of hits that no state could allow (a limit of
// requests_per_unit 0, or more hits than the limit): over every limit,
// nothing taken, no store call; counted as any check of key.
func (s *Server) overLimit(sub subject, key string, limits []sluice.Limit, shadow bool) outcome {
	ds := make([]sluice.Decision, len(limits))
	for i, l := range limits {
		ds[i] = sluice.Decision{Limit: l, RetryAfter: l.Period}
	}
	result := guard.Denied
	if shadow {
		result = guard.ShadowDenied
	}
	_, client, _ := strings.Cut(key, "\x00")
	s.count(sub, result, client, &ds[0], time.Now())
	return outcome{Decisions: ds, Closest: 0, Shadow: shadow, Result: result}
}
