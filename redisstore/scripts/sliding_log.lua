-- Sliding log: the twin of algorithm/slidinglog.go.
--
-- On Redis the log is a list: a header 's:SUM:N:T:C' (the sum of the
-- costs of its N entries, and the newest entry's time and cost), then an
-- entry 'TIME:COST' per instant, oldest first. A check reads the header,
-- and entries from the oldest only as far as it needs them: those that
-- expired, and for a denial those that must expire before it fits. Each
-- entry expires once, so a check is O(1) amortised however long the log,
-- where reading it whole is O(n). A list without the header (as sluice
-- wrote logs before it) is read whole once and rewritten with one on its
-- next write.

local LOG_CHUNK = 2 -- the first read; each read after doubles what was read

local function parse_entry(v)
  local t, c = string.match(v, '^(-?%d+):(%d+)$')
  if not t then
    return nil
  end
  return {num(t), num(c)}
end

local function log_foreign(key)
  return redis.error_reply('sluice: key ' .. key .. ' holds a list sluice did not write')
end

-- open_log returns key's log: n entries of costs summing to sum, the
-- newest at newest, those read so far in got (got[i] is entry i). On a
-- key that is not a log it returns a table with err.
local function open_log(key)
  local log = {key = key, n = 0, sum = 0, newest = 0, newest_cost = 0, got = {}, legacy = false, err = false}
  local head = rpcall('LINDEX', key, 0)
  if type(head) == 'table' and head.err then
    return head
  end
  if not head then
    return log
  end
  local sum, n, t, c = string.match(head, '^s:(%d+):(%d+):(-?%d+):(%d+)$')
  if sum then
    log.sum, log.n, log.newest, log.newest_cost = num(sum), num(n), num(t), num(c)
    return log
  end
  local raw = rcall('LRANGE', key, 0, -1)
  for i, v in ipairs(raw) do
    local e = parse_entry(v)
    if not e then
      return log_foreign(key)
    end
    log.got[i], log.sum = e, log.sum + e[2]
  end
  log.n, log.legacy = #raw, true
  log.newest, log.newest_cost = log.got[#raw][1], log.got[#raw][2]
  return log
end

-- FOREIGN stands for an entry that could not be read: never expired, it
-- stops every walk, and the log's err says why.
local FOREIGN = {1 / 0, 0}

-- log_entry returns entry i (1 ≤ i ≤ n), reading from Redis the entries
-- not read yet, in chunks that grow with what was read.
local function log_entry(log, i)
  local got = log.got
  if i > #got then
    local from = #got + 1
    local raw = rcall('LRANGE', log.key, from, from + max(LOG_CHUNK, #got) - 1)
    for j, v in ipairs(raw) do
      local e = parse_entry(v)
      if not e then
        log.err = log_foreign(log.key)
        return FOREIGN
      end
      got[from + j - 1] = e
    end
    if i > #got then
      log.err = log_foreign(log.key)
      return FOREIGN
    end
  end
  return got[i]
end

local function log_retry(log, drop, excess, p, now)
  local freed = 0
  for i = drop + 1, log.n do
    local e = log_entry(log, i)
    freed = freed + e[2]
    if freed >= excess then
      return e[1] + p.P - now
    end
  end
  return p.P
end

local function sliding_log(log, p, now, cost)
  local n = log.n
  local at = now
  if n > 0 and at < log.newest then
    at = log.newest
  end
  local drop, sum = 0, log.sum
  while drop < n do
    local e = log_entry(log, drop + 1)
    if e[1] > at - p.P then
      break
    end
    sum = sum - e[2]
    drop = drop + 1
  end
  local newest = -1
  if drop < n then
    newest = log.newest
  end
  local allowed, retry, reset = false, 0, 0
  if sum + cost <= p.R then
    allowed = true
    sum = sum + cost
    if cost > 0 then
      newest = at
    end
  else
    retry = log_retry(log, drop, sum + cost - p.R, p, now)
  end
  if newest >= 0 then
    reset = newest + p.P - now
  end
  -- How many entries expired, the time the request is logged at, and the
  -- Result's five fields.
  return drop, at, allowed, max(p.R - sum, 0), retry, reset, 0
end

-- take_log is TakeLog: peek semantics for cost 0.
local function take_log(log, p, now, cost)
  if cost == 0 then
    local _, _, allowed, _, retry = sliding_log(log, p, now, 1)
    local drop, at, _, remaining, _, reset = sliding_log(log, p, now, 0)
    return drop, at, allowed, remaining, retry, reset, 0
  end
  return sliding_log(log, p, now, cost)
end

-- write_log drops log's first drop entries, records cost at at, and keeps
-- the key until ttl_ms.
local function write_log(log, drop, at, cost, ttl)
  local key, got = log.key, log.got
  local sum = log.sum + cost
  for i = 1, drop do
    sum = sum - got[i][2]
  end
  local merge = log.n > drop and log.newest == at -- one instant, one entry
  local n, newest_cost = log.n - drop + 1, cost
  if merge then
    n, newest_cost = n - 1, log.newest_cost + cost
  end
  local header = 's:' .. fmt('%.0f', sum) .. ':' .. n .. ':' .. fmt('%.0f', at) .. ':' .. fmt('%.0f', newest_cost)
  local entry = fmt('%.0f', at) .. ':' .. fmt('%.0f', newest_cost)
  if log.legacy then
    -- Rewrite with the header: what is kept, then the new entry.
    rcall('DEL', key)
    rcall('RPUSH', key, header)
    for i = drop + 1, log.n - (merge and 1 or 0) do
      rcall('RPUSH', key, fmt('%.0f', got[i][1]) .. ':' .. fmt('%.0f', got[i][2]))
    end
    rcall('RPUSH', key, entry)
  else
    if drop > 0 then
      -- The header and the expired entries go; an emptied list is deleted,
      -- and the header's LPUSH makes it again.
      rcall('LTRIM', key, drop + 1, -1)
      rcall('LPUSH', key, header)
    elseif log.n > 0 then
      rcall('LSET', key, 0, header)
    else
      rcall('RPUSH', key, header)
    end
    if merge then
      rcall('LSET', key, -1, entry)
    else
      rcall('RPUSH', key, entry)
    end
  end
  rcall('PEXPIRE', key, ttl)
end
