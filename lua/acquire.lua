-- acquire.lua: take a free lock, or re-enter a hold the caller already has.
--
-- KEYS[1]  lock hash: owner id -> hold count, with a PX expiry
-- KEYS[2]  fence counter: a string with no expiry, in the same hash slot
-- ARGV[1]  owner id
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  "1": re-enter a hold of ARGV[1]; "0": take the lock only if it is free
--
-- Returns one integer (cheaper for Redis to reply than a table):
--    > 0  acquired: the lock was free; the value is the new fence
--      0  re-entered: hold count + 1, expiry unchanged
--     -1  re-enter asked, but ARGV[1] holds nothing: its lease is gone
--  <= -2  held by another owner, whose remaining TTL in ms is -value - 3
--         (-2: the key has no expiry)
--
-- Lua does not roll back, so every check (and every WRONGTYPE it can raise)
-- comes before the first write.
if ARGV[3] == '1' then
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
    return -1
  end
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  return 0
end
if redis.call('HLEN', KEYS[1]) > 0 then
  return -redis.call('PTTL', KEYS[1]) - 3
end
local fence = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return fence
