package memstore

import (
	"math/rand/v2"
	"strconv"
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

// The index against a map, through random inserts and removals of keys
// whose hashes share homes and tags, and rebuilds when tombstones fill it:
// each present key is found, each absent one is not and gets a free slot
// on its probe path, and the count of live entries agrees.
func TestIndexAgainstAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ix := newIndex(minIndex)
	type placed struct {
		e *entry
		h uint64
	}
	held := map[string]placed{}
	rebuilds := 0
	// Few homes and few tags, so that probes run long, pass tombstones
	// and meet tags that match other keys.
	hashOf := func(k int) uint64 { return uint64(k%5)<<32 | uint64(k%3+2)<<24 }
	for step := range 20_000 {
		k := rng.IntN(100)
		key := strconv.Itoa(k)
		h := hashOf(k)
		e, at := ix.find(h, key)
		p, ok := held[key]
		switch {
		case ok && e != p.e:
			t.Fatalf("step %d: %q found as %p; it is %p", step, key, e, p.e)
		case !ok && e != nil:
			t.Fatalf("step %d: %q found, but it was removed", step, key)
		case ok:
			ix.remove(at)
			ix.live--
			delete(held, key)
		case ix.full():
			ix = ix.rebuilt(func(k string) uint64 { n, _ := strconv.Atoi(k); return hashOf(n) })
			rebuilds++
		default:
			if s := ix.slot(at).Load(); s != nil && s != tombstone {
				t.Fatalf("step %d: free slot %d of %q holds %q", step, at, key, s.key)
			}
			if ix.slot(at).Load() == nil {
				ix.used++
			}
			ne := newEntry(key, algorithm.State{})
			ix.set(at, ne, h)
			ix.live++
			held[key] = placed{ne, h}
		}
		if step%100 == 0 {
			// Every key held is found, and used counts the slots not empty.
			for key, p := range held {
				if e, _ := ix.find(p.h, key); e != p.e {
					t.Fatalf("step %d: %q found as %p; it is %p", step, key, e, p.e)
				}
			}
			used := 0
			for i := range ix.n {
				if ix.tag(i) != tagEmpty {
					used++
				}
			}
			if used != ix.used {
				t.Fatalf("step %d: %d slots not empty; used says %d", step, used, ix.used)
			}
		}
	}
	if ix.live != len(held) || rebuilds == 0 {
		t.Fatalf("live %d; %d keys held; %d rebuilds", ix.live, len(held), rebuilds)
	}
}
