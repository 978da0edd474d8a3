package topk

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Items seen more than n/k times are kept, with counts at most their
// error above the truth, on a Zipf-like stream.
func TestHeavyHittersKept(t *testing.T) {
	s := New(16)
	truth := map[string]int64{}
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.3, 1, 10_000)
	const n = 200_000
	for range n {
		k := fmt.Sprint("key-", z.Uint64())
		truth[k]++
		s.Observe(k)
	}
	top := s.Top()
	var sum int64
	for _, it := range top {
		sum += it.Count
	}
	if sum != n {
		t.Errorf("the counts sum to %d; space-saving's sum is the stream's length, %d", sum, n)
	}
	kept := map[string]Item{}
	for _, it := range top {
		kept[it.Key] = it
		if it.Count < truth[it.Key] || it.Count-it.Error > truth[it.Key] {
			t.Errorf("%s: count %d (error %d), truth %d", it.Key, it.Count, it.Error, truth[it.Key])
		}
	}
	for k, c := range truth {
		if c > n/16 {
			if _, ok := kept[k]; !ok {
				t.Errorf("%s seen %d times (> n/k = %d) was dropped", k, c, n/16)
			}
		}
	}
	if len(top) != 16 || top[0].Key != "key-0" {
		t.Fatalf("top: %v", top[:3])
	}
}

func TestLongKeysCut(t *testing.T) {
	s := New(2)
	long := string(make([]byte, 10*MaxItemLen))
	s.Observe(long)
	if got := s.Top()[0].Key; len(got) != MaxItemLen {
		t.Fatalf("kept %d bytes", len(got))
	}
}

// BenchmarkObserve is the worst case: every key unseen, so every
// observation replaces the least counted of a full sketch.
func BenchmarkObserve(b *testing.B) {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprint("10.0.", i/256, ".", i%256)
	}
	for _, k := range []int{32, 1000} {
		b.Run(fmt.Sprint("k=", k), func(b *testing.B) {
			s := New(k)
			for i := range b.N {
				s.Observe(keys[i%len(keys)])
			}
		})
	}
}
