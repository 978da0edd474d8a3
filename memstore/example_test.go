package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// The memory store decides atomically per key and forgets keys once they
// are back to full; MaxKeys bounds it under a key flood.
func Example() {
	s := memstore.New(memstore.Options{MaxKeys: 100_000})
	ctx := context.Background()
	perUser := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 2, Period: time.Minute}
	for range 3 {
		d, _ := s.Take(ctx, sluice.Request{Key: "user:42", Limit: perUser, Cost: 1})
		fmt.Println(d.Allowed, d.Remaining)
	}
	// Output:
	// true 1
	// true 0
	// false 0
}

// A goroutine on a hot path can keep one Request and one Decision and
// reuse them for every call: TakeInto reads the one and fills the other,
// where Take's values are copied at each call.
func ExampleStore_TakeInto() {
	s := memstore.New(memstore.Options{})
	ctx := context.Background()
	req := sluice.Request{Limit: sluice.Limit{Rate: 2, Period: time.Minute}, Cost: 1}
	var d sluice.Decision
	for _, key := range []string{"a", "b", "a", "a"} {
		req.Key = key
		if err := s.TakeInto(ctx, &req, &d); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(key, d.Allowed, d.Remaining)
	}
	// Output:
	// a true 1
	// b true 1
	// a true 0
	// a false 0
}
