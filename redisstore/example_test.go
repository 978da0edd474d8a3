package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// The Redis store: one Lua function call per decision, atomic on
// standalone Redis, Sentinel and Cluster. Open returns at once; calls fail
// with ErrNotConnected until Redis answers. (Not run: it needs a Redis.)
func Example() {
	s, err := redisstore.Open("redis://127.0.0.1:6379", redisstore.Options{})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	limiter, _ := sluice.NewLimiter(s, sluice.Limit{Rate: 100, Period: time.Minute}, sluice.LimiterOptions{})
	d, err := limiter.Allow(context.Background(), "user:42")
	fmt.Println(d.Allowed, err)
}
