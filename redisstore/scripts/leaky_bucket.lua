-- Leaky bucket: the twin of algorithm/leakybucket.go, on GCRA's helpers.
-- State: time the queue drains, whole µs, its remainder, unused.
local function leaky_bucket(sq, sr, _, p, now, cost)
  -- The queue admits what GCRA admits; a request leaves when the queue
  -- ahead of it has drained.
  local dq, dr = tat_at(sq, sr, now)
  local tq, tr, _, allowed, remaining, retry, reset = gcra(sq, sr, 0, p, now, cost)
  local delay = 0
  if allowed and cost > 0 then
    delay = tat_delay(dq, dr, now)
  end
  return tq, tr, 0, allowed, remaining, retry, reset, delay
end
