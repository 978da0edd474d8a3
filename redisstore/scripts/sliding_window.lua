-- Sliding window counter: the twin of algorithm/slidingwindow.go.
-- State: start of the current window, its count, the previous count.

-- prevfits reports whether prev * left <= k * P.
local function prevfits(prev, left, P, k)
  local q, r = muldiv(prev, left, P)
  return q < k or (q == k and r == 0)
end

local function sliding_retry(prev, curr, cost, p, start, now)
  local P = p.P
  local k = p.R - curr - cost
  if k >= 0 then
    local kq = muldiv(k, P, prev)
    return start + P - kq - now
  end
  local kq = muldiv(p.R - cost, P, curr)
  return start + P - now + max(P - kq, 0)
end

local function sliding_window(start, curr, prev, p, now, cost)
  local P = p.P
  local w = floorwindow(now, P)
  if w == start + P then
    start, prev, curr = w, curr, 0
  elseif w > start then
    start, prev, curr = w, 0, 0
  end
  local e = max(now - start, 0)
  local allowed, retry, reset = false, 0, 0
  local k = p.R - curr - cost
  if k >= 0 and prevfits(prev, P - e, P, k) then
    allowed = true
    curr = curr + cost
  else
    retry = sliding_retry(prev, curr, cost, p, start, now)
  end
  local wq, wr = muldiv(prev, P - e, P)
  if wr > 0 then
    wq = wq + 1
  end
  if curr > 0 then
    reset = start + 2 * P - now
  elseif prev > 0 then
    reset = start + P - now
  end
  return start, curr, prev, allowed, max(p.R - curr - wq, 0), retry, reset, 0
end
