package memstore

// slab holds a table's entries in fixed pages, addressed by a uint32 index,
// so the key map holds 4-byte values and a Take updates its entry in place
// after a single map lookup. Freed slots are reused.
type slab struct {
	pages [][]entry
	free  []uint32
	n     uint32 // slots ever handed out
}

const pageBits = 10 // 1,024 entries of 32 bytes: 32 KiB a page

func (s *slab) at(i uint32) *entry { return &s.pages[i>>pageBits][i&(1<<pageBits-1)] }

func (s *slab) alloc() uint32 {
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		return i
	}
	if int(s.n>>pageBits) == len(s.pages) {
		s.pages = append(s.pages, make([]entry, 1<<pageBits))
	}
	i := s.n
	s.n++
	return i
}

func (s *slab) release(i uint32) {
	*s.at(i) = entry{}
	s.free = append(s.free, i)
}
