-- extend.lua: renew the leases of many locks in one call.
--
-- KEYS[i]     the key that carries lease i: a lock hash (owner id -> hold
--             count, with a PX expiry), or a sorted set of holders (owner id ->
--             server time in ms at which that holder's lease lapses; if the
--             set has an expiry, as an RWMutex's readers do, it is kept at
--             least TTL away, so that it outlives every lease in it)
-- ARGV[3i-2]  "h" for a lock hash, "z" for a sorted set of holders
-- ARGV[3i-1]  owner id expected to hold lease i
-- ARGV[3i]    new TTL of lease i in milliseconds
--
-- Returns one code per lease, in KEYS order:
--    1  extended: the owner holds it, and it now lapses TTL from now
--    0  not extended: another owner holds it (or a key of another type is there)
--   -1  not extended: nobody holds it (for "z": the owner's lease lapsed)
--
-- A key of a foreign type is reported, not raised, so that it cannot make the
-- renewal of the other keys in the batch fail.
local res = {}
local now
for i, key in ipairs(KEYS) do
  local kind, owner, ttl = ARGV[3 * i - 2], ARGV[3 * i - 1], tonumber(ARGV[3 * i])
  local t = redis.call('TYPE', key).ok
  if t == 'none' then
    res[i] = -1
  elseif kind == 'h' then
    if t == 'hash' and redis.call('HEXISTS', key, owner) == 1 then
      redis.call('PEXPIRE', key, ttl)
      res[i] = 1
    else
      res[i] = 0
    end
  elseif t ~= 'zset' then
    res[i] = 0
  else
    if not now then
      now = now_ms()
    end
    local lapse = tonumber(redis.call('ZSCORE', key, owner))
    if lapse and lapse > now then
      redis.call('ZADD', key, 'XX', now + ttl, owner)
      local left = redis.call('PTTL', key)
      if left >= 0 and left < ttl then
        redis.call('PEXPIRE', key, ttl)
      end
      res[i] = 1
    else
      res[i] = -1
    end
  end
end
return res
