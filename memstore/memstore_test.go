package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) sluice.Store { return memstore.New(memstore.Options{}) })
}

func TestSlots(t *testing.T) {
	storetest.RunSlots(t, func(t *testing.T) guard.Slots { return memstore.New(memstore.Options{}) })
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

// TakeInto decides what Take decides: two stores, one driven by Take and
// one by TakeInto with a single Request and Decision reused throughout,
// step by step on every algorithm, through admissions, denials, peeks, a
// refund and invalid requests, after which the reused Decision must be
// the zero one and not what the call before left in it.
func TestTakeIntoDecidesAsTake(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for a := sluice.FixedWindow; a <= sluice.Calendar; a++ {
		t.Run(a.String(), func(t *testing.T) {
			byValue, byPointer := memstore.New(memstore.Options{}), memstore.New(memstore.Options{})
			limit := sluice.Limit{Algorithm: a, Rate: 3, Period: time.Minute}
			if a == sluice.Calendar {
				limit.Period = time.Hour
			}
			var req sluice.Request
			var d sluice.Decision
			steps := []sluice.Request{
				{Key: "a", Limit: limit, Cost: 1, Now: start},
				{Key: "a", Limit: limit, Cost: 2, Now: start.Add(time.Second)},
				{Key: "a", Limit: limit, Cost: 1, Now: start.Add(2 * time.Second)}, // denied
				{Key: "a", Limit: limit, Cost: 0, Now: start.Add(3 * time.Second)}, // a peek
				{Key: "", Limit: limit, Cost: 1, Now: start.Add(4 * time.Second)},  // invalid
				{Key: "b", Limit: limit, Cost: 1, Now: start.Add(5 * time.Second)},
				{Key: "a", Limit: limit, Cost: 9, Now: start.Add(6 * time.Second)}, // over capacity
				{Key: "a", Limit: limit, Cost: 1, Now: start.Add(7 * time.Second), Refund: start.Add(time.Second)},
				{Key: "a", Limit: limit, Cost: 1, Now: start.Add(8 * time.Second)},
				{Key: "a", Limit: limit, Cost: 1, Now: start.Add(30 * time.Second)},
			}
			for i, step := range steps {
				want, wantErr := byValue.Take(ctx, step)
				req = step
				err := byPointer.TakeInto(ctx, &req, &d)
				if fmt.Sprint(err) != fmt.Sprint(wantErr) {
					t.Fatalf("step %d: TakeInto error %v, Take's %v", i, err, wantErr)
				}
				if d != want {
					t.Fatalf("step %d: TakeInto decided %+v, Take %+v", i, d, want)
				}
				if req != step {
					t.Fatalf("step %d: TakeInto changed the request to %+v", i, req)
				}
				if err != nil && d != (sluice.Decision{}) {
					t.Fatalf("step %d: an error left %+v in the Decision", i, d)
				}
			}
		})
	}
}
