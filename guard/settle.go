package guard

import (
	"context"
	"time"

	"github.com/sluicehq/sluice"
)

// Settle moves what req's key and limit are charged from charged to
// actual, for a request that took its cost at taken
// (sluice.Request.Settlement): more is taken by force, less given back as
// a refund of that take. The front doors settle a request as soon as its
// answer says what it cost, and again if a later part of it says
// otherwise; req.Cost is not read. A failed store decides it by mode, as
// Decide does.
func (g *Guard) Settle(ctx context.Context, label string, req sluice.Request, taken time.Time, charged, actual int64, mode sluice.FailMode) Verdict {
	req, ok := req.Settlement(taken, charged, actual)
	if !ok {
		return Verdict{}
	}
	var d sluice.Decision
	return g.take(ctx, label, &req, mode, &d)
}

// GiveBack returns req.Cost to req's key and limit, from what its state
// holds now, as a refund (sluice.Request.Refund) of a take made now: a
// window's count less the cost, a bucket's tokens or a GCRA's and a leaky
// bucket's room back up to full, a sliding log's entries of the last
// period (less a second), the oldest first. For cost taken earlier whose
// time the caller did not keep, such as an Envoy descriptor's
// is_negative_hits; near a window's start, a window that has just ended
// holds none of it. A caller that undoes a take it has just made (a
// request refused whole) sets req.Refund to the time it read before the
// take: a window or a log gives back from the take's own window or
// entry, and a bucket all of it, as of now (what it refilled in the
// moments since is not counted against it). It is never denied. When
// the store fails, mode FailLocal gives it back to the stand-in, which
// counted what was taken during the outage, and to the store when it
// recovers (net of what the stand-in admitted); FailOpen and FailClosed
// give nothing back (failed open: there was nothing counted locally to
// give back to). A failure is logged and counted as any other. The state
// after it is written to *d.
func (g *Guard) GiveBack(ctx context.Context, label string, req sluice.Request, mode sluice.FailMode, d *sluice.Decision) Verdict {
	now := time.Now()
	cost, taken := req.Cost, req.Refund
	switch p := req.Limit.Period; {
	case req.Limit.Algorithm.HasBurst():
		// A bucket: a take no older than the store's clock, so that
		// nothing has refilled since and all of it comes back.
		req, _ = req.Settlement(now.Add(asOfNow), max(cost, 1), 0)
	case !taken.IsZero():
		req, _ = req.Settlement(taken, max(cost, 1), 0) // the take's own window or entry
	case req.Limit.Algorithm.Resolved() == sluice.SlidingLog:
		// The log's entries of its period less a second (half of it when
		// shorter), so that they are still in the log when the refund
		// reaches the store, however late.
		req, _ = req.Settlement(now, max(cost, 1), 0)
		req.Refund = now.Add(min(p/2, time.Second) - p)
	default:
		req, _ = req.Settlement(now, max(cost, 1), 0) // a refund of a take made now
	}
	req.Cost = min(cost, req.Limit.Capacity()) // 0 or below: as the store decides it
	if mode != sluice.FailLocal {
		mode = sluice.FailOpen
	}
	return g.take(ctx, label, &req, mode, d)
}

// asOfNow is how far past the caller's clock GiveBack names a bucket's
// take: past any store's clock (Redis's runs apart from the caller's by
// its measured offset, a millisecond or so), so that no refill since is
// counted against what it gives back.
const asOfNow = time.Second
