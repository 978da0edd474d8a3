package sim_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sim"
)

// The boundary attack: the whole limit just before a window's edge and
// again just after. The fixed window admits both; the others do not.
func ExampleRun() {
	limit := sluice.Limit{Rate: 10, Period: time.Second, Burst: 10}
	results, err := sim.Run(sim.Config{
		Algorithms: []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.GCRA},
		Limit:      limit,
		Traffic:    sim.BoundaryAttack(10, time.Second, 3),
	})
	if err != nil {
		panic(err)
	}
	for _, r := range results {
		fmt.Printf("%v: at most %d in any second\n", r.Algorithm, r.MaxInPeriod)
	}
	// Output:
	// fixed_window: at most 20 in any second
	// sliding_log: at most 10 in any second
	// gcra: at most 10 in any second
}
