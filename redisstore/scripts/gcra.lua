-- GCRA: the twin of algorithm/gcra.go.
-- State: {TAT in whole microseconds, its remainder in 1/Rate µs, unused}.

local function tat_at(s, now)
  if s[1] < now then
    return now, 0
  end
  return s[1], s[2]
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

local function gcra(s, p, now, cost)
  local tq, tr = tat_at(s, now)
  local nq, nr = tat_add(tq, tr, cost, p)
  local res = result()
  res.allowed = fits_burst(nq, nr, now, p)
  if res.allowed then
    tq, tr = nq, nr
  else
    res.retry = over_burst(nq, nr, now, p)
  end
  res.remaining = tat_remaining(tq, tr, now, p)
  res.reset = tat_delay(tq, tr, now)
  return {tq, tr, 0}, res
end
