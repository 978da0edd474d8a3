package localsync_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/localsync"
	"github.com/sluicehq/sluice/memstore"
)

// Decide locally, sync with a shared store (Redis in production; a memory
// store here) every interval.
func Example() {
	shared := memstore.New(memstore.Options{})
	s, _ := localsync.New(localsync.Options{Shared: shared, Interval: time.Hour, Instances: 1})
	defer s.Close()
	ctx := context.Background()
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Hour}
	for range 4 {
		d, _ := s.Take(ctx, sluice.Request{Key: "k", Limit: limit, Cost: 1})
		fmt.Print(d.Allowed, " ")
	}
	before, _ := shared.Take(ctx, sluice.Request{Key: "k", Limit: limit})
	s.Sync(ctx)
	after, _ := shared.Take(ctx, sluice.Request{Key: "k", Limit: limit})
	fmt.Println("| shared remaining", before.Remaining, "then", after.Remaining)
	// Output: true true true false | shared remaining 3 then 0
}
