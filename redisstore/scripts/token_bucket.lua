-- Token bucket: the twin of algorithm/tokenbucket.go.
-- State: {deficit in whole tokens, time of the last refill, carry}.

local function refill_time(need, carry, p)
  local q, r = muldiv(need, p.P, p.R)
  return q + ceildiv(r - carry, p.R)
end

local function token_bucket(s, p, now, cost)
  local deficit, last, carry = s[1], s[2], s[3]
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
  local res = result()
  if deficit + cost <= p.B then
    res.allowed = true
    deficit = deficit + cost
  else
    res.retry = behind + refill_time(deficit + cost - p.B, carry, p)
  end
  res.remaining = max(p.B - deficit, 0)
  if deficit > 0 then
    res.reset = behind + refill_time(deficit, carry, p)
  end
  return {deficit, last, carry}, res
end
