package algorithm_test

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
)

func BenchmarkTake(b *testing.B) {
	for _, alg := range allAlgorithms {
		if alg == sluice.SlidingLog {
			continue
		}
		b.Run(alg.String(), func(b *testing.B) {
			p := algorithm.NewParams(1_000_000, 3_600_000_000, 1_000_000_000)
			var s algorithm.State
			now := int64(1_700_000_000_000_000)
			for i := range b.N {
				var r algorithm.Result
				s, r = algorithm.Take(alg, s, &p, now+int64(i), 1)
				if !r.Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}
