package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// BenchmarkRedisDistance measures what a check costs against a Redis at a
// distance: 64 callers on 10k keys through a proxy that adds a latency
// each way, each check under a 1 s deadline (the default store timeout).
// It reports the p50 and p99 of a check over the round trip measured by
// PING through the same proxy: 1 means a check costs one round trip,
// whatever the concurrency.
//
//	cd bench && go test -run '^$' -bench RedisDistance -benchtime 10000x -count 1
func BenchmarkRedisDistance(b *testing.B) {
	for _, oneWay := range []time.Duration{0, 25 * time.Millisecond, 50 * time.Millisecond} {
		b.Run(fmt.Sprintf("each-way=%v", oneWay), func(b *testing.B) {
			srv := redistest.Standalone(b)
			fp := faultproxy.Start(b, srv.Addr)
			s, err := redisstore.Open("redis://"+fp.Addr, redisstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			fp.SetLatency(oneWay)
			rc := rueidisClient(b, fp.Addr)
			var pings []time.Duration
			for range 20 {
				t0 := time.Now()
				if err := rc.Do(context.Background(), rc.B().Ping().Build()).Error(); err != nil {
					b.Fatal(err)
				}
				pings = append(pings, time.Since(t0))
			}
			slices.Sort(pings)
			rtt := pings[len(pings)/2]
			// Load the function library first: a cold start costs its first
			// calls two more round trips.
			if _, err := s.Take(context.Background(), sluice.Request{Key: "warm", Limit: benchLimit, Cost: 1}); err != nil {
				b.Fatal(err)
			}
			ks := keySets()[1].keys
			var next, late atomic.Int64
			lat := make([][]time.Duration, 64)
			var wg sync.WaitGroup
			b.ResetTimer()
			for c := range 64 {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						ctx, cancel := context.WithTimeout(context.Background(), time.Second)
						t0 := time.Now()
						_, err := s.Take(ctx, sluice.Request{Key: ks[int(i)%len(ks)], Limit: benchLimit, Cost: 1})
						cancel()
						if err != nil {
							late.Add(1)
							continue
						}
						lat[c] = append(lat[c], time.Since(t0))
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			if len(all) == 0 {
				b.Fatal("no check answered")
			}
			b.ReportMetric(float64(rtt.Microseconds())/1000, "rtt-ms")
			b.ReportMetric(float64(all[len(all)/2])/float64(rtt), "p50/rtt")
			b.ReportMetric(float64(all[len(all)*99/100])/float64(rtt), "p99/rtt")
			b.ReportMetric(float64(late.Load())/float64(b.N)*100, "%failed")
			b.ReportMetric(0, "ns/op")
		})
	}
}
