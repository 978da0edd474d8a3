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
	Result    sluice.Outcome
	Err       error // an input error, or the store's under fail_mode closed
}

// allowed reports whether the check passes (a shadow check always does).
func (o *outcome) allowed() bool {
	if o.Shadow || o.Err != nil || o.Closest < 0 {
		return true
	}
	return o.Decisions[o.Closest].Allowed
}

// decide takes cost from key under limits, all-or-nothing, through the
// Guard, and counts the check once under label. A shadow check's limits
// are decided as enforced ones that fail open, and its denial is reported,
// never enforced.
func (s *Server) decide(ctx context.Context, label, key string, limits []sluice.Limit, cost int64, shadow bool, fail sluice.FailMode) outcome {
	out := outcome{Closest: -1, Shadow: shadow}
	if len(limits) == 0 {
		return out
	}
	if shadow {
		fail = sluice.FailOpen
	}
	reqs := make([]sluice.Request, len(limits))
	modes := make([]sluice.FailMode, len(limits))
	for i, l := range limits {
		reqs[i], modes[i] = sluice.Request{Key: key, Limit: l, Cost: cost}, fail
		if err := reqs[i].Validate(); err != nil {
			out.Err = inputError("%v", strings.TrimPrefix(err.Error(), "sluice: "))
			return out
		}
	}
	ds := make([]sluice.Decision, len(reqs))
	start := time.Now()
	v := s.guard.Decide(ctx, &sluice.Check{Label: label, Enforced: reqs, Modes: modes}, ds, nil)
	if shadow && v.Outcome == sluice.Denied {
		v.Outcome = sluice.ShadowDenied
	}
	out.Result = v.Outcome
	s.metrics.checks.WithLabelValues(label, v.Outcome.String()).Inc()
	s.metrics.latency.WithLabelValues(label).Observe(time.Since(start).Seconds())
	switch v.Outcome {
	case sluice.Invalid:
		out.Err = inputError("%v", strings.TrimPrefix(v.Err.Error(), "sluice: "))
	case sluice.FailedClosed:
		out.Err = v.Err
	default:
		out.Decisions, out.Closest = ds, v.Closest
	}
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
		for j, e := range descs[i] {
			if len(e.Key) > sluice.MaxIdentityLen {
				return nil, nil, inputError("descriptor %d entry %d: key of %d bytes; at most %d", i, j, len(e.Key), sluice.MaxIdentityLen)
			}
			if err := checkIdentity(e.Value); err != nil && e.Value != "" {
				return nil, nil, inputError("descriptor %d entry %d (%.40q): value %v", i, j, e.Key, err)
			}
			key.WriteByte(0)
			key.WriteString(e.Key)
			key.WriteByte('=')
			key.WriteString(e.Value)
		}
		if key.Len() > sluice.MaxKeyLen {
			return nil, nil, inputError("descriptor %d: its entries make a key of %d bytes; at most %d", i, key.Len(), sluice.MaxKeyLen)
		}
		outs[i] = s.decide(ctx, domain, key.String(), limits, hits[i], n.Shadow, cfg.Store.FailMode)
	}
	return outs, nodes, nil
}
