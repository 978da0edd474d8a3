-- The standard functions every part uses, as locals: a global lookup is
-- slow in Redis's Lua. They are bound by bind(), not at the top level,
-- because FUNCTION LOAD runs the top level without the standard libraries:
-- as a script, bind() runs first on every call; as a function, once, on
-- the first call after the library is loaded.
local floor, ceil, max, min, abs, frexp, num, fmt
local rcall, rpcall, pack, unpack

local function bind()
  floor, ceil, max, min, abs, frexp = math.floor, math.ceil, math.max, math.min, math.abs, math.frexp
  num, fmt = tonumber, string.format
  rcall, rpcall = redis.call, redis.pcall
  pack, unpack = struct.pack, struct.unpack
end
