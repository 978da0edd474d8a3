package bench

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// BenchmarkStoreTail measures the tail of one store call on a saturated
// host, the figure sluice.DefaultTimeout is chosen from: 64 callers on one
// hot key of a local redis-server, with hogs CPU-bound processes beside
// them (0, or 2 on a 2-core machine: every core busy twice over). It
// reports the p50, p99, p99.9 and the slowest call in milliseconds.
//
//	cd bench && go test -run '^$' -bench StoreTail -benchtime 20000x -count 3
func BenchmarkStoreTail(b *testing.B) {
	for _, hogs := range []int{0, 2} {
		b.Run("hogs="+strconv.Itoa(hogs), func(b *testing.B) {
			srv := redistest.Standalone(b)
			s, err := redisstore.Open(srv.URL(), redisstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for range hogs {
				hog := exec.Command("sh", "-c", "while :; do :; done")
				if err := hog.Start(); err != nil {
					b.Fatal(err)
				}
				defer func() { hog.Process.Kill(); hog.Wait() }()
			}
			req := sluice.Request{Key: "hot", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Minute}, Cost: 1}
			const callers = 64
			var next atomic.Int64
			lat := make([][]time.Duration, callers)
			var wg sync.WaitGroup
			var failed atomic.Value
			b.ResetTimer()
			for c := range callers {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						t0 := time.Now()
						if _, err := s.Take(context.Background(), req); err != nil {
							failed.Store(err)
							return
						}
						lat[c] = append(lat[c], time.Since(t0))
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			all := slices.Concat(lat...)
			slices.Sort(all)
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(ms(all[len(all)/2]), "p50-ms")
			b.ReportMetric(ms(all[len(all)*99/100]), "p99-ms")
			b.ReportMetric(ms(all[len(all)*999/1000]), "p99.9-ms")
			b.ReportMetric(ms(all[len(all)-1]), "max-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}
