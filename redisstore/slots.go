package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
)

// Slots of sluice.Concurrency limiters: per key, a sorted set of the
// leases holding a slot, scored by their expiry on Redis's clock, with a
// TTL to its latest lease. Expired leases are removed by the next Acquire
// of the key, so a holder that crashed frees its slot when its lease
// expires.
var slotsScript = rueidis.NewLuaScript(mustScript("slots"))

func mustScript(name string) string {
	data, err := scripts.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic("redisstore: missing embedded script " + name) // a build defect
	}
	return string(data)
}

var _ guard.Slots = (*Store)(nil)

// slotsKey returns the Redis key of key's slots.
func (s *Store) slotsKey(key string) string {
	return s.prefix + "{" + keyEscaper.Replace(key) + "}:concurrency"
}

// Acquire implements guard.Slots.
func (s *Store) Acquire(ctx context.Context, key, lease string, max int64, ttl time.Duration) (sluice.Decision, error) {
	if err := guard.CheckSlot(key, lease, max); err != nil {
		return sluice.Decision{}, err
	}
	if ttl < time.Millisecond {
		return sluice.Decision{}, fmt.Errorf("redisstore: lease %v: at least 1ms", ttl)
	}
	client, _, err := s.conn()
	if err != nil {
		return sluice.Decision{}, err
	}
	vals, err := slotsScript.Exec(ctx, client, []string{s.slotsKey(key)},
		[]string{"acquire", lease, intArg(max), intArg(ttl.Microseconds())}).AsIntSlice()
	if err != nil {
		return sluice.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	if len(vals) != 3 {
		return sluice.Decision{}, fmt.Errorf("redisstore: unexpected reply %v", vals)
	}
	d := sluice.Decision{Allowed: vals[0] == 1, Limit: sluice.Limit{Rate: max}, Remaining: vals[1]}
	if !d.Allowed {
		d.RetryAfter = time.Duration(vals[2]) * time.Microsecond
	}
	return d, nil
}

// Renew implements guard.Slots.
func (s *Store) Renew(ctx context.Context, key, lease string, ttl time.Duration) (bool, error) {
	client, _, err := s.conn()
	if err != nil {
		return false, err
	}
	n, err := slotsScript.Exec(ctx, client, []string{s.slotsKey(key)}, []string{"renew", lease, intArg(ttl.Microseconds())}).AsInt64()
	if err != nil {
		return false, fmt.Errorf("redisstore: %w", err)
	}
	return n == 1, nil
}

// Release implements guard.Slots.
func (s *Store) Release(ctx context.Context, key, lease string) (bool, error) {
	client, _, err := s.conn()
	if err != nil {
		return false, err
	}
	n, err := client.Do(ctx, client.B().Zrem().Key(s.slotsKey(key)).Member(lease).Build()).AsInt64()
	if err != nil {
		return false, fmt.Errorf("redisstore: %w", err)
	}
	return n == 1, nil
}
