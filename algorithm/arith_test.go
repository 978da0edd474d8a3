package algorithm

import (
	"math"
	"math/bits"
	"testing"

	"pgregory.net/rapid"
)

// The precomputed divisor is exact: for divisors near powers of two and at
// the ends of the range, against dividends at the ends of theirs, and for
// random pairs.
func TestDivisorIsExact(t *testing.T) {
	check := func(t interface{ Fatalf(string, ...any) }, d, n uint64) {
		v := newDivisor(d)
		if q, r := v.divmod(n); q != n/d || r != n%d {
			t.Fatalf("%d / %d = %d rem %d, want %d rem %d", n, d, q, r, n/d, n%d)
		}
	}
	var ds, ns []uint64
	for s := range 63 {
		p := uint64(1) << s
		ds = append(ds, p-1, p, p+1)
	}
	ds = append(ds, 3, 7, 1000, 3_600_000_000, 86_400_000_000, 31_536_000_000_000, 1e9, math.MaxInt64)
	for _, d := range ds {
		ns = append(ns, d-1, d, d+1, 2*d-1, 2*d)
	}
	ns = append(ns, 0, 1, math.MaxInt64, math.MaxUint64, math.MaxUint64-1)
	for _, d := range ds {
		if d == 0 {
			continue
		}
		for _, n := range ns {
			check(t, d, n)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		d := rapid.Uint64Range(1, math.MaxInt64).Draw(t, "d") >> rapid.IntRange(0, 62).Draw(t, "shift")
		n := rapid.Uint64().Draw(t, "n") >> rapid.IntRange(0, 63).Draw(t, "nshift")
		check(t, max(d, 1), n)
	})
}

// mulDivBy says what mulDiv says, products past 64 bits included.
func TestMulDivByMatchesMulDiv(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := rapid.Int64Range(0, math.MaxInt64).Draw(t, "a") >> rapid.IntRange(0, 62).Draw(t, "as")
		b := rapid.Int64Range(0, math.MaxInt64).Draw(t, "b") >> rapid.IntRange(0, 62).Draw(t, "bs")
		c := max(rapid.Int64Range(1, math.MaxInt64).Draw(t, "c")>>rapid.IntRange(0, 62).Draw(t, "cs"), 1)
		if hi, _ := bits.Mul64(uint64(a), uint64(b)); hi >= uint64(c) {
			t.Skip("quotient past int64: mulDiv saturates, validated limits never get here")
		}
		d := newDivisor(uint64(c))
		q, r := mulDivBy(a, b, &d)
		wq, wr := mulDiv(a, b, c)
		if q != wq || r != wr {
			t.Fatalf("mulDivBy(%d, %d, %d) = %d, %d; mulDiv = %d, %d", a, b, c, q, r, wq, wr)
		}
	})
}
