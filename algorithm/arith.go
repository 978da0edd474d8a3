package algorithm

import (
	"math"
	"math/bits"
)

// mulDiv returns floor(a*b/c) and (a*b) mod c for a, b ≥ 0 and c > 0,
// computing the product in 128 bits. A quotient beyond int64 saturates at
// math.MaxInt64 with remainder 0; validated Limits never get there.
func mulDiv(a, b, c int64) (q, r int64) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi == 0 {
		return int64(lo / uint64(c)), int64(lo % uint64(c))
	}
	if hi >= uint64(c) {
		return math.MaxInt64, 0
	}
	qu, ru := bits.Div64(hi, lo, uint64(c))
	if qu > math.MaxInt64 {
		return math.MaxInt64, 0
	}
	return int64(qu), int64(ru)
}

// ceilDiv returns ceil(a/b) for any a and b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b // truncates toward zero: already the ceiling when a < 0
	if a > 0 && a%b != 0 {
		q++
	}
	return q
}

// floorWindow returns the start of the epoch-aligned window of length p
// that holds t.
func floorWindow(t, p int64) int64 {
	w := t - t%p
	if t < 0 && t%p != 0 {
		w -= p
	}
	return w
}
