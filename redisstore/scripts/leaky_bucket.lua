-- Leaky bucket: the twin of algorithm/leakybucket.go, on GCRA's helpers.
-- State: time the queue drains, whole µs, its remainder, the Rate they
-- are kept at, as GCRA's.
local function leaky_bucket(sq, sr, c, p, now, cost)
  -- The queue admits what GCRA admits; a request leaves when the queue
  -- ahead of it has drained.
  local dq, dr = tat_at(sq, sr, c, p, now)
  local tq, tr, _, allowed, remaining, retry, reset = gcra(sq, sr, c, p, now, cost)
  local delay = 0
  if allowed and cost > 0 then
    delay = tat_delay(dq, dr, now)
  end
  return tq, tr, p.R, allowed, remaining, retry, reset, delay
end
