package sim

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// The floor on traffic shaped like Cloudflare's (20,000 sources, 0.1%
// bursting over the limit): the sliding window counter counting every
// request disagrees with the exact count on at most 0.005% of requests by
// Cloudflare's measure, and limits no source the exact count would not.
func TestSlidingWindowCountAllLikeCloudflare(t *testing.T) {
	if testing.Short() {
		t.Skip("a few million requests")
	}
	limit := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 10, Period: time.Second, CountAll: true}
	p, err := MeasurePerRequest(limit, Benign(limit, 20_000, 0.001, 4*time.Minute, 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests from %d sources: %d wrongly allowed, %d wrongly limited (%.4f%%), mean rate error %.2f%%, %d false-negative and %d false-positive sources",
		p.Requests, p.Sources, p.WronglyAllowed, p.WronglyLimited, 100*p.Disagree(), 100*p.MeanRateError, p.FalseNegative, p.FalsePositive)
	if p.Requests < 1_000_000 {
		t.Fatalf("%d requests: the scenario is too small to measure 0.005%%", p.Requests)
	}
	if p.Disagree() > 0.00005 || p.FalsePositive != 0 {
		t.Fatalf("disagree %.4f%% (floor 0.005%%), %d false-positive sources (floor 0)", 100*p.Disagree(), p.FalsePositive)
	}
}

// The per-request measure on a stream it can be worked out by hand: a
// fixed window lets a boundary burst through that the exact count limits.
func TestPerRequestBoundary(t *testing.T) {
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Second, CountAll: true}
	// Two at 0.9 s, two at 1.1 s: the exact count (four in the last second)
	// limits the last two; the fixed window's new window allows them.
	stream := func(yield func(Arrival) bool) {
		for _, ms := range []int{900, 901, 1100, 1101} {
			if !yield(Arrival{T: time.Duration(ms) * time.Millisecond, Key: "a", Cost: 1}) {
				return
			}
		}
	}
	p, err := MeasurePerRequest(limit, stream)
	if err != nil {
		t.Fatal(err)
	}
	if p.Requests != 4 || p.WronglyAllowed != 2 || p.WronglyLimited != 0 || p.FalseNegative != 1 || p.FalsePositive != 0 {
		t.Fatalf("%+v", p)
	}
}
