package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/topk"
)

// activity is what the status page shows of the traffic: per policy or
// domain, checks per second for the last ten minutes, and the keys denied
// most (a space-saving sketch, when the config allows keys to be kept).
// Its memory is bounded by the config's names: historySeconds slots and
// ui.top_keys counters of at most topk.MaxItemLen bytes per label.
type activity struct {
	start  time.Time
	labels sync.Map // label -> *labelActivity
	n      atomic.Int64
}

const (
	historySeconds = 600
	maxLabels      = 10_000 // labels come from the config; this is a guard
)

type labelActivity struct {
	slots [historySeconds]second
	top   atomic.Pointer[topk.Sketch] // nil while keys are not kept
	// The costs settled by the answer since start: the estimates taken,
	// what was charged, the settlements whose answer did not say.
	settles, estimated, charged, unread atomic.Int64
}

// settled counts a settlement of label: its estimate, what it charged,
// and whether the answer's cost could not be read.
func (a *activity) settled(label string, estimate, actual int64, unread bool) {
	l := a.label(label)
	if l == nil {
		return
	}
	l.settles.Add(1)
	l.estimated.Add(estimate)
	l.charged.Add(actual)
	if unread {
		l.unread.Add(1)
	}
}

// Settled is a label's settlements since start, for the status page.
type Settled struct{ Settles, Estimated, Charged, Unread int64 }

func (a *activity) settledOf(label string) Settled {
	v, ok := a.labels.Load(label)
	if !ok {
		return Settled{}
	}
	l := v.(*labelActivity)
	return Settled{l.settles.Load(), l.estimated.Load(), l.charged.Load(), l.unread.Load()}
}

// second counts one second's checks by kind.
type second struct {
	at                      atomic.Int64 // the second these counts are of
	allowed, denied, failed atomic.Int64
}

func newActivity() *activity { return &activity{start: time.Now()} }

func (a *activity) label(name string) *labelActivity {
	if v, ok := a.labels.Load(name); ok {
		return v.(*labelActivity)
	}
	if a.n.Load() >= maxLabels {
		return nil
	}
	v, loaded := a.labels.LoadOrStore(name, new(labelActivity))
	if !loaded {
		a.n.Add(1)
	}
	return v.(*labelActivity)
}

// record counts a check of label with outcome made at at (the check's own
// clock reading), and its client (the key without the policy's or
// domain's name) when denied and topKeys > 0.
func (a *activity) record(label string, o guard.Outcome, client string, topKeys int, at time.Time) {
	l := a.label(label)
	if l == nil {
		return
	}
	now := int64(at.Sub(a.start) / time.Second)
	s := &l.slots[now%historySeconds]
	if at := s.at.Load(); at != now && s.at.CompareAndSwap(at, now) {
		s.allowed.Store(0)
		s.denied.Store(0)
		s.failed.Store(0)
	}
	switch {
	case o.Failed():
		s.failed.Add(1)
	case o == guard.Denied:
		s.denied.Add(1)
	default:
		s.allowed.Add(1)
	}
	if (o == guard.Denied || o == guard.LocalDenied) && topKeys > 0 {
		sk := l.top.Load()
		if sk == nil {
			l.top.CompareAndSwap(nil, topk.New(topKeys))
			sk = l.top.Load()
		}
		sk.Observe(client) // shown by shownKey, hashed where it is a credential
	}
}

// rates returns label's per-second counts for the last n seconds, oldest
// first.
func (a *activity) rates(label string, n int) (allowed, denied, failed []int64) {
	allowed, denied, failed = make([]int64, n), make([]int64, n), make([]int64, n)
	v, ok := a.labels.Load(label)
	if !ok {
		return
	}
	l := v.(*labelActivity)
	now := int64(time.Since(a.start) / time.Second)
	for i := range n {
		sec := now - int64(n-1-i)
		if sec < 0 {
			continue
		}
		s := &l.slots[sec%historySeconds]
		if s.at.Load() == sec {
			allowed[i], denied[i], failed[i] = s.allowed.Load(), s.denied.Load(), s.failed.Load()
		}
	}
	return
}

// top returns label's most denied keys, as they were observed (the
// status page shows them by shownKey), or nil.
func (a *activity) top(label string) []topk.Item {
	v, ok := a.labels.Load(label)
	if !ok {
		return nil
	}
	if sk := v.(*labelActivity).top.Load(); sk != nil {
		return sk.Top()
	}
	return nil
}

// unhash returns label's most denied key that shown, a config.ShownKey
// hash, names, and whether one does: the status page links a key it
// shows hashed to the inspector by its hash.
func (a *activity) unhash(label, shown string) (string, bool) {
	for _, it := range a.top(label) {
		if config.ShownKey(it.Key, true) == shown {
			return it.Key, true
		}
	}
	return "", false
}

// forgetKeys drops every label's kept keys (the config stopped keeping them).
func (a *activity) forgetKeys() {
	a.labels.Range(func(_, v any) bool {
		v.(*labelActivity).top.Store(nil)
		return true
	})
}

// reload is one entry of the reload history.
type reload struct {
	At       time.Time
	OK       bool
	Problems string
}

// reloads keeps the last maxReloads loads of the config.
type reloads struct {
	mu   sync.Mutex
	list []reload
}

const maxReloads = 20

func (r *reloads) add(ok bool, problems string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, reload{At: time.Now(), OK: ok, Problems: problems})
	if len(r.list) > maxReloads {
		r.list = r.list[len(r.list)-maxReloads:]
	}
}

func (r *reloads) all() []reload {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]reload, len(r.list))
	for i, x := range r.list {
		out[len(r.list)-1-i] = x // newest first
	}
	return out
}
