package memstore

import (
	"testing"

	"github.com/sluicehq/sluice/algorithm"
)

// Every state reads back from its words as it was written, whichever form
// the first word takes: alone, with B packed in, or with B beside it.
func TestWordsRoundTrip(t *testing.T) {
	for _, s := range []algorithm.State{
		{},
		{A: 1_700_000_000_000_000},
		{A: 1_700_000_000_000_000, B: 1},
		{A: 1_700_000_000_000_000, B: 1<<bBits - 1}, // the largest packed B
		{A: 1_700_000_000_000_000, B: 1 << bBits},   // too large: beside
		{A: wordEpoch, B: 5},                        // the first packed A
		{A: wordEpoch - 1, B: 5},                    // before it: beside
		{A: wordEpoch + 1<<aBits - 1, B: 5},         // the last packed A
		{A: wordEpoch + 1<<aBits, B: 5},             // after it: beside
		{A: 12, B: 34, C: 56},                       // a token bucket's
		{A: packedB - 1},                            // the largest lone A
		{A: hasB - 1, B: 3},                         // the largest A beside B
		{A: 1_700_000_000_000_000, B: 999_999_936},  // a large Rate's remainder
	} {
		a := pack(s)
		if a < 0 {
			t.Fatalf("%+v packs to a mark %d", s, a)
		}
		if got := stateOf(a, s.B, s.C); got != s {
			t.Errorf("%+v: read back %+v (word %#x)", s, got, a)
		}
		if w, ok := word(s); ok && w != a {
			t.Errorf("%+v: word %#x, pack %#x", s, w, a)
		}
	}
}
