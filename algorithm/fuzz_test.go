package algorithm_test

import (
	"encoding/binary"
	"testing"

	"github.com/sluicehq/sluice"
)

// FuzzAlgorithms decodes bytes into an algorithm, a limit and a sequence of
// (time step, cost) arrivals, with steps that may go backwards, and checks
// that every Result keeps its promises.
func FuzzAlgorithms(f *testing.F) {
	f.Add([]byte{5, 10, 0, 100, 3, 1, 0, 0, 2, 200, 1, 1})
	f.Add([]byte{0, 1, 1, 1, 1, 1, 255, 255, 1, 0, 0, 1})
	f.Add([]byte{2, 200, 9, 9, 50, 7, 30, 2, 128, 0, 0, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 4 {
			return
		}
		alg := allAlgorithms[int(b[0])%len(allAlgorithms)]
		rate := int64(b[1])%50 + 1
		period := (int64(binary.LittleEndian.Uint16(b[2:4]))%5000 + 1) * 1000
		burst := rate
		b = b[4:]
		if len(b) > 0 {
			burst = int64(b[0])%60 + 1
			b = b[1:]
		}
		m := newMachine(alg, rate, period, burst)
		capacity := burst
		if alg == sluice.FixedWindow || alg == sluice.SlidingLog || alg == sluice.SlidingWindow {
			capacity = rate
		}
		now := int64(1_700_000_000_000_000)
		for len(b) >= 2 {
			step := int64(int8(b[0])) * period / 64 // backwards when negative
			now += step
			cost := int64(b[1]) % (capacity + 1)
			b = b[2:]
			before := m.clone()
			r := m.take(now, cost)
			if err := checkResult(before, now, cost, r); err != nil {
				t.Fatalf("%v %d/%dµs burst %d at %d cost %d: %v", alg, rate, period, burst, now, cost, err)
			}
		}
	})
}
