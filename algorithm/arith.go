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

// mulDivBy is mulDiv by a precomputed divisor: a decision divides by its
// limit's Rate or Period, and a 64-bit divide instruction costs more than
// the rest of a GCRA decision.
func mulDivBy(a, b int64, d *divisor) (q, r int64) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi == 0 {
		qu, ru := d.divmod(lo)
		return int64(qu), int64(ru)
	}
	return mulDiv(a, b, int64(d.d))
}

// divisor divides by a number d ≥ 1 fixed in advance with a multiplication
// and two shifts, exactly for every uint64 (Granlund and Montgomery,
// "Division by invariant integers using multiplication", 1994, figure
// 4.1): with l = ceil(log2 d) and m = floor(2^64·(2^l − d)/d) + 1,
// n/d = (t + (n − t)>>min(l, 1)) >> max(l − 1, 0) where t = (m·n)>>64.
type divisor struct {
	d        uint64
	m        uint64
	sh1, sh2 uint8
}

func newDivisor(d uint64) divisor {
	l := bits.Len64(d - 1)
	// 2^l − d < d, so the quotient fits in 64 bits. d < 2^63 for every
	// Params, so 1<<l does not overflow.
	m, _ := bits.Div64(uint64(1)<<l-d, 0, d)
	return divisor{d: d, m: m + 1, sh1: uint8(min(l, 1)), sh2: uint8(max(l-1, 0))}
}

// divmod returns n/d and n mod d.
func (v *divisor) divmod(n uint64) (q, r uint64) {
	t, _ := bits.Mul64(v.m, n)
	q = (t + (n-t)>>v.sh1) >> v.sh2
	return q, n - q*v.d
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
