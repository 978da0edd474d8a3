-- Leaky bucket: the twin of algorithm/leakybucket.go, on GCRA's helpers.
-- State: {time the queue drains, whole µs, its remainder, unused}.
local function leaky_bucket(s, p, now, cost)
  -- The queue admits what GCRA admits; a request leaves when the queue
  -- ahead of it has drained.
  local dq, dr = tat_at(s, now)
  local next, res = gcra(s, p, now, cost)
  if res.allowed and cost > 0 then
    res.delay = tat_delay(dq, dr, now)
  end
  return next, res
end
