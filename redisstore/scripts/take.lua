-- take decides groups of requests, each group all-or-nothing: the twin of a
-- memory store TakeAll. Groups are independent: several callers' batches
-- share one call.
-- keys: one per request, in order. argv[1]: now in µs, or -1 for Redis
-- TIME; then per group: its size g, a flag f (1: the group's last key is its
-- idempotency key, after its g request keys), and per request: algorithm
-- code, rate, period (µs), burst, cost, force (1/0).
-- Returns per request: allowed (1/0), remaining, retry, reset, delay (µs);
-- for every request of a group that failed: -1, the error, 0, 0, 0.

local ALGS = {[1] = fixed_window, [3] = sliding_window, [4] = token_bucket, [5] = leaky_bucket, [6] = gcra}
local LOG = 2
local TTL_MARGIN_MS = 1000
local ID_TTL_MS = 60000
local NARGS = 6

-- apply records cost on an O(1) state whether or not it fits (Go: Apply).
local function apply(alg, s, p, now, cost)
  local s0 = ALGS[alg](s, p, now, 0)
  if alg == 1 or alg == 3 then
    s0[2] = s0[2] + cost
  elseif alg == 4 then
    s0[1] = s0[1] + cost
  else
    s0[1], s0[2] = tat_add(s0[1], s0[2], cost, p)
  end
  return s0
end

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
  return fmt('%.0f', x)
end

local function load_state(key)
  local v = rpcall('GET', key)
  if type(v) == 'table' and v.err then
    return v
  end
  if not v then
    return {0, 0, 0}
  end
  -- The state is three little-endian doubles: exact for integers below
  -- 2^53, and cheaper to pack and unpack than text.
  if #v ~= 24 then
    return {err = 'sluice: key ' .. key .. ' holds a value sluice did not write'}
  end
  local a, b, c = unpack('<d<d<d', v)
  return {a, b, c}
end

local function load_log(key)
  local raw = rpcall('LRANGE', key, 0, -1)
  if raw.err then
    return raw
  end
  local log = {}
  for i, v in ipairs(raw) do
    local t, c = string.match(v, '^(-?%d+):(%d+)$')
    if not t then
      return redis.error_reply('sluice: key ' .. key .. ' holds a list sluice did not write')
    end
    log[i] = {num(t), num(c)}
  end
  return log
end

local function ttl_ms(reset)
  return int(ceil(reset / 1000) + TTL_MARGIN_MS)
end

-- params returns the params of a limit given as argument strings. Requests
-- mostly share a limit: the last one is kept (as a function, from one call
-- to the next).
local last_rate, last_period, last_burst, last_params
local function params(rate, period, burst)
  if rate ~= last_rate or period ~= last_period or burst ~= last_burst then
    last_rate, last_period, last_burst = rate, period, burst
    last_params = newparams(num(rate), num(period), num(burst))
  end
  return last_params
end

-- group decides the g requests starting at keys[ki] and argv[ai], appending
-- five values per request to out. idkey, if set, makes it idempotent.
local function group(keys, argv, ki, ai, g, idkey, now, out)
  -- A group seen before (a retry after a lost reply) is only reported.
  local replay = idkey and not rcall('SET', idkey, '1', 'NX', 'PX', ID_TTL_MS)
  local reqs, all = {}, true
  for i = 1, g do
    local o = ai + (i - 1) * NARGS
    -- Every field the request will hold, in one constructor: a table
    -- that grows field by field is rehashed.
    local q = {
      key = keys[ki + i - 1],
      alg = num(argv[o]),
      p = params(argv[o + 1], argv[o + 2], argv[o + 3]),
      cost = num(argv[o + 4]),
      force = argv[o + 5] == '1',
      forced = false, old = false, new = false, res = false,
      log = false, drop = 0, at = 0,
    }
    if replay then
      q.cost = 0
    end
    local err
    if q.alg == LOG then
      q.log = load_log(q.key)
      err = q.log.err
      if not err then
        q.drop, q.res, q.at = take_log(q.log, q.p, now, q.cost)
        q.forced = q.force and q.cost > 0
        if q.forced and not q.res.allowed then
          q.res = {allowed = false, remaining = 0, retry = q.res.retry, reset = q.at + q.p.P - now, delay = 0}
        end
      end
    else
      q.old = load_state(q.key)
      err = q.old.err
      if not err then
        q.new, q.res = take(ALGS[q.alg], q.old, q.p, now, q.cost)
        q.forced = q.force and q.cost > 0
        if q.forced and not q.res.allowed then
          q.new = apply(q.alg, q.old, q.p, now, q.cost)
          local after = select(2, ALGS[q.alg](q.new, q.p, now, 0))
          q.res = {allowed = false, remaining = 0, retry = q.res.retry, reset = after.reset, delay = 0}
        end
      end
    end
    if err then
      for _ = 1, g do
        out[#out + 1] = -1
        out[#out + 1] = err
        out[#out + 1] = 0
        out[#out + 1] = 0
        out[#out + 1] = 0
      end
      return
    end
    all = all and (q.res.allowed or q.forced)
    reqs[i] = q
  end
  for i = 1, g do
    local q = reqs[i]
    local key = q.key
    if q.cost > 0 and (all or q.forced) then
      if q.alg == LOG then
        if q.drop > 0 then
          rcall('LTRIM', key, q.drop, -1)
        end
        local n = #q.log
        if n > q.drop and q.log[n][1] == q.at then
          rcall('LSET', key, -1, int(q.at) .. ':' .. int(q.log[n][2] + q.cost))
        else
          rcall('RPUSH', key, int(q.at) .. ':' .. int(q.cost))
        end
        rcall('PEXPIRE', key, ttl_ms(q.res.reset))
      else
        rcall('SET', key, pack('<d<d<d', q.new[1], q.new[2], q.new[3]), 'PX', ttl_ms(q.res.reset))
      end
    elseif not all and q.res.allowed then
      -- Denied group: report the unchanged state of the limits that allowed.
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
end

-- take_all is the entry point: take_all(KEYS, ARGV) as a script, the
-- registered function as a library (see script.go).
local function take_all(keys, argv)
  local now = num(argv[1])
  if now < 0 then
    local t = rcall('TIME')
    now = num(t[1]) * 1000000 + num(t[2])
  end
  local out, ki, ai = {}, 1, 2
  while ai <= #argv do
    local g, hasid = num(argv[ai]), argv[ai + 1] == '1'
    local idkey
    if hasid then
      idkey = keys[ki + g]
    end
    group(keys, argv, ki, ai + 2, g, idkey, now, out)
    ki, ai = ki + g + (hasid and 1 or 0), ai + 2 + NARGS * g
  end
  return out
end
