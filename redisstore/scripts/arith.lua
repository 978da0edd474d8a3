-- Exact integer arithmetic on Lua doubles: the twin of algorithm/arith.go.
-- Every value is an integer below 2^53, where doubles are exact.

local TWO53 = 9007199254740992

-- muldiv returns floor(a*b/c) and (a*b) mod c for integers a, b >= 0 and
-- 0 < c < 2^52 whose quotient is below 2^53 (Go: mulDiv). A product past
-- 2^53 is done by binary long multiplication, keeping the remainder below c.
local function muldiv(a, b, c)
  local ab = a * b
  if ab < TWO53 then
    local q = math.floor(ab / c)
    return q, ab - q * c
  end
  local qa = math.floor(a / c) -- a*b/c = qa*b + ra*b/c
  local ra = a - qa * c
  local bit = 1
  while bit * 2 <= b do bit = bit * 2 end
  local rest, q, r = b, 0, 0
  while bit >= 1 do
    q, r = q * 2, r * 2
    if r >= c then q, r = q + 1, r - c end
    if rest >= bit then
      rest = rest - bit
      r = r + ra
      if r >= c then q, r = q + 1, r - c end
    end
    bit = bit / 2
  end
  return qa * b + q, r
end

-- ceildiv returns ceil(a/b) for any integer a and b > 0 (Go: ceilDiv). The
-- quotient of two integers below 2^53 rounds to the right side of any
-- integer, so ceil of the double quotient is exact.
local function ceildiv(a, b)
  return math.ceil(a / b)
end

-- floorwindow returns the start of the epoch-aligned window of length p
-- holding t (Go: floorWindow). Lua's % is floored, as the Go function is.
local function floorwindow(t, p)
  return t - t % p
end

-- newparams is algorithm.NewParams: rate events per period (µs), capacity
-- burst, and the exact fractions Period/Rate and Burst×Period/Rate.
local function newparams(rate, period, burst)
  local p = {R = rate, P = period, B = burst}
  p.tq, p.tr = muldiv(1, period, rate)
  p.bq, p.br = muldiv(burst, period, rate)
  return p
end

local function result()
  return {allowed = false, remaining = 0, retry = 0, reset = 0, delay = 0}
end
