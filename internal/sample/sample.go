// Package sample bounds log lines: at most a few a second for each label
// (a policy, a domain), counting the lines it held back so that the next
// line can say how many. A flood of denials or failures then costs a few
// lines a second, never one line per request.
package sample

import (
	"sync"
	"sync/atomic"
	"time"
)

// maxLabels bounds the labels tracked; past it, unknown labels share one
// slot. Labels come from configuration (policy and domain names), never
// from callers' keys, so this is only a guard.
const maxLabels = 10_000

// Sampler lets through at most PerSecond lines a second per label. The zero
// value is not usable; make one with New. It is safe for concurrent use.
type Sampler struct {
	perSecond int64
	base      time.Time // the monotonic clock is read as time.Since(base)
	labels    sync.Map  // label -> *window
	n         atomic.Int64
	shared    window
}

// window counts one label's lines in the current second.
type window struct {
	mu         sync.Mutex
	second     int64 // seconds since base
	lines      int64 // lines let through in second
	suppressed atomic.Int64
}

// New returns a Sampler of perSecond lines a second per label; perSecond
// below 1 means 1.
func New(perSecond int64) *Sampler {
	return &Sampler{perSecond: max(perSecond, 1), base: time.Now()}
}

// Allow reports whether a line for label may be written now, and if so
// how many lines for label were held back since the last one let through.
func (s *Sampler) Allow(label string) (ok bool, suppressed int64) {
	w := s.window(label)
	sec := int64(time.Since(s.base) / time.Second)
	w.mu.Lock()
	if w.second != sec {
		w.second, w.lines = sec, 0
	}
	ok = w.lines < s.perSecond
	if ok {
		w.lines++
	}
	w.mu.Unlock()
	if !ok {
		w.suppressed.Add(1)
		return false, 0
	}
	return true, w.suppressed.Swap(0)
}

func (s *Sampler) window(label string) *window {
	if w, ok := s.labels.Load(label); ok {
		return w.(*window)
	}
	if s.n.Load() >= maxLabels {
		return &s.shared
	}
	w, loaded := s.labels.LoadOrStore(label, new(window))
	if !loaded {
		s.n.Add(1)
	}
	return w.(*window)
}
