-- slots keeps the slots of a concurrency limiter on Redis's clock
-- (sluice.Slots). KEYS[1]: the key's slots, a sorted set of leases scored
-- by their expiry (µs), living as long as its latest lease.
-- ARGV: 'acquire', lease, max, ttl (µs): returns {1, slots left, 0} when
-- taken (a lease that holds one already is renewed), {0, 0, µs until the
-- soonest lease expires} when max are held.
-- ARGV: 'renew', lease, ttl (µs): returns 1, or 0 when the lease holds no
-- slot (expired, or released).
local key, op, lease = KEYS[1], ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- hold gives lease its slot until now + ttl.
local function hold(ttl)
  redis.call('ZADD', key, now + ttl, lease)
  local ms = math.ceil(ttl / 1000) + 1000
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

if op == 'renew' then
  local exp = redis.call('ZSCORE', key, lease)
  if not exp then
    return 0
  end
  if tonumber(exp) <= now then
    redis.call('ZREM', key, lease)
    return 0
  end
  hold(tonumber(ARGV[3]))
  return 1
end

local max, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local held = redis.call('ZCARD', key)
if not redis.call('ZSCORE', key, lease) then
  if held >= max then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    return {0, 0, math.max(tonumber(first[2]) - now, 0)}
  end
  held = held + 1
end
hold(ttl)
return {1, max - held, 0}
