-- Fixed window: the twin of algorithm/fixedwindow.go.
-- State: start of the current window, its count, unused. Like every O(1)
-- algorithm here it takes the state's three numbers and returns the next
-- three and the Result's five fields (allowed, remaining, retry, reset,
-- delay) as values, not tables: a table per decision is most of a
-- decision's cost in Redis's Lua.
local function fixed_window(start, count, _, p, now, cost)
  local w = floorwindow(now, p.P)
  if w > start then
    start, count = w, 0
  end
  local allowed, retry, reset = false, 0, 0
  if count + cost <= p.R then
    allowed = true
    count = count + cost
  else
    retry = start + p.P - now
  end
  if count > 0 then
    reset = start + p.P - now
  end
  return start, count, 0, allowed, max(p.R - count, 0), retry, reset, 0
end
