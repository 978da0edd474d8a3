package guard

import (
	"context"

	"github.com/sluicehq/sluice"
)

// TakeLabeled decides one enforced request under label and mode, as the
// front doors' checks of one request are decided.
func (g *Guard) TakeLabeled(ctx context.Context, label string, req sluice.Request, mode sluice.FailMode, d *sluice.Decision) Verdict {
	return g.take(ctx, label, &req, mode, d)
}

// SeenSlots is the size of the stand-in's record of g, 0 without one.
func SeenSlots(g *Guard) int {
	if g.standin == nil {
		return 0
	}
	return len(g.standin.seen.Load().slots)
}
