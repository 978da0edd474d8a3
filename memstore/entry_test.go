package memstore

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algorithm"
)

// Every state reads back from its words as it was written, whichever form
// the first word takes: alone, with B packed in (in ones or in a unit),
// or with B beside it.
func TestWordsRoundTrip(t *testing.T) {
	const tat = 1_700_000_000_000_000
	giga := unitOf(1_000_000_000, 1_000_000) // 10^9/1s: B in millionths of a µs, a thousand of them
	for _, tc := range []struct {
		s      algorithm.State
		u      unit
		packed bool // B packed in the word
	}{
		{algorithm.State{}, one, false},
		{algorithm.State{A: tat}, one, false},
		{algorithm.State{A: tat, B: 1}, one, true},
		{algorithm.State{A: tat, B: 1<<bBits - 1}, one, true},           // the largest packed B
		{algorithm.State{A: tat, B: 1 << bBits}, one, false},            // too large: beside
		{algorithm.State{A: wordEpoch, B: 5}, one, true},                // the first packed A
		{algorithm.State{A: wordEpoch - 1, B: 5}, one, false},           // before it: beside
		{algorithm.State{A: wordEpoch + 1<<aBits - 1, B: 5}, one, true}, // the last packed A
		{algorithm.State{A: wordEpoch + 1<<aBits, B: 5}, one, false},    // after it: beside
		{algorithm.State{A: 12, B: 34, C: 56}, one, false},              // a token bucket's
		{algorithm.State{A: packedB - 1}, one, false},                   // the largest lone A
		{algorithm.State{A: hasB - 1, B: 3}, one, false},                // the largest A beside B
		{algorithm.State{A: tat, B: 999_999_936}, one, false},           // a large Rate's remainder
		{algorithm.State{A: tat, B: 999_000_000, C: 1e9}, giga, true},   // the largest in its unit
		{algorithm.State{A: tat, B: 1_000_000, C: 1e9}, giga, true},
		{algorithm.State{A: tat, B: 999_999, C: 1e9}, giga, false},            // not a multiple (a converted rate's)
		{algorithm.State{A: tat, B: 1_000_001, C: 1e9}, giga, false},          // nor this
		{algorithm.State{A: tat, B: 1_000_000 << bBits, C: 1e9}, giga, false}, // too many units
		{algorithm.State{A: tat, B: 35, C: 63}, unitOf(63, 21), false},        // an odd unit, 21: 35 is no multiple
		{algorithm.State{A: tat, B: 42, C: 63}, unitOf(63, 21), true},
	} {
		s := tc.s
		a, b := pack(s, tc.u)
		if a < 0 {
			t.Fatalf("%+v packs to a mark %d", s, a)
		}
		if got := stateOf(a, b, s.C); got != s {
			t.Errorf("%+v in %d: read back %+v (words %#x, %d)", s, tc.u.d, got, a, b)
		}
		if packed := a&hasB == 0 && a&packedB != 0; packed != tc.packed {
			t.Errorf("%+v in %d: packed %v, want %v", s, tc.u.d, packed, tc.packed)
		}
		if w, ok := word(s, tc.u); ok && w != a {
			t.Errorf("%+v: word %#x, pack %#x", s, w, a)
		}
	}
}

// count finds a B's units exactly when B is a multiple of the unit, for
// units odd, even and powers of two, against division.
func TestUnitCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, u := range []unit{one, unitOf(1e9, 1e6), unitOf(63, 21), unitOf(3<<20, 1<<30), unitOf(999_999_937, 3_600_000_000), unitOf(1e12, 7e11)} {
		for range 100_000 {
			var b int64
			switch rng.IntN(3) {
			case 0:
				b = rng.Int64N(1<<bBits+5) * u.d
			case 1:
				b = rng.Int64N(1<<bBits+5)*u.d + rng.Int64N(u.d)
			default:
				b = rng.Int64()
			}
			q, ok := u.count(b)
			want := b%u.d == 0 && b/u.d < 1<<bBits
			if ok != want || ok && q != b/u.d {
				t.Fatalf("unit %d: count(%d) = %d, %v; want %d, %v", u.d, b, q, ok, b/u.d, want)
			}
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
	// Few homes and few tags, so that probes run long, start anywhere in
	// a group, pass tombstones and meet tags that match other keys.
	hashOf := func(k int) uint64 { return uint64(k%5)<<61 | uint64(k%3+2)<<24 | uint64(k%11*23)<<16 }
	for step := range 20_000 {
		k := rng.IntN(100)
		key := strconv.Itoa(k)
		h := hashOf(k)
		e, at := ix.locate(h, key)
		if found := ix.find(h, key); found != e {
			t.Fatalf("step %d: %q found as %p without the lock, located as %p", step, key, found, e)
		}
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
			ne := newEntry(key, algorithm.State{}, one)
			ix.set(at, ne, h)
			ix.live++
			held[key] = placed{ne, h}
		}
		if step%100 == 0 {
			// Every key held is found, and used counts the slots not empty.
			for key, p := range held {
				if e := ix.find(p.h, key); e != p.e {
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

// TestClockNotBehindTimeNow: the store's own clock never reads an earlier
// microsecond than a time.Now taken before it, so a refund of a take at
// a time the caller read (Request.Refund) finds that take's entry.
func TestClockNotBehindTimeNow(t *testing.T) {
	s := New(Options{})
	for i := range 100_000 {
		w := time.Now().UnixMicro()
		if now := s.now(time.Time{}); now < w {
			t.Fatalf("read %d: the store's clock %d µs, behind time.Now's %d", i, now, w)
		}
	}
}
