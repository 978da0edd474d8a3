package sim_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sim"
)

// BenchmarkZipf10M runs the sliding window counter against the exact log on
// 10M requests from 100k Zipf clients (exponent 1.1) at 180/s in all, so
// that the heaviest clients run at about twice the 10/s limit and the tail
// far under it, and reports the disagreement: the figure Cloudflare gives
// as 0.003% for its counter on its traffic.
func BenchmarkZipf10M(b *testing.B) {
	limit := sluice.Limit{Rate: 10, Period: time.Second}
	for range b.N {
		rs, err := sim.Run(sim.Config{
			Algorithms: []sluice.Algorithm{sluice.SlidingWindow, sluice.SlidingLog},
			Limit:      limit,
			Traffic:    zipf10M(),
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(100*rs[0].Disagree, "disagree-%")
		b.ReportMetric(float64(rs[0].Admitted)/float64(rs[0].Requests)*100, "admitted-%")
	}
}

func zipf10M() sim.Traffic { return sim.Zipf(10_000_000, 180, 100_000, 1.1, 1) }

// BenchmarkZipf10MSubWindows measures, on the same traffic, what more and
// smaller sub-windows would buy the counter, against the log's state.
func BenchmarkZipf10MSubWindows(b *testing.B) {
	limit := sluice.Limit{Rate: 10, Period: time.Second}
	for range b.N {
		acc, err := sim.SubWindows(limit, zipf10M(), []int{1, 4, 16, 64, 250, 1000})
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range acc {
			b.ReportMetric(100*a.Disagree, fmt.Sprintf("n%d-disagree-%%", a.SubWindows))
			b.ReportMetric(a.MeanBytes, fmt.Sprintf("n%d-B/key", a.SubWindows))
		}
		if b.N == 1 {
			sim.FormatAccuracy(os.Stdout, acc)
		}
	}
}
