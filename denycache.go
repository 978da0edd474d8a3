package sluice

import (
	"sync"
	"time"
)

// denyCache remembers keys known to be denied until their RetryAfter.
// It only ever denies, so a stale or evicted entry can cost a round trip but
// never admits more.
type denyCache struct {
	mu  sync.Mutex
	max int
	m   map[string]denied
}

type denied struct {
	cost  int64 // the smallest cost known denied
	until time.Time
	reset time.Time
}

func newDenyCache(max int) *denyCache {
	return &denyCache{max: max, m: make(map[string]denied)}
}

// lookup returns a denial for key if a request of at most cost is known to
// be denied at now.
func (c *denyCache) lookup(key string, cost int64, now time.Time) (Decision, bool) {
	c.mu.Lock()
	e, ok := c.m[key]
	if ok && !now.Before(e.until) {
		delete(c.m, key)
		ok = false
	}
	c.mu.Unlock()
	if !ok || cost < e.cost {
		return Decision{}, false
	}
	return Decision{RetryAfter: e.until.Sub(now), ResetAfter: max(e.reset.Sub(now), 0)}, true
}

func (c *denyCache) add(key string, cost int64, now time.Time, d Decision) {
	if d.RetryAfter <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		for k := range c.m { // evict one arbitrary entry: a miss costs one round trip
			delete(c.m, k)
			break
		}
	}
	c.m[key] = denied{cost: cost, until: now.Add(d.RetryAfter), reset: now.Add(d.ResetAfter)}
}

func (c *denyCache) forget(key string) {
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}
