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
