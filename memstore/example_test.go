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
