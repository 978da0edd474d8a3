-- Token bucket: the twin of algorithm/tokenbucket.go.
-- State: deficit in whole tokens, time of the last refill, carry.

local function refill_time(need, carry, p)
  local q, r = muldiv(need, p.P, p.R)
  return q + ceildiv(r - carry, p.R)
end

local function token_bucket(deficit, last, carry, p, now, cost)
  if now > last then
    if deficit > 0 then
      local q, r = muldiv(now - last, p.R, p.P)
      r = r + carry
      if r >= p.P then
        q, r = q + 1, r - p.P
      end
      if q >= deficit then
        deficit, carry = 0, 0
      else
        deficit, carry = deficit - q, r
      end
    end
    last = now
  end
  local behind = last - now
  local allowed, retry, reset = false, 0, 0
  if deficit + cost <= p.B then
    allowed = true
    deficit = deficit + cost
  else
    retry = behind + refill_time(deficit + cost - p.B, carry, p)
  end
  if deficit > 0 then
    reset = behind + refill_time(deficit, carry, p)
  end
  return deficit, last, carry, allowed, max(p.B - deficit, 0), retry, reset, 0
end
