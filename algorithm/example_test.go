package algorithm_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
)

// An algorithm is a pure function of a state, a time and a cost: the
// caller keeps the state and passes the time.
func ExampleGCRA() {
	p := algorithm.ParamsOf(sluice.Limit{Algorithm: sluice.GCRA, Rate: 2, Period: time.Second})
	var s algorithm.State
	for _, ms := range []int64{0, 0, 0, 500} {
		var r algorithm.Result
		s, r = algorithm.GCRA(s, &p, ms*1000, 1)
		fmt.Println(ms, "ms:", r.Allowed, "remaining", r.Remaining)
	}
	// Output:
	// 0 ms: true remaining 1
	// 0 ms: true remaining 0
	// 0 ms: false remaining 0
	// 500 ms: true remaining 0
}
