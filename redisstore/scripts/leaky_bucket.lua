-- Leaky bucket: the twin of algorithm/leakybucket.go, on GCRA's helpers.
-- State: {time the queue drains, whole µs, its remainder, unused}.
local function leaky_bucket(s, p, now, cost)
  local dq, dr = tat_at(s, now)
  local nq, nr = tat_add(dq, dr, cost, p)
  local res = result()
  res.allowed = fits_burst(nq, nr, now, p)
  if res.allowed then
    if cost > 0 then
      res.delay = tat_delay(dq, dr, now)
    end
    dq, dr = nq, nr
  else
    res.retry = over_burst(nq, nr, now, p)
  end
  res.remaining = tat_remaining(dq, dr, now, p)
  res.reset = tat_delay(dq, dr, now)
  return {dq, dr, 0}, res
end
