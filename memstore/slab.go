package memstore

import "github.com/sluicehq/sluice/algorithm"

// slab holds a table's states in fixed pages of int64 words, addressed by a
// uint32 index, so the key map holds 4-byte values and a Take updates its
// state in place after a single map lookup. Each state takes only the
// words its algorithm uses (algorithm.Words): 16 bytes for GCRA, the leaky
// bucket and the fixed window, 24 for the others. A state's expiry is not
// stored: it is derived from the state (algorithm.FullAt). Freed slots are
// reused.
type slab struct {
	stride int
	pages  [][]int64
	free   []uint32
	n      uint32 // slots ever handed out
}

const pageBits = 10 // 1,024 states a page

func (s *slab) words(i uint32) []int64 {
	off := int(i&(1<<pageBits-1)) * s.stride
	return s.pages[i>>pageBits][off : off+s.stride : off+s.stride]
}

func (s *slab) load(i uint32) algorithm.State {
	w := s.words(i)
	st := algorithm.State{A: w[0], B: w[1]}
	if s.stride > 2 {
		st.C = w[2]
	}
	return st
}

func (s *slab) store(i uint32, st algorithm.State) {
	w := s.words(i)
	w[0], w[1] = st.A, st.B
	if s.stride > 2 {
		w[2] = st.C
	}
}

func (s *slab) alloc() uint32 {
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		return i
	}
	if int(s.n>>pageBits) == len(s.pages) {
		s.pages = append(s.pages, make([]int64, s.stride<<pageBits))
	}
	i := s.n
	s.n++
	return i
}

func (s *slab) release(i uint32) {
	clear(s.words(i))
	s.free = append(s.free, i)
}
