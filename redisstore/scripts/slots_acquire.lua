-- slots_acquire takes one of max slots of a key for a lease, on Redis's
-- clock (sluice.Slots.Acquire).
-- KEYS[1]: the key's slots, a sorted set of leases scored by their expiry
-- (µs). ARGV: lease, max, ttl (µs).
-- Returns {1, slots left, 0} when taken (a lease that holds one already
-- is renewed), {0, 0, µs until the soonest lease expires} when max are
-- held.
local key, lease = KEYS[1], ARGV[1]
local max, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local held = redis.call('ZCARD', key)
if not redis.call('ZSCORE', key, lease) then
  if held >= max then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    return {0, 0, math.max(tonumber(first[2]) - now, 0)}
  end
  held = held + 1
end
redis.call('ZADD', key, now + ttl, lease)
-- The set lives as long as its latest lease.
local ms = math.ceil(ttl / 1000) + 1000
if redis.call('PTTL', key) < ms then
  redis.call('PEXPIRE', key, ms)
end
return {1, max - held, 0}
