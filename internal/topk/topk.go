// Package topk keeps the most frequent items of a stream in bounded
// memory: the space-saving algorithm (Metwally, Agrawal, El Abbadi, 2005).
// With k counters, every item seen more than n/k times in a stream of n is
// kept, and each count is over by at most the error it reports.
package topk

import (
	"slices"
	"sync"
)

// MaxItemLen bounds the bytes of an item kept: a longer one is cut, so a
// sketch's memory is at most k × (MaxItemLen + a few words).
const MaxItemLen = 256

// Sketch is a space-saving sketch of k counters. It is safe for concurrent
// use.
type Sketch struct {
	mu    sync.Mutex
	k     int
	items map[string]*counter
}

type counter struct {
	Count, Error int64
}

// Item is one counted item: Count is at least its true count, and at most
// Error above it.
type Item struct {
	Key          string
	Count, Error int64
}

// New returns a sketch of k counters (at least 1).
func New(k int) *Sketch {
	return &Sketch{k: max(k, 1), items: make(map[string]*counter, max(k, 1))}
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
		return
	}
	if len(s.items) < s.k {
		s.items[key] = &counter{Count: 1}
		return
	}
	// Replace the least counted: the newcomer inherits its count as error.
	var minKey string
	var minC *counter
	for k, c := range s.items {
		if minC == nil || c.Count < minC.Count {
			minKey, minC = k, c
		}
	}
	delete(s.items, minKey)
	s.items[key] = &counter{Count: minC.Count + 1, Error: minC.Count}
}

// Top returns the items, most counted first.
func (s *Sketch) Top() []Item {
	s.mu.Lock()
	out := make([]Item, 0, len(s.items))
	for k, c := range s.items {
		out = append(out, Item{Key: k, Count: c.Count, Error: c.Error})
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
