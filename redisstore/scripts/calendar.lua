-- Calendar: the twin of algorithm/calendar.go. Lua has no time zones, so
-- the caller sends the calendar around its estimate of now: the limit's
-- argument carries four boundaries b1 < b2 < b3 < b4 (µs), the windows
-- [b1, b2), [b2, b3) and [b3, b4), and p.window picks the one holding
-- Redis's own now.
-- State: start of the current window, its count, its end.
local function calendar(start, count, stop, p, now, cost)
  if now >= stop then
    start, stop = p.window(now)
    count = 0
  end
  local allowed, remaining, retry, reset
  count, allowed, remaining, retry, reset = counted(count, stop, p.R, now, cost)
  return start, count, stop, allowed, remaining, retry, reset, 0
end

-- calendar_params returns the params of a calendar limit of rate events
-- per window, b the four boundaries; or nil.
local function calendar_params(rate, b)
  local p = {R = rate, B = rate}
  p.window = function(now)
    for i = 1, 3 do
      if now < b[i + 1] then
        return b[i], b[i + 1]
      end
    end
    return b[3], b[4] -- past them all: counted in the last, until the caller's calendar catches up
  end
  return p
end
