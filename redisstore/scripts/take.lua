-- take decides groups of requests, each group all-or-nothing: the twin of a
-- memory store TakeAll. Groups are independent: several callers' batches
-- share one call.
-- keys: one per request, in order, and after a group's requests its
-- idempotency key if it has one.
-- argv: now in µs, or -1 for Redis TIME; the number of limits L; per
-- limit, one string: algorithm code, rate, period (µs) and burst separated
-- by spaces (a calendar's: its code, rate and four window boundaries, see
-- calendar.lua); then per group: its number of requests g, negated when it has
-- an idempotency key, and its deadline in µs on Redis's clock (0 for none:
-- a group that reaches Redis after it is not applied, for its caller has
-- been answered already); then per request: its limit (1 to L) and its
-- cost, negated when forced (Force with cost 0 is no force), or for a
-- refund 'r' COST '@' TAKEN (see refund, below). Few
-- arguments, because each costs Redis and Lua time: a lone request is
-- seven, key included.
-- Returns three values per request (each costs Redis a conversion and the
-- client a parse): remaining when allowed, -1 - remaining when denied;
-- Delay when allowed, RetryAfter when denied (never both); ResetAfter
-- (µs). For every request of a group that failed: the error, 0, 0; for
-- a group past its deadline the error is EXPIRED.

local ALGS = {[1] = fixed_window, [3] = sliding_window, [4] = token_bucket, [5] = leaky_bucket, [6] = gcra, [7] = calendar}
local LOG = 2
local TTL_MARGIN_MS = 1000
local ID_TTL_MS = 60000
local EXPIRED = 'sluice: deadline passed before the call reached Redis; not applied'

-- apply records cost on an O(1) state whether or not it fits (Go: Apply).
local function apply(alg, a, b, c, p, now, cost)
  a, b, c = ALGS[alg](a, b, c, p, now, 0)
  if alg == 1 or alg == 3 or alg == 7 then
    b = b + cost
  elseif alg == 4 then
    a = a + cost
  else
    a, b = tat_add(a, b, cost, p)
  end
  return a, b, c
end

-- take is Take on an O(1) state: with cost 0, a peek that says whether one
-- more would fit.
local function take(f, a, b, c, p, now, cost)
  if cost == 0 then
    local _, _, _, allowed, _, retry, _, delay = f(a, b, c, p, now, 1)
    local na, nb, nc, _, remaining, _, reset = f(a, b, c, p, now, 0)
    return na, nb, nc, allowed, remaining, retry, reset, delay
  end
  return f(a, b, c, p, now, cost)
end

-- decide is take with Force: a forced request that does not fit is
-- recorded anyway, and reported denied with the state it leaves. It
-- returns whether the request is forced, the next state and the Result.
local function decide(alg, a, b, c, p, now, cost, force)
  local f = ALGS[alg]
  local na, nb, nc, allowed, remaining, retry, reset, delay = take(f, a, b, c, p, now, cost)
  local forced = force and cost > 0
  if forced and not allowed then
    na, nb, nc = apply(alg, a, b, c, p, now, cost)
    reset = select(7, f(na, nb, nc, p, now, 0))
    remaining, delay = 0, 0
  end
  return forced, na, nb, nc, allowed, remaining, retry, reset, delay
end

-- load_state returns the three numbers of an O(1) state, or nil and an
-- error.
local function load_state(key)
  local v = rpcall('GET', key)
  if type(v) == 'table' and v.err then
    return nil, v.err
  end
  if not v then
    return 0, 0, 0
  end
  -- The state is three little-endian doubles: exact for integers below
  -- 2^53, and cheaper to pack and unpack than text.
  if #v ~= 24 then
    return nil, 'sluice: key ' .. key .. ' holds a value sluice did not write'
  end
  return unpack('<d<d<d', v)
end

local function ttl_ms(reset)
  return ceil(reset / 1000) + TTL_MARGIN_MS
end

-- params returns the params of a limit given as its argument string, with
-- its algorithm code as alg, or nil for a string that is not one. They are
-- cached by that string: as a function, from one call to the next, up to
-- MAX_CACHED limits, so that a call allocates nothing for its limits.
local MAX_CACHED = 1000
local cache, cached = {}, 0
local function params(id)
  local p = cache[id]
  if not p then
    local alg, rate, period, burst = string.match(id, '^(%d+) (%d+) (%d+) (%d+)$')
    if alg then
      p = newparams(num(rate), num(period), num(burst))
    else
      local b1, b2, b3, b4
      rate, b1, b2, b3, b4 = string.match(id, '^7 (%d+) (%d+) (%d+) (%d+) (%d+)$')
      if not rate then
        return nil
      end
      alg = 7
      p = calendar_params(num(rate), {num(b1), num(b2), num(b3), num(b4)})
    end
    if cached >= MAX_CACHED then
      cache, cached = {}, 0
    end
    p.alg = num(alg)
    cache[id], cached = p, cached + 1
  end
  return p
end

-- put appends a Result to out, which holds n values, as three values (see
-- the top), and returns the new count.
local function put(out, n, allowed, remaining, retry, reset, delay)
  if allowed then
    out[n + 1], out[n + 2] = remaining, delay
  else
    out[n + 1], out[n + 2] = -1 - remaining, retry
  end
  out[n + 3] = reset
  return n + 3
end

-- fail appends the error of a group of g requests.
local function fail(out, n, g, err)
  for _ = 1, g do
    out[n + 1], out[n + 2], out[n + 3] = err, 0, 0
    n = n + 3
  end
  return n
end

-- one decides a group of one request on an O(1) state, without an
-- idempotency key: most calls. It is group without the tables that a
-- group must keep between deciding and writing. cost is negated when
-- forced. It returns the Result's five fields, or nil and an error.
local function one(key, p, cost, now)
  local a, b, c = load_state(key)
  if not a then
    return nil, b
  end
  local forced, na, nb, nc, allowed, remaining, retry, reset, delay = decide(p.alg, a, b, c, p, now, abs(cost), cost < 0)
  if cost ~= 0 and (allowed or forced) then
    rcall('SET', key, pack('<d<d<d', na, nb, nc), 'PX', ttl_ms(reset))
  end
  return allowed, remaining, retry, reset, delay
end

-- Refunds: the twin of algorithm/refund.go. A refund's cost argument is
-- 'r' COST '@' TAKEN: cost given back, as taken at TAKEN (µs). A refund
-- is a group of its own, of one request with no idempotency key.

local function is_refund(arg)
  return string.byte(arg, 1) == 114 -- 'r'
end

-- token_refund is algorithm.tokenRefund: cost less what p refills in
-- elapsed µs, exactly, given back to the bucket (deficit, last, carry).
local function token_refund(a, b, c, p, elapsed, cost)
  local whole, frac = cost, 0
  if elapsed > 0 then
    local q, r = muldiv(cost, p.P, p.R)
    if elapsed > q or (elapsed == q and r == 0) then
      return a, b, c
    end
    local n, m = muldiv(elapsed, p.R, p.P)
    whole = cost - n
    if m > 0 then
      whole, frac = whole - 1, p.P - m
    end
  end
  c = c + frac
  if c >= p.P then
    c, whole = c - p.P, whole + 1
  end
  a = a - whole
  if a <= 0 then
    a, c = 0, 0
  end
  return a, b, c
end

-- refund_state is algorithm.Refund on an O(1) state.
local function refund_state(alg, a, b, c, p, now, taken, cost)
  if alg == 1 then
    if floorwindow(taken, p.P) == a then
      b = b - min(cost, b)
    end
  elseif alg == 7 then
    if a <= taken and taken < c then
      b = b - min(cost, b)
    end
  elseif alg == 3 then
    local w = floorwindow(taken, p.P)
    if w == a then
      b = b - min(cost, b)
    elseif w == a - p.P then
      c = c - min(cost, c)
    end
  elseif alg == 4 then
    a, b, c = token_refund(a, b, c, p, now - taken, cost)
  else
    local iq, ir = muldiv(cost, p.P, p.R)
    local elapsed = max(now - taken, 0)
    if elapsed > iq or (elapsed == iq and ir == 0) then
      return a, b, c
    end
    local tq, tr = tat_at(a, b, c, p, now)
    tq, tr = tq - (iq - elapsed), tr - ir
    if tr < 0 then
      tq, tr = tq - 1, tr + p.R
    end
    if tq < now then
      tq, tr = now, 0
    end
    a, b, c = tq, tr, p.R
  end
  return a, b, c
end

-- refund_log is algorithm.RefundLog on key's log: the log is rewritten
-- whole (a refund is rare beside takes), keeping its expiry. It returns
-- nil, or an error.
local function refund_log(key, p, now, taken, cost)
  if taken <= now - p.P then
    return nil
  end
  local log = open_log(key)
  if log.err then
    return log.err
  end
  if log.n == 0 or log.newest < taken then
    return nil
  end
  local kept, sum = {}, 0
  for i = 1, log.n do
    local e = log_entry(log, i)
    if log.err then
      return log.err
    end
    local t, c = e[1], e[2]
    if t >= taken and cost > 0 then
      local give = min(cost, c)
      c, cost = c - give, cost - give
    end
    if c > 0 then
      kept[#kept + 1] = {t, c}
      sum = sum + c
    end
  end
  local ttl = rcall('PTTL', key)
  rcall('DEL', key)
  if #kept == 0 then
    return nil
  end
  local last = kept[#kept]
  rcall('RPUSH', key, 's:' .. fmt('%.0f', sum) .. ':' .. #kept .. ':' .. fmt('%.0f', last[1]) .. ':' .. fmt('%.0f', last[2]))
  for _, e in ipairs(kept) do
    rcall('RPUSH', key, fmt('%.0f', e[1]) .. ':' .. fmt('%.0f', e[2]))
  end
  if ttl > 0 then
    rcall('PEXPIRE', key, ttl)
  end
  return nil
end

-- refund gives back what arg says on key under p at now, and returns the
-- Result's five fields of the state after it (allowed), or nil and an
-- error.
local function refund(key, p, arg, now)
  local cost, taken = string.match(arg, '^r(%d+)@(-?%d+)$')
  if not cost then
    return nil, 'sluice: malformed refund argument ' .. arg
  end
  cost, taken = num(cost), num(taken)
  if p.alg == LOG then
    local err = refund_log(key, p, now, taken, cost)
    if err then
      return nil, err
    end
    local _, _, _, remaining, _, reset = sliding_log(open_log(key), p, now, 0)
    return true, remaining, 0, reset, 0
  end
  local a, b, c = load_state(key)
  if not a then
    return nil, b
  end
  local na, nb, nc = refund_state(p.alg, a, b, c, p, now, taken, cost)
  local _, _, _, _, remaining, _, reset = ALGS[p.alg](na, nb, nc, p, now, 0)
  if a ~= 0 or b ~= 0 or c ~= 0 then
    rcall('SET', key, pack('<d<d<d', na, nb, nc), 'PX', ttl_ms(reset))
  end
  return true, remaining, 0, reset, 0
end

-- group decides the g requests starting at keys[ki] and argv[ai], of
-- limits, appending five values per request to out, which holds n, and
-- returns the new count. idkey, if set, makes it idempotent.
local function group(keys, argv, limits, ki, ai, g, idkey, now, out, n)
  -- A group seen before (a retry after a lost reply) is only reported.
  local replay = idkey and not rcall('SET', idkey, '1', 'NX', 'PX', ID_TTL_MS)
  local reqs, all = {}, true
  for i = 1, g do
    local o = ai + 2 * (i - 1)
    local p, cost = limits[num(argv[o])], num(argv[o + 1])
    -- Every field the request will hold, in one constructor: a table
    -- that grows field by field is rehashed.
    local q = {
      key = keys[ki + i - 1],
      alg = p.alg,
      p = p,
      cost = abs(cost),
      forced = false, log = false, drop = 0, at = 0,
      a = 0, b = 0, c = 0, na = 0, nb = 0, nc = 0,
      allowed = false, remaining = 0, retry = 0, reset = 0, delay = 0,
    }
    if replay then
      q.cost = 0
    end
    local force = cost < 0
    if q.alg == LOG then
      local log = open_log(q.key)
      if log.err then
        return fail(out, n, g, log.err)
      end
      q.log = log
      q.drop, q.at, q.allowed, q.remaining, q.retry, q.reset, q.delay = take_log(log, q.p, now, q.cost)
      if log.err then
        return fail(out, n, g, log.err)
      end
      q.forced = force and q.cost > 0
      if q.forced and not q.allowed then
        q.remaining, q.reset, q.delay = 0, q.at + q.p.P - now, 0
      end
    else
      local a, b, c = load_state(q.key)
      if not a then
        return fail(out, n, g, b)
      end
      q.a, q.b, q.c = a, b, c
      q.forced, q.na, q.nb, q.nc, q.allowed, q.remaining, q.retry, q.reset, q.delay =
        decide(q.alg, a, b, c, q.p, now, q.cost, force)
    end
    all = all and (q.allowed or q.forced)
    reqs[i] = q
  end
  for i = 1, g do
    local q = reqs[i]
    local key = q.key
    if q.cost > 0 and (all or q.forced) then
      if q.alg == LOG then
        write_log(q.log, q.drop, q.at, q.cost, ttl_ms(q.reset))
      else
        rcall('SET', key, pack('<d<d<d', q.na, q.nb, q.nc), 'PX', ttl_ms(q.reset))
      end
    elseif not all and q.allowed then
      -- Denied group: report the unchanged state of the limits that allowed.
      if q.alg == LOG then
        q.drop, q.at, q.allowed, q.remaining, q.retry, q.reset, q.delay = sliding_log(q.log, q.p, now, 0)
      else
        local _
        _, _, _, q.allowed, q.remaining, q.retry, q.reset, q.delay = ALGS[q.alg](q.a, q.b, q.c, q.p, now, 0)
      end
    end
    n = put(out, n, q.allowed, q.remaining, q.retry, q.reset, q.delay)
  end
  return n
end

local limits, nlimits = {}, 0

-- take_all is the entry point: take_all(KEYS, ARGV) as a script, the
-- registered function as a library (see script.go).
local function take_all(keys, argv)
  local now = num(argv[1])
  if now < 0 then
    local t = rcall('TIME')
    now = num(t[1]) * 1000000 + num(t[2])
  end
  -- Reused from call to call, as a function: only limits[1..L] are read.
  local nl = num(argv[2])
  for i = 1, nl do
    local p = params(argv[2 + i])
    if not p then
      return redis.error_reply('sluice: malformed limit argument ' .. argv[2 + i])
    end
    limits[i] = p
  end
  for i = nl + 1, nlimits do
    limits[i] = nil -- an index past L is an error, not another call's limit
  end
  nlimits = nl
  -- A call of one request (a caller alone): its reply in one constructor.
  if nl == 1 and argv[4] == '1' and argv[8] == nil and limits[1].alg ~= LOG and not is_refund(argv[7]) then
    local dl = num(argv[5])
    if dl > 0 and now > dl then
      return {EXPIRED, 0, 0}
    end
    local allowed, remaining, retry, reset, delay = one(keys[1], limits[1], num(argv[7]), now)
    if allowed == nil then
      return {remaining, 0, 0}
    end
    if allowed then
      return {remaining, delay, reset}
    end
    return {-1 - remaining, retry, reset}
  end
  local ai = 3 + nl
  local out, n, ki = {}, 0, 1
  while ai <= #argv do
    local g = num(argv[ai])
    local hasid = g < 0
    if hasid then
      g = -g
    end
    local dl = num(argv[ai + 1])
    local p = limits[num(argv[ai + 2])]
    if dl > 0 and now > dl then
      n = fail(out, n, g, EXPIRED)
    elseif g == 1 and not hasid and is_refund(argv[ai + 3]) then
      local allowed, remaining, retry, reset, delay = refund(keys[ki], p, argv[ai + 3], now)
      if allowed == nil then
        n = fail(out, n, 1, remaining)
      else
        n = put(out, n, allowed, remaining, retry, reset, delay)
      end
    elseif g == 1 and not hasid and p.alg ~= LOG then
      local allowed, remaining, retry, reset, delay = one(keys[ki], p, num(argv[ai + 3]), now)
      if allowed == nil then
        n = fail(out, n, 1, remaining)
      else
        n = put(out, n, allowed, remaining, retry, reset, delay)
      end
    else
      local idkey
      if hasid then
        idkey = keys[ki + g]
      end
      n = group(keys, argv, limits, ki, ai + 2, g, idkey, now, out, n)
    end
    ki, ai = ki + g + (hasid and 1 or 0), ai + 2 + 2 * g
  end
  return out
end
