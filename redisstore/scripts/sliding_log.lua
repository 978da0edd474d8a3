-- Sliding log: the twin of algorithm/slidinglog.go.
-- The log is a list of {time, cost}, oldest first.

local function log_retry(log, drop, excess, p, now)
  local freed = 0
  for i = drop + 1, #log do
    freed = freed + log[i][2]
    if freed >= excess then
      return log[i][1] + p.P - now
    end
  end
  return p.P
end

local function sliding_log(log, p, now, cost)
  local n = #log
  local at = now
  if n > 0 and at < log[n][1] then
    at = log[n][1]
  end
  local drop = 0
  while drop < n and log[drop + 1][1] <= at - p.P do
    drop = drop + 1
  end
  local sum = 0
  for i = drop + 1, n do
    sum = sum + log[i][2]
  end
  local newest = -1
  if drop < n then
    newest = log[n][1]
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
