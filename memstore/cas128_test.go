package memstore

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// cas128 swaps both words when both are as expected, and neither when
// either is not.
func TestCAS128(t *testing.T) {
	if !hasCAS128 {
		t.Skip("no 16-byte compare-and-swap in this build (" + runtime.GOARCH + ", -race or -tags sluice_nocas128)")
	}
	e := newEntry("k", stateOf(1, 0, 0), one)
	e.a, e.b = 10, 20
	for _, tc := range []struct {
		old0, old1 int64
		swapped    bool
	}{{11, 20, false}, {10, 21, false}, {11, 21, false}, {10, 20, true}} {
		if got := cas128(&e.a, tc.old0, tc.old1, 30, 40); got != tc.swapped {
			t.Fatalf("cas128 from (%d, %d) on (10, 20): %v, want %v", tc.old0, tc.old1, got, tc.swapped)
		}
		want := [2]int64{10, 20}
		if tc.swapped {
			want = [2]int64{30, 40}
		}
		if got := [2]int64{e.a, e.b}; got != want {
			t.Fatalf("after cas128 from (%d, %d): %v, want %v", tc.old0, tc.old1, got, want)
		}
	}
}

// Goroutines that read the two words one at a time and swap them
// together lose no update: a is a count and b its negation, and a pair
// read torn between two swaps is read again.
func TestCAS128Concurrent(t *testing.T) {
	if !hasCAS128 {
		t.Skip("no 16-byte compare-and-swap in this build (" + runtime.GOARCH + ", -race or -tags sluice_nocas128)")
	}
	e := newEntry("k", stateOf(1, 0, 0), one)
	e.a, e.b = 0, 0
	const goroutines, each = 8, 20_000
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				for {
					a := atomic.LoadInt64(&e.a)
					b := atomic.LoadInt64(&e.b)
					if a != -b {
						continue // torn between two swaps: the swap below would fail
					}
					if cas128(&e.a, a, b, a+1, b-1) {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	if e.a != goroutines*each || e.b != -goroutines*each {
		t.Fatalf("after %d swaps: (%d, %d)", goroutines*each, e.a, e.b)
	}
}

// The two words cas128 swaps are 16-byte aligned in every entry: the
// instruction faults on any other address.
func TestEntryWordsAligned(t *testing.T) {
	if !hasCAS128 {
		t.Skip("no 16-byte compare-and-swap in this build (" + runtime.GOARCH + ", -race or -tags sluice_nocas128)")
	}
	if off := unsafe.Offsetof(entry{}.a); off%16 != 0 || unsafe.Offsetof(entry{}.b) != off+8 {
		t.Fatalf("entry.a at %d, entry.b at %d: want a at a multiple of 16 and b right after", off, unsafe.Offsetof(entry{}.b))
	}
	if n := unsafe.Sizeof(entry{}); n != 64 {
		t.Fatalf("an entry is %d bytes: want 64, a size class whose objects are 64-byte aligned", n)
	}
	for i := range 10_000 {
		if p := uintptr(unsafe.Pointer(&newEntry("k", stateOf(1, 0, 0), one).a)); p%16 != 0 {
			t.Fatalf("entry %d: a at %#x", i, p)
		}
	}
}
