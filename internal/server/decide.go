package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
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

// outcome is the decision for one check or descriptor: every limit's
// decision and the one closest to its limit.
type outcome struct {
	Decisions []sluice.Decision
	Closest   int
	Shadow    bool // decided but never denies
	Failed    bool // the store failed and the fail mode allowed
	Err       error
}

// allowed reports whether the check passes (a shadow check always does).
func (o *outcome) allowed() bool {
	if o.Shadow || o.Err != nil || o.Closest < 0 {
		return true
	}
	return o.Decisions[o.Closest].Allowed
}

// decide takes cost from key under limits, all-or-nothing, and records
// metrics under label.
func (s *Server) decide(ctx context.Context, label, key string, limits []sluice.Limit, cost int64, shadow bool, fail sluice.FailMode) outcome {
	out := outcome{Closest: -1, Shadow: shadow}
	if len(limits) == 0 {
		return out
	}
	reqs := make([]sluice.Request, len(limits))
	for i, l := range limits {
		reqs[i] = sluice.Request{Key: key, Limit: l, Cost: cost}
		if err := reqs[i].Validate(); err != nil {
			out.Err = inputError("%v", strings.TrimPrefix(err.Error(), "sluice: "))
			return out
		}
	}
	ds := make([]sluice.Decision, len(reqs))
	start := time.Now()
	st := s.state()
	tctx, cancel := context.WithTimeout(ctx, st.cfg.Store.Timeout)
	err := s.store.TakeAll(tctx, reqs, ds)
	cancel()
	s.metrics.storeLatency.Observe(time.Since(start).Seconds())
	if err != nil {
		s.metrics.storeErrors.Inc()
		s.metrics.checks.WithLabelValues(label, "error").Inc()
		if fail == sluice.FailClosed {
			out.Err = fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, err)
			return out
		}
		// Fail open: report the limits as untouched.
		out.Failed = true
		for i, l := range limits {
			ds[i] = sluice.Decision{Allowed: true, Limit: l, Remaining: l.Capacity()}
		}
	}
	out.Decisions, out.Closest = ds, sluice.Most(ds)
	result := "allowed"
	switch {
	case err != nil:
		result = "failed_open"
	case !ds[out.Closest].Allowed && shadow:
		result = "shadow_denied"
	case !ds[out.Closest].Allowed:
		result = "denied"
	}
	s.metrics.checks.WithLabelValues(label, result).Inc()
	s.metrics.latency.WithLabelValues(label).Observe(time.Since(start).Seconds())
	return out
}

// checkPolicy decides one native check against a named policy.
func (s *Server) checkPolicy(ctx context.Context, cfg *config.Config, policy, key string, cost *int64) outcome {
	p := cfg.Policy(policy)
	if p == nil {
		return outcome{Closest: -1, Err: inputError("unknown policy %q", policy)}
	}
	if key == "" {
		return outcome{Closest: -1, Err: inputError("key is required")}
	}
	c := p.Cost
	if cost != nil {
		c = *cost
	}
	return s.decide(ctx, p.Name, p.Name+"\x00"+key, p.Limits, c, p.Shadow, p.FailMode)
}

// checkDescriptors decides an envoyproxy/ratelimit request: each
// descriptor against the domain's tree, its limits all-or-nothing, with
// limits that another matched descriptor replaces left out.
func (s *Server) checkDescriptors(ctx context.Context, cfg *config.Config, domain string, descs [][]config.Entry, hits []int64) ([]outcome, []*config.Descriptor, error) {
	d := cfg.Domains[domain]
	if d == nil {
		return nil, nil, inputError("unknown domain %q", domain)
	}
	if len(descs) == 0 || len(descs) > maxDescriptors {
		return nil, nil, inputError("%d descriptors: want 1 to %d", len(descs), maxDescriptors)
	}
	nodes := make([]*config.Descriptor, len(descs))
	replaced := map[string]bool{}
	for i, entries := range descs {
		if len(entries) == 0 || len(entries) > maxEntries {
			return nil, nil, inputError("descriptor %d has %d entries: want 1 to %d", i, len(entries), maxEntries)
		}
		nodes[i] = d.Match(entries)
		if nodes[i] != nil {
			for _, r := range nodes[i].Replaces {
				replaced[r] = true
			}
		}
	}
	outs := make([]outcome, len(descs))
	for i, n := range nodes {
		outs[i] = outcome{Closest: -1}
		if n == nil || n.Unlimited {
			continue
		}
		var limits []sluice.Limit
		for _, l := range n.Limits {
			if l.Name == "" || !replaced[l.Name] {
				limits = append(limits, l.Limit)
			}
		}
		var key strings.Builder
		key.WriteString(domain)
		for _, e := range descs[i] {
			key.WriteByte(0)
			key.WriteString(e.Key)
			key.WriteByte('=')
			key.WriteString(e.Value)
		}
		outs[i] = s.decide(ctx, domain, key.String(), limits, hits[i], n.Shadow, cfg.Store.FailMode)
	}
	return outs, nodes, nil
}
