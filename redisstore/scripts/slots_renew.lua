-- slots_renew extends a lease that still holds its slot (sluice.Slots.Renew).
-- KEYS[1]: the key's slots. ARGV: lease, ttl (µs). Returns 1, or 0 when
-- the lease holds no slot (expired, or released).
local key, lease, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local exp = redis.call('ZSCORE', key, lease)
if not exp then
  return 0
end
if tonumber(exp) <= now then
  redis.call('ZREM', key, lease)
  return 0
end
redis.call('ZADD', key, now + ttl, lease)
local ms = math.ceil(ttl / 1000) + 1000
if redis.call('PTTL', key) < ms then
  redis.call('PEXPIRE', key, ms)
end
return 1
