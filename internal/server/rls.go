package server

import (
	"context"
	"errors"
	"strconv"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// rls implements envoy.service.ratelimit.v3.RateLimitService, as
// envoyproxy/ratelimit does, so an Envoy configured for it works unchanged.
type rls struct {
	rlspb.UnimplementedRateLimitServiceServer
	s *Server
}

var unitNames = map[time.Duration]rlspb.RateLimitResponse_RateLimit_Unit{
	time.Second: rlspb.RateLimitResponse_RateLimit_SECOND, time.Minute: rlspb.RateLimitResponse_RateLimit_MINUTE,
	time.Hour: rlspb.RateLimitResponse_RateLimit_HOUR, 24 * time.Hour: rlspb.RateLimitResponse_RateLimit_DAY,
	7 * 24 * time.Hour: rlspb.RateLimitResponse_RateLimit_WEEK, 30 * 24 * time.Hour: rlspb.RateLimitResponse_RateLimit_MONTH,
	365 * 24 * time.Hour: rlspb.RateLimitResponse_RateLimit_YEAR,
}

// ShouldRateLimit decides every descriptor of req.
func (r *rls) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	defer r.s.track()()
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "domain is required")
	}
	if n := len(req.GetDescriptors()); n == 0 || n > maxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors: want 1 to %d", n, maxDescriptors)
	}
	descs := make([][]config.Entry, len(req.Descriptors))
	hits := make([]int64, len(req.Descriptors))
	for i, d := range req.Descriptors {
		if len(d.GetEntries()) > maxEntries {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries: want at most %d", i, len(d.Entries), maxEntries)
		}
		for _, e := range d.Entries {
			descs[i] = append(descs[i], config.Entry{Key: e.Key, Value: e.Value})
		}
		hits[i] = int64(req.GetHitsAddend())
		if hits[i] == 0 {
			hits[i] = 1
		}
		if d.GetHitsAddend() != nil {
			hits[i] = int64(d.GetHitsAddend().GetValue())
		}
	}
	cfg := r.s.state().cfg
	outs, nodes, err := r.s.checkDescriptors(ctx, cfg, req.Domain, descs, hits)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	var decided []sluice.Decision // each descriptor's closest, for the headers
	for i, o := range outs {
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		switch {
		case errors.Is(o.Err, errInput):
			return nil, status.Error(codes.InvalidArgument, o.Err.Error())
		case o.Err != nil: // a store failure, fail-closed
			st.Code = rlspb.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		case o.Closest >= 0:
			d := o.Decisions[o.Closest]
			st.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{
				RequestsPerUnit: uint32(min(d.Limit.Rate, 1<<32-1)),
				Unit:            unitNames[d.Limit.Period],
				Name:            nodes[i].Key,
			}
			st.LimitRemaining = uint32(max(min(d.Remaining, 1<<32-1), 0))
			st.DurationUntilReset = durationpb.New(d.ResetAfter)
			if !o.allowed() {
				st.Code = rlspb.RateLimitResponse_OVER_LIMIT
				resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
			}
			decided = append(decided, d)
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	if i := sluice.Most(decided); i >= 0 {
		d := decided[i]
		resp.ResponseHeadersToAdd = []*corepb.HeaderValue{
			{Key: "x-ratelimit-limit", Value: strconv.FormatInt(d.Limit.Rate, 10)},
			{Key: "x-ratelimit-remaining", Value: strconv.FormatInt(max(d.Remaining, 0), 10)},
			{Key: "x-ratelimit-reset", Value: strconv.FormatInt(int64((d.ResetAfter+time.Second-1)/time.Second), 10)},
		}
		if !d.Allowed {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
				&corepb.HeaderValue{Key: "retry-after", Value: strconv.FormatInt(max(int64((d.RetryAfter+time.Second-1)/time.Second), 1), 10)})
		}
	}
	return resp, nil
}
