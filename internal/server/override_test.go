package server

import (
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A descriptor's own limit (RateLimitDescriptor.limit) replaces the
// config's, and its unit_multiplier makes the period that many units: 2
// per 10 minutes is one window of 600 s, its reset counted down to that
// window's end, and the multiplier sent back in current_limit. A config
// limit's unit_multiplier is answered the same way. A multiplier of 0 is
// refused.
func TestEnvoyLimitOverrideUnits(t *testing.T) {
	r := start(t, `domains:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {unit: second, requests_per_unit: 1000}
      - key: hourly
        rate_limit: {unit: minute, unit_multiplier: 60, requests_per_unit: 2}
`, "")
	rl := r.rlsClient(t)
	ask := func(key string, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) (*rlspb.RateLimitResponse, int64, int64, error) {
		t.Helper()
		before := time.Now().Unix()
		resp, err := rl.ShouldRateLimit(t.Context(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: "ann"}}, Limit: o}}})
		return resp, before, time.Now().Unix(), err
	}
	// resetIn reports whether reset is a period-second window's end as
	// seen at some second from before to after.
	resetIn := func(reset, period, before, after int64) bool {
		for s := before; s <= after; s++ {
			if reset == period-s%period {
				return true
			}
		}
		return false
	}
	o := &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE, UnitMultiplier: wrapperspb.UInt32(10)}
	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		resp, before, after, err := ask("k", o)
		if err != nil {
			t.Fatal(err)
		}
		st := resp.Statuses[0]
		if resp.OverallCode != want || st.CurrentLimit.GetRequestsPerUnit() != 2 || st.CurrentLimit.GetUnit() != rlspb.RateLimitResponse_RateLimit_MINUTE ||
			st.CurrentLimit.GetUnitMultiplier().GetValue() != 10 || !resetIn(st.DurationUntilReset.GetSeconds(), 600, before, after) {
			t.Fatalf("request %d of 2 per 10 minutes: %v", i+1, resp)
		}
	}
	o.UnitMultiplier = nil // one unit: a window of its own, a minute long
	if resp, before, after, err := ask("k", o); err != nil || resp.Statuses[0].CurrentLimit.UnitMultiplier != nil ||
		!resetIn(resp.Statuses[0].DurationUntilReset.GetSeconds(), 60, before, after) {
		t.Fatalf("2 per minute: %v, %v", resp, err)
	}
	for i := range 2 {
		resp, before, after, err := ask("hourly", nil)
		if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit.GetUnitMultiplier().GetValue() != 60 ||
			!resetIn(resp.Statuses[0].DurationUntilReset.GetSeconds(), 3600, before, after) {
			t.Fatalf("config's 2 per 60 minutes, request %d: %v, %v", i+1, resp, err)
		}
	}
	if resp, _, _, err := ask("hourly", nil); err != nil || resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("config's 2 per 60 minutes, request 3: %v, %v", resp, err)
	}
	o.UnitMultiplier = wrapperspb.UInt32(0)
	if _, _, _, err := ask("k", o); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unit_multiplier 0: %v, want InvalidArgument", err)
	}
}
