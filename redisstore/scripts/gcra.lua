-- GCRA: the twin of algorithm/gcra.go.
-- State: TAT in whole microseconds, its remainder in 1/Rate µs, unused.

local function tat_at(tq, tr, now)
  if tq < now then
    return now, 0
  end
  return tq, tr
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

local function gcra(tq, tr, _, p, now, cost)
  tq, tr = tat_at(tq, tr, now)
  local nq, nr = tat_add(tq, tr, cost, p)
  local allowed, retry = fits_burst(nq, nr, now, p), 0
  if allowed then
    tq, tr = nq, nr
  else
    retry = over_burst(nq, nr, now, p)
  end
  return tq, tr, 0, allowed, tat_remaining(tq, tr, now, p), retry, tat_delay(tq, tr, now), 0
end
