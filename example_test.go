package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/memstore"
)

// A fixed clock makes the examples' output exact.
var exampleNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func Example() {
	store := memstore.New(memstore.Options{Clock: func() time.Time { return exampleNow }})
	limit, err := sluice.ParseLimit("3/1s") // GCRA, burst 3
	if err != nil {
		panic(err)
	}
	limiter, err := sluice.NewLimiter(store, limit, sluice.LimiterOptions{})
	if err != nil {
		panic(err)
	}
	for i := range 4 {
		d, _ := limiter.Allow(context.Background(), "user:42")
		fmt.Println(i, d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// 0 true 2 0s
	// 1 true 1 0s
	// 2 true 0 0s
	// 3 false 0 333.334ms
}

// Two limits on one key, checked at once: a denial by either takes nothing
// from the other.
func ExampleStore_TakeAll() {
	store := memstore.New(memstore.Options{Clock: func() time.Time { return exampleNow }})
	perSecond := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 2, Period: time.Second}
	perHour := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 1000, Period: time.Hour}
	reqs := []sluice.Request{
		{Key: "api-key-1", Limit: perSecond, Cost: 1},
		{Key: "api-key-1", Limit: perHour, Cost: 1},
	}
	ds := make([]sluice.Decision, len(reqs))
	for range 3 {
		if err := store.TakeAll(context.Background(), reqs, ds); err != nil {
			panic(err)
		}
		// The decision closest to its limit is the one for the headers.
		c := ds[guard.Closest(ds)]
		fmt.Println(ds[0].Allowed && ds[1].Allowed, ds[0].Remaining, ds[1].Remaining, c.Limit)
	}
	// Output:
	// true 1 999 sliding_window 2/s
	// true 0 998 sliding_window 2/s
	// false 0 998 sliding_window 2/s
}

// A leaky bucket shapes: each request is admitted with the Delay that
// spaces the output at the rate. Wait sleeps it; a policing caller may
// ignore it.
func ExampleLimiter_AllowN_leakyBucket() {
	store := memstore.New(memstore.Options{Clock: func() time.Time { return exampleNow }})
	limit := sluice.Limit{Algorithm: sluice.LeakyBucket, Rate: 10, Period: time.Second, Burst: 3}
	limiter, _ := sluice.NewLimiter(store, limit, sluice.LimiterOptions{})
	for range 4 {
		d, _ := limiter.Allow(context.Background(), "upstream")
		fmt.Println(d.Allowed, d.Delay)
	}
	// Output:
	// true 0s
	// true 100ms
	// true 200ms
	// false 0s
}

func ExampleParseLimit() {
	for _, s := range []string{"100/1m", "token_bucket 10/s burst 50", "5000/1h burst 200"} {
		l, err := sluice.ParseLimit(s)
		fmt.Println(l, err)
	}
	_, err := sluice.ParseLimit("0/s")
	fmt.Println(err)
	// Output:
	// gcra 100/m <nil>
	// token_bucket 10/s burst 50 <nil>
	// gcra 5000/h burst 200 <nil>
	// sluice: invalid limit: rate 0 must be positive
}

// At most two uploads of one user in flight: a third is refused until one
// of the first two is released.
func ExampleConcurrency() {
	uploads := &sluice.Concurrency{Slots: memstore.New(memstore.Options{}), Max: 2}
	ctx := context.Background()
	first, _, _ := uploads.Acquire(ctx, "user:42")
	second, _, _ := uploads.Acquire(ctx, "user:42")
	third, d, _ := uploads.Acquire(ctx, "user:42")
	fmt.Println(third == nil, d.Allowed)
	first() // done
	again, d, _ := uploads.Acquire(ctx, "user:42")
	fmt.Println(again != nil, d.Remaining)
	second()
	again()
	// Output:
	// true false
	// true 0
}

// A monthly quota that resets at midnight on the first, New York time,
// whatever the month's length and the daylight-saving changes in it.
func ExampleParseLimit_calendar() {
	limit, err := sluice.ParseLimit("calendar 50000/month tz=America/New_York")
	if err != nil {
		panic(err)
	}
	store := memstore.New(memstore.Options{})
	at := time.Date(2026, 2, 27, 12, 0, 0, 0, time.UTC)
	d, _ := store.Take(context.Background(), sluice.Request{Key: "customer:7", Limit: limit, Cost: 1, Now: at})
	fmt.Println(d.Remaining, at.Add(d.ResetAfter).In(limit.Zone))
	// Output:
	// 49999 2026-03-01 00:00:00 -0500 EST
}
