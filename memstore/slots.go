package memstore

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
)

// slotShard holds the slots of requests in flight of some keys: the
// state of sluice.Concurrency limiters. A key exists while one of its
// slots is held, so the map holds no more keys than requests in flight.
type slotShard struct {
	mu   sync.Mutex
	keys map[string]map[string]struct{} // key → its leases
}

const slotShards = 64

var _ guard.Slots = (*Store)(nil)

func (s *Store) slotShard(key string) *slotShard {
	return &s.slots[s.hash(key)%slotShards]
}

// Acquire implements guard.Slots. Slots are held until released: their
// holders live in this process, so ttl is not needed to free them.
func (s *Store) Acquire(_ context.Context, key, lease string, max int64, _ time.Duration) (sluice.Decision, error) {
	if err := guard.CheckSlot(key, lease, max); err != nil {
		return sluice.Decision{}, err
	}
	sh := s.slotShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	held := sh.keys[key]
	if int64(len(held)) >= max {
		// Nothing expires here: a slot frees when a request ends, so the
		// caller may look again soon.
		return sluice.Decision{Limit: sluice.Limit{Rate: max}, RetryAfter: time.Second}, nil
	}
	if held == nil {
		held = make(map[string]struct{}, 1)
		sh.keys[strings.Clone(key)] = held
	}
	if _, ok := held[lease]; !ok {
		held[strings.Clone(lease)] = struct{}{}
	}
	return sluice.Decision{Allowed: true, Limit: sluice.Limit{Rate: max}, Remaining: max - int64(len(held))}, nil
}

// Renew implements guard.Slots: it reports whether lease holds a slot.
func (s *Store) Renew(_ context.Context, key, lease string, _ time.Duration) (bool, error) {
	sh := s.slotShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.keys[key][lease]
	return ok, nil
}

// Release implements guard.Slots.
func (s *Store) Release(_ context.Context, key, lease string) (bool, error) {
	sh := s.slotShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	held := sh.keys[key]
	if _, ok := held[lease]; !ok {
		return false, nil
	}
	delete(held, lease)
	if len(held) == 0 {
		delete(sh.keys, key)
	}
	return true, nil
}
