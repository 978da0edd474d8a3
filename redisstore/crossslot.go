package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/sluicehq/sluice"
)

// A batch whose keys span Redis Cluster slots cannot run as one script:
// Cluster runs a script on the one node that owns its keys. takeSlots
// decides it slot by slot, so that a request limited per user key and
// per client address (two slots) is still decided on Redis:
//
//  1. Every slot's requests are peeked (cost 0), all slots at once.
//  2. The slots are taken one by one, those the peeks say would deny
//     first, each all-or-nothing in one script; the first slot denied
//     stops the rest, which are reported as their peeks found them.
//
// So a request that a limit denies takes nothing from its others, as in
// one script, unless its state changed between the peek and the take (a
// concurrent request took the last unit): then the slots taken before the
// denying one keep their charge. No limit ever admits more than it
// allows, since each slot's take is atomic.

// slotGroup is the requests of one slot, by their index in the batch.
type slotGroup struct {
	idx    []int
	reqs   []sluice.Request
	dst    []sluice.Decision
	denies bool // the peek says the take would be denied
	forced bool // holds a forced request, taken whatever the others say
}

// takeSlots decides c's requests, whose keys span slots, as above.
func (s *Store) takeSlots(ctx context.Context, c *call) error {
	if c.reqs[0].ID != "" {
		return fmt.Errorf("%w: an idempotent call (Request.ID) must keep to one slot", ErrCrossSlot)
	}
	var groups []*slotGroup
	bySlot := map[uint16]*slotGroup{}
	for i, k := range c.keys[:len(c.reqs)] {
		g := bySlot[slot(k)]
		if g == nil {
			g = &slotGroup{}
			bySlot[slot(k)] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		g.reqs = append(g.reqs, c.reqs[i])
		g.forced = g.forced || c.reqs[i].Force
	}
	for _, g := range groups {
		g.dst = make([]sluice.Decision, len(g.reqs))
	}
	if err := s.peekGroups(ctx, groups); err != nil {
		return err
	}
	slices.SortStableFunc(groups, func(a, b *slotGroup) int {
		return cmp.Compare(b2i(!a.denies), b2i(!b.denies))
	})
	denied := false
	for _, g := range groups {
		if denied && !g.forced {
			continue // reported as peeked
		}
		if err := s.TakeAll(ctx, g.reqs, g.dst); err != nil {
			return err
		}
		for _, d := range g.dst {
			denied = denied || !d.Allowed
		}
	}
	for _, g := range groups {
		for j, i := range g.idx {
			c.dst[i] = g.dst[j]
		}
	}
	return nil
}

// peekGroups peeks every group's requests at once, into their decisions,
// and notes which the take would deny.
func (s *Store) peekGroups(ctx context.Context, groups []*slotGroup) error {
	var wg sync.WaitGroup
	errs := make([]error, len(groups))
	for gi, g := range groups {
		wg.Go(func() {
			peeks := slices.Clone(g.reqs)
			for i := range peeks {
				peeks[i].Cost, peeks[i].Force = 0, false
			}
			if errs[gi] = s.TakeAll(ctx, peeks, g.dst); errs[gi] != nil {
				return
			}
			for i, d := range g.dst {
				if d.Remaining < g.reqs[i].Cost {
					g.denies = true
					g.dst[i].Allowed = false
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
