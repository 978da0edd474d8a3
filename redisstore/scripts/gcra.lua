-- GCRA: the twin of algorithm/gcra.go.
-- State: TAT in whole microseconds, its remainder in 1/Rate µs, the Rate
-- they are kept at (0: the limit's own).

local MAX_DEBT = 2 ^ 50

-- tat_at is max(TAT, now) at p's rate, a TAT kept at rate c converted to
-- the same used capacity (Go: tatAt).
local function tat_at(tq, tr, c, p, now)
  if tq < now then
    return now, 0
  end
  if c == 0 or c == p.R then
    return tq, tr
  end
  if (tq - now) * c / p.R >= 2 * MAX_DEBT then
    return now + MAX_DEBT, 0 -- muldiv's quotient must stay below 2^53
  end
  local q, r = muldiv(tq - now, c, p.R)
  if q >= MAX_DEBT then
    return now + MAX_DEBT, 0
  end
  r = r + tr
  local q2 = floor(r / p.R)
  return now + q + q2, r - q2 * p.R
end

local function tat_add(tq, tr, cost, p)
  local iq, ir = p.tq, p.tr
  if cost ~= 1 then
    iq, ir = muldiv(cost, p.P, p.R)
  end
  tq, tr = tq + iq, tr + ir
  if tr >= p.R then
    tq, tr = tq + 1, tr - p.R
  end
  return tq, tr
end

local function fits_burst(nq, nr, now, p)
  local d = nq - now
  return d < p.bq or (d == p.bq and nr <= p.br)
end

local function over_burst(nq, nr, now, p)
  return nq - now - p.bq + ceildiv(nr - p.br, p.R)
end

local function tat_remaining(tq, tr, now, p)
  local mq, mr = muldiv(tq - now, p.R, p.P)
  local used = mq + ceildiv(mr + tr, p.P)
  return max(p.B - used, 0)
end

local function tat_delay(tq, tr, now)
  local d = tq - now
  if tr > 0 then
    d = d + 1
  end
  return max(d, 0)
end

local function gcra(tq, tr, c, p, now, cost)
  tq, tr = tat_at(tq, tr, c, p, now)
  local nq, nr = tat_add(tq, tr, cost, p)
  local allowed, retry = fits_burst(nq, nr, now, p), 0
  if allowed then
    tq, tr = nq, nr
  else
    retry = over_burst(nq, nr, now, p)
  end
  return tq, tr, p.R, allowed, tat_remaining(tq, tr, now, p), retry, tat_delay(tq, tr, now), 0
end
