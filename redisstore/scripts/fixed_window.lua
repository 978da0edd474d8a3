-- counted decides cost on a window of count ending at stop, with rate: the
-- new count, and the Result's allowed, remaining, retry and reset. The
-- fixed window and the calendar share it.
local function counted(count, stop, rate, now, cost)
  local allowed, retry, reset = false, 0, 0
  if count + cost <= rate then
    allowed = true
    count = count + cost
  else
    retry = stop - now
  end
  if count > 0 then
    reset = stop - now
  end
  return count, allowed, max(rate - count, 0), retry, reset
end

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
  local allowed, remaining, retry, reset
  count, allowed, remaining, retry, reset = counted(count, start + p.P, p.R, now, cost)
  return start, count, 0, allowed, remaining, retry, reset, 0
end
