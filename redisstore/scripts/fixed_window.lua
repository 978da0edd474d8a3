-- Fixed window: the twin of algorithm/fixedwindow.go.
-- State: {start of the current window, its count, unused}.
local function fixed_window(s, p, now, cost)
  local start, count = s[1], s[2]
  local w = floorwindow(now, p.P)
  if w > start then
    start, count = w, 0
  end
  local r = result()
  if count + cost <= p.R then
    r.allowed = true
    count = count + cost
  else
    r.retry = start + p.P - now
  end
  r.remaining = max(p.R - count, 0)
  if count > 0 then
    r.reset = start + p.P - now
  end
  return {start, count, 0}, r
end
