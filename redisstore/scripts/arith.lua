-- Exact integer arithmetic on Lua doubles: the twin of algorithm/arith.go.
-- Every value is an integer below 2^53, where doubles are exact.

local TWO53 = 9007199254740992

-- muldiv returns floor(a*b/c) and (a*b) mod c for integers a, b >= 0 and
-- 0 < c < 2^52 whose quotient is below 2^53 (Go: mulDiv). A product past
-- 2^53 is done by long multiplication: b in base-2^s digits, s as large as
-- keeps every partial (r*2^s + ra*digit, with r, ra < c) below 2^53.
local function muldiv(a, b, c)
  local ab = a * b
  if ab < TWO53 then
    local q = floor(ab / c)
    return q, ab - q * c
  end
  local qa = floor(a / c) -- a*b/c = qa*b + ra*b/c
  local ra = a - qa * c
  local _, e = frexp(c) -- c < 2^e
  local s = max(52 - e, 1)
  if s == 1 and e == 52 then
    -- c >= 2^51: one bit at a time, reducing between the steps.
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
  local base = 2 ^ s
  local pow = 1
  while pow * base <= b do pow = pow * base end
  local q, r = 0, 0
  while pow >= 1 do
    local digit = floor(b / pow) % base
    local t = r * base + ra * digit
    local qq = floor(t / c)
    q, r = q * base + qq, t - qq * c
    pow = pow / base
  end
  return qa * b + q, r
end

-- ceildiv returns ceil(a/b) for any integer a and b > 0 (Go: ceilDiv). The
-- quotient of two integers below 2^53 rounds to the right side of any
-- integer, so ceil of the double quotient is exact.
local function ceildiv(a, b)
  return ceil(a / b)
end

-- floorwindow returns the start of the epoch-aligned window of length p
-- holding t (Go: floorWindow). Lua's % is floored, as the Go function is.
local function floorwindow(t, p)
  return t - t % p
end

-- newparams is algorithm.NewParams: rate events per period (µs), capacity
-- burst, and the exact fractions Period/Rate and Burst×Period/Rate.
local function newparams(rate, period, burst)
  local tq, tr = muldiv(1, period, rate)
  local bq, br = muldiv(burst, period, rate)
  -- One constructor: a table that grows field by field is rehashed.
  return {R = rate, P = period, B = burst, tq = tq, tr = tr, bq = bq, br = br}
end
