package server

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/guard"
)

// rls implements envoy.service.ratelimit.v3.RateLimitService, as
// envoyproxy/ratelimit does, so an Envoy configured for it works unchanged.
type rls struct {
	rlspb.UnimplementedRateLimitServiceServer
	s *Server
}

// unitOf maps a limit's period back to its Envoy unit, and the unit's
// name to its enum.
var unitOf = map[string]rlspb.RateLimitResponse_RateLimit_Unit{
	"second": rlspb.RateLimitResponse_RateLimit_SECOND, "minute": rlspb.RateLimitResponse_RateLimit_MINUTE,
	"hour": rlspb.RateLimitResponse_RateLimit_HOUR, "day": rlspb.RateLimitResponse_RateLimit_DAY,
	"week": rlspb.RateLimitResponse_RateLimit_WEEK, "month": rlspb.RateLimitResponse_RateLimit_MONTH,
	"year": rlspb.RateLimitResponse_RateLimit_YEAR,
}

// ShouldRateLimit decides every descriptor of req and answers as
// envoyproxy/ratelimit does: OVER_LIMIT, never an error, for a well-formed
// request over its limits; OK without a limit for an unknown domain or a
// descriptor that matches none; errors only for malformed requests.
//
// It reads the request, decides and answers in three functions, so that
// its own frame, and so the goroutine's stack while the store decides,
// holds only what the decision needs: a check on the Redis store then
// fits the 8 KiB stack a gRPC worker starts with
// (TestRLSCheckStackAboveTheStore).
func (r *rls) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	defer r.s.track()()
	in, err := readRLS(req)
	if err != nil {
		return nil, err
	}
	cfg := r.s.state().cfg
	outs, err := r.s.checkDescriptors(ctx, cfg, req.Domain, in.descs, in.adds, in.overrides)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return r.answer(ctx, cfg, req.Domain, in.descs, outs)
}

// rlsRequest is what a request's descriptors ask: each one's entries, its
// hits, and its own limit (nil for none).
type rlsRequest struct {
	descs     [][]config.Entry
	adds      []addend
	overrides []*override
}

// readRLS reads req's descriptors, refusing a malformed request.
func readRLS(req *rlspb.RateLimitRequest) (rlsRequest, error) {
	if req.GetDomain() == "" {
		return rlsRequest{}, status.Error(codes.InvalidArgument, "domain is required")
	}
	if !utf8.ValidString(req.Domain) {
		return rlsRequest{}, status.Error(codes.InvalidArgument, "domain is not valid UTF-8")
	}
	if n := len(req.GetDescriptors()); n == 0 || n > maxDescriptors {
		return rlsRequest{}, status.Errorf(codes.InvalidArgument, "%d descriptors: want 1 to %d", n, maxDescriptors)
	}
	n, entries := len(req.Descriptors), 0
	for i, d := range req.Descriptors {
		if len(d.GetEntries()) > maxEntries {
			return rlsRequest{}, status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries: want at most %d", i, len(d.Entries), maxEntries)
		}
		entries += len(d.Entries)
	}
	// One allocation each for what a request's descriptors hold, whatever
	// their number.
	all := make([]config.Entry, 0, entries)
	in := rlsRequest{descs: make([][]config.Entry, n), adds: make([]addend, n), overrides: make([]*override, n)}
	for i, d := range req.Descriptors {
		for _, e := range d.Entries {
			all = append(all, config.Entry{Key: e.Key, Value: e.Value})
		}
		in.descs[i] = all[len(all)-len(d.Entries):]
		h := uint64(req.GetHitsAddend())
		if h == 0 {
			h = 1
		}
		if d.GetHitsAddend() != nil {
			h = d.GetHitsAddend().GetValue()
		}
		if h > math.MaxInt64 {
			return rlsRequest{}, status.Errorf(codes.InvalidArgument, "descriptor %d: hits_addend %d overflows", i, h)
		}
		in.adds[i] = addend{hits: int64(h), back: d.GetIsNegativeHits()}
		if o := d.GetLimit(); o != nil {
			in.overrides[i] = &override{Rate: int64(o.GetRequestsPerUnit()), Unit: strings.ToLower(o.GetUnit().String()), Units: 1}
			if m := o.GetUnitMultiplier(); m != nil {
				in.overrides[i].Units = int64(m.GetValue())
			}
		}
	}
	return in, nil
}

// answer is the response to a request whose descriptors descs were
// decided as outs: each descriptor's status, the overall code, and the
// headers; what a refused request took is given back.
func (r *rls) answer(ctx context.Context, cfg *config.Config, domain string, descs [][]config.Entry, outs []descriptor) (*rlspb.RateLimitResponse, error) {
	for _, o := range outs {
		if errors.Is(o.Err, errInput) { // the store found it bad: refused whole
			r.s.giveBackRefused(ctx, domain, outs, nil, cfg.Store.FailMode)
			return nil, status.Error(codes.InvalidArgument, o.Err.Error())
		}
	}
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(outs))}
	sts := make([]descriptorStatus, len(outs))
	var closest *rlspb.RateLimitResponse_DescriptorStatus // for the headers
	overLimit, quota, quotaOver := false, 0, 0
	for i, o := range outs {
		st := r.status(&o, &sts[i])
		resp.Statuses[i] = st
		r.count(domain, descs[i], &o)
		if o.Unlimited || o.Returned { // neither limits the request
			continue
		}
		if closest == nil && st.CurrentLimit != nil || closest != nil && st.CurrentLimit != nil && st.LimitRemaining < closest.LimitRemaining {
			closest = st
		}
		isQuota := cfg.Envoy.QuotaMode || o.Node != nil && o.Node.QuotaMode
		if isQuota {
			quota++
		}
		if st.Code == rlspb.RateLimitResponse_OVER_LIMIT {
			if isQuota {
				quotaOver++
			} else {
				overLimit, closest = true, st
			}
		}
	}
	// OVER_LIMIT when a descriptor is, or when every quota descriptor is.
	if overLimit || quota > 0 && quota == quotaOver {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	switch {
	case resp.OverallCode == rlspb.RateLimitResponse_OK:
	case cfg.Envoy.ShadowMode:
		resp.OverallCode = rlspb.RateLimitResponse_OK
	default:
		r.s.giveBackRefused(ctx, domain, outs, sts, cfg.Store.FailMode)
	}
	if e := cfg.Envoy; e.ResponseHeaders && closest != nil {
		resp.ResponseHeadersToAdd = []*corepb.HeaderValue{
			{Key: e.LimitHeader, Value: strconv.FormatUint(uint64(closest.CurrentLimit.RequestsPerUnit), 10)},
			{Key: e.RemainingHeader, Value: strconv.FormatUint(uint64(closest.LimitRemaining), 10)},
			{Key: e.ResetHeader, Value: strconv.FormatInt(closest.DurationUntilReset.GetSeconds(), 10)},
		}
	}
	return resp, nil
}

// descriptorStatus is a descriptor's answer with the messages it points
// to, allocated together.
type descriptorStatus struct {
	status rlspb.RateLimitResponse_DescriptorStatus
	limit  rlspb.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// status is one descriptor's answer, filled into a as envoyproxy/ratelimit
// fills it: for a decided limit, current_limit (requests_per_unit, unit,
// unit_multiplier when the period is more than one unit, name),
// limit_remaining (0 when over) and duration_until_reset (to the window's
// end for its fixed windows; to full for sluice's other algorithms); for
// an unlimited descriptor, OK with 4294967295 remaining; for no limit, OK
// alone. A shadow limit is OK whatever it says.
func (r *rls) status(o *descriptor, a *descriptorStatus) *rlspb.RateLimitResponse_DescriptorStatus {
	st := &a.status
	st.Code = rlspb.RateLimitResponse_OK
	switch {
	case o.Unlimited:
		st.LimitRemaining = math.MaxUint32
		return st
	case o.Closest < 0 || o.Err != nil && o.Decisions == nil:
		if o.Err != nil { // fail_mode closed refused
			st.Code = rlspb.RateLimitResponse_OVER_LIMIT
		}
		return st
	}
	d, l := o.Decisions[o.Closest], o.Limits[o.Closest]
	rate := uint32(min(l.Rate, math.MaxUint32))
	if l.Block {
		rate = 0
	}
	a.limit.RequestsPerUnit, a.limit.Unit, a.limit.Name = rate, unitOf[l.Unit], l.Name
	if l.Units > 1 { // rare: allocated only then
		a.limit.UnitMultiplier = wrapperspb.UInt32(l.Units)
	}
	st.CurrentLimit = &a.limit
	reset := d.ResetAfter
	if l.Limit.Algorithm.Resolved() == sluice.FixedWindow {
		now := o.Taken // when the check was decided, or now
		if now.IsZero() {
			now = time.Now()
		}
		p := int64(l.Limit.Period / time.Second)
		reset = time.Duration(p-now.Unix()%p) * time.Second
	}
	a.reset.Seconds, a.reset.Nanos = int64(reset/time.Second), int32(reset%time.Second) // as durationpb.New
	st.DurationUntilReset = &a.reset
	if d.Allowed {
		st.LimitRemaining = uint32(max(min(d.Remaining, math.MaxUint32), 0))
	} else if !o.Shadow {
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
	}
	return st
}

// count adds a descriptor's decision to sluice_envoy_descriptor_checks_total
// under its config node's name, or its own values' when the node asks for
// them (detailed_metric, value_to_metric).
func (r *rls) count(domain string, entries []config.Entry, o *descriptor) {
	n := o.Node
	if n == nil || n.FullKey == "" {
		return
	}
	name := n.FullKey
	if n.DetailedMetric || n.ValueToMetric {
		var b strings.Builder
		b.WriteString(domain)
		for _, e := range entries {
			b.WriteByte('.')
			b.WriteString(e.Key)
			if e.Value != "" {
				b.WriteByte('_')
				b.WriteString(e.Value)
			}
		}
		name = r.s.metrics.detailed.name(b.String())
	}
	result := o.Result.String()
	switch {
	case o.Unlimited:
		result = "unlimited"
	case o.Returned && o.Result == guard.Allowed:
		result = "returned"
	}
	r.s.metrics.descriptor(name, result)
}
