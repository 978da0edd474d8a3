// Package topk keeps the most frequent items of a stream in bounded
// memory: the space-saving algorithm (Metwally, Agrawal, El Abbadi, 2005).
// With k counters, every item seen more than n/k times in a stream of n is
// kept, and each count is over by at most the error it reports.
package topk

import (
	"slices"
	"strings"
	"sync"
)

// MaxItemLen bounds the bytes of an item kept: a longer one is cut, so a
// sketch's memory is at most k × (MaxItemLen + a few words).
const MaxItemLen = 256

// Sketch is a space-saving sketch of k counters. It is safe for concurrent
// use. Its counters are a min-heap by count, so that replacing the least
// counted, which an unseen key does once the sketch is full, is O(log k).
type Sketch struct {
	mu    sync.Mutex
	k     int
	items map[string]*counter
	heap  []*counter // by Count, least first
}

type counter struct {
	key          string
	Count, Error int64
	i            int // index in heap
}

// Item is one counted item: Count is at least its true count, and at most
// Error above it.
type Item struct {
	Key          string
	Count, Error int64
}

// New returns a sketch of k counters (at least 1).
func New(k int) *Sketch {
	k = max(k, 1)
	return &Sketch{k: k, items: make(map[string]*counter, k), heap: make([]*counter, 0, k)}
}

// Observe counts one occurrence of key.
func (s *Sketch) Observe(key string) {
	if len(key) > MaxItemLen {
		key = key[:MaxItemLen]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.items[key]; ok {
		c.Count++
		s.down(c.i)
		return
	}
	key = strings.Clone(key) // not the caller's larger string
	if len(s.heap) < s.k {
		c := &counter{key: key, Count: 1, i: len(s.heap)}
		s.items[key] = c
		s.heap = append(s.heap, c)
		s.up(c.i)
		return
	}
	// Replace the least counted: the newcomer inherits its count as error.
	c := s.heap[0]
	delete(s.items, c.key)
	c.key, c.Error = key, c.Count
	c.Count++
	s.items[key] = c
	s.down(0)
}

func (s *Sketch) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.heap[i].i, s.heap[j].i = i, j
}

func (s *Sketch) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if s.heap[parent].Count <= s.heap[i].Count {
			return
		}
		s.swap(i, parent)
		i = parent
	}
}

func (s *Sketch) down(i int) {
	for {
		least := i
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(s.heap) && s.heap[c].Count < s.heap[least].Count {
				least = c
			}
		}
		if least == i {
			return
		}
		s.swap(i, least)
		i = least
	}
}

// Top returns the items, most counted first.
func (s *Sketch) Top() []Item {
	s.mu.Lock()
	out := make([]Item, 0, len(s.items))
	for _, c := range s.heap {
		out = append(out, Item{Key: c.key, Count: c.Count, Error: c.Error})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Item) int {
		if a.Count != b.Count {
			return int(b.Count - a.Count)
		}
		if a.Key < b.Key {
			return -1
		}
		return 1
	})
	return out
}
