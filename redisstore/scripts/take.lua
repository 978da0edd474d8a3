-- take decides a batch all-or-nothing: the twin of a memory store TakeAll.
-- KEYS: one per request. ARGV[1]: now in µs, or -1 for Redis TIME; then per
-- request: algorithm code, rate, period (µs), burst, cost.
-- Returns per request: allowed (1/0), remaining, retry, reset, delay (µs).

local ALGS = {[1] = fixed_window, [3] = sliding_window, [4] = token_bucket, [5] = leaky_bucket, [6] = gcra}
local LOG = 2
local TTL_MARGIN_MS = 1000

local function take(f, s, p, now, cost)
  if cost == 0 then
    local _, one = f(s, p, now, 1)
    local s2, r = f(s, p, now, 0)
    r.allowed, r.retry, r.delay = one.allowed, one.retry, one.delay
    return s2, r
  end
  return f(s, p, now, cost)
end

local function int(x)
  return string.format('%.0f', x)
end

local function load_state(key)
  local v = redis.call('GET', key)
  if not v then
    return {0, 0, 0}
  end
  local a, b, c = string.match(v, '^(-?%d+):(-?%d+):(-?%d+)$')
  if not a then
    return redis.error_reply('sluice: key ' .. key .. ' holds a value sluice did not write')
  end
  return {tonumber(a), tonumber(b), tonumber(c)}
end

local function load_log(key)
  local raw = redis.call('LRANGE', key, 0, -1)
  local log = {}
  for i, v in ipairs(raw) do
    local t, c = string.match(v, '^(-?%d+):(%d+)$')
    if not t then
      return redis.error_reply('sluice: key ' .. key .. ' holds a list sluice did not write')
    end
    log[i] = {tonumber(t), tonumber(c)}
  end
  return log
end

local function ttl_ms(reset)
  return int(math.ceil(reset / 1000) + TTL_MARGIN_MS)
end

local now = tonumber(ARGV[1])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local reqs, all = {}, true
for i = 1, #KEYS do
  local o = 1 + (i - 1) * 5
  local q = {
    alg = tonumber(ARGV[o + 1]),
    p = newparams(tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4])),
    cost = tonumber(ARGV[o + 5]),
  }
  if q.alg == LOG then
    q.log = load_log(KEYS[i])
    if q.log.err then return q.log end
    q.drop, q.res, q.at = take_log(q.log, q.p, now, q.cost)
  else
    q.old = load_state(KEYS[i])
    if q.old.err then return q.old end
    q.new, q.res = take(ALGS[q.alg], q.old, q.p, now, q.cost)
  end
  all = all and q.res.allowed
  reqs[i] = q
end

local out = {}
for i = 1, #KEYS do
  local q, key = reqs[i], KEYS[i]
  if all and q.cost > 0 then
    if q.alg == LOG then
      if q.drop > 0 then
        redis.call('LTRIM', key, q.drop, -1)
      end
      local n = #q.log
      if n > q.drop and q.log[n][1] == q.at then
        redis.call('LSET', key, -1, int(q.at) .. ':' .. int(q.log[n][2] + q.cost))
      else
        redis.call('RPUSH', key, int(q.at) .. ':' .. int(q.cost))
      end
      redis.call('PEXPIRE', key, ttl_ms(q.res.reset))
    else
      redis.call('SET', key, int(q.new[1]) .. ':' .. int(q.new[2]) .. ':' .. int(q.new[3]), 'PX', ttl_ms(q.res.reset))
    end
  elseif not all and q.res.allowed then
    -- Denied batch: report the unchanged state of the limits that allowed.
    if q.alg == LOG then
      q.res = select(2, sliding_log(q.log, q.p, now, 0))
    else
      q.res = select(2, ALGS[q.alg](q.old, q.p, now, 0))
    end
  end
  local r = q.res
  out[#out + 1] = r.allowed and 1 or 0
  out[#out + 1] = r.remaining
  out[#out + 1] = r.retry
  out[#out + 1] = r.reset
  out[#out + 1] = r.delay
end
return out
