package memstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store { return memstore.New(memstore.Options{}) })
}

func TestSlots(t *testing.T) {
	storetest.RunSlots(t, func(t *testing.T) sluice.Slots { return memstore.New(memstore.Options{}) })
}

// Requests at the store's clock are checked as those with a Now are: the
// store skips the full check only for a key of 1 to MaxKeyLen bytes and a
// cost of 0 or 1.
func TestTakeChecksRequestsAtTheStoresClock(t *testing.T) {
	s := memstore.New(memstore.Options{})
	ctx := context.Background()
	limit := sluice.Limit{Rate: 3, Period: time.Second}
	for _, tc := range []struct {
		name string
		req  sluice.Request
		want error
	}{
		{"empty key", sluice.Request{Limit: limit, Cost: 1}, sluice.ErrEmptyKey},
		{"key too long", sluice.Request{Key: strings.Repeat("k", sluice.MaxKeyLen+1), Limit: limit, Cost: 1}, sluice.ErrKeyTooLong},
		{"negative cost", sluice.Request{Key: "a", Limit: limit, Cost: -1}, sluice.ErrNegativeCost},
		{"cost over capacity", sluice.Request{Key: "a", Limit: limit, Cost: 4}, sluice.ErrCostExceedsBurst},
		{"time out of range", sluice.Request{Key: "a", Limit: limit, Cost: 1, Now: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)}, sluice.ErrInvalidTime},
		{"refund out of range", sluice.Request{Key: "a", Limit: limit, Cost: 1, Refund: time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC)}, sluice.ErrInvalidTime},
		{"longest key", sluice.Request{Key: strings.Repeat("k", sluice.MaxKeyLen), Limit: limit, Cost: 1}, nil},
		{"cost at capacity", sluice.Request{Key: "b", Limit: limit, Cost: 3}, nil},
		{"peek", sluice.Request{Key: "c", Limit: limit}, nil},
	} {
		// Twice: the first makes the key's table and config, the second
		// finds them.
		for range 2 {
			if _, err := s.Take(ctx, tc.req); !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
		}
		if tc.want == nil {
			s.Reset(ctx, tc.req.Key, limit)
		}
	}
}
