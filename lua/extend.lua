-- extend.lua: renew the leases of many locks in one call.
--
-- KEYS[i]     lock hash i: owner id -> hold count
-- ARGV[2i-1]  owner id expected to hold KEYS[i]
-- ARGV[2i]    new TTL of KEYS[i] in milliseconds
--
-- Returns one code per key, in KEYS order:
--    1  extended: the owner holds it and its expiry is TTL from now
--    0  not extended: another owner holds it (or a key of another type is there)
--   -1  not extended: nobody holds it
--
-- A key of a foreign type is reported, not raised, so that it cannot make the
-- renewal of the other keys in the batch fail.
local res = {}
for i, key in ipairs(KEYS) do
  local t = redis.call('TYPE', key).ok
  if t == 'none' then
    res[i] = -1
  elseif t == 'hash' and redis.call('HEXISTS', key, ARGV[2 * i - 1]) == 1 then
    redis.call('PEXPIRE', key, ARGV[2 * i])
    res[i] = 1
  else
    res[i] = 0
  end
end
return res
