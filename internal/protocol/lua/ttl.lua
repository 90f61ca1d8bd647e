-- ttl.lua: the time left on a lease, if the given owner holds it.
--
-- KEYS[1]  lease: the key that carries the lease, a lock's state (a string,
--          lib_state.lua), a lock hash (owner id -> hold count), or a sorted
--          set of holders (owner id -> lapse time in ms)
-- ARGV[1]  owner: the owner id
-- ARGV[2]  type: "s" for a lock's state, "h" for a lock hash, "z" for a
--          sorted set of holders
--
-- Returns the time left in ms (-1 if the key has no expiry) when ARGV[1]
-- holds the lease; -3 when another owner holds the lock; -2 when nobody does
-- (for "z": the owner's lease lapsed or was given back).
--
-- libraries: lib_common.lua lib_state.lua
if ARGV[2] == 'z' then
  local lapse = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
  local now = now_ms()
  if lapse and lapse > now then
    return lapse - now
  end
  return -2
end
if ARGV[2] == 's' then
  local s = st_read(KEYS[1])
  local now = s and s.u ~= 0 and now_ms() or nil
  if s and s.o == ARGV[1] and st_live(s, now) then
    return st_left(KEYS[1], s, now)
  end
  if st_live(s, now) then
    return -3
  end
  return -2
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return redis.call('PTTL', KEYS[1])
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return -3
end
return -2
