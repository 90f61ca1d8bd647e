-- acquire.lua: take a free lock (or one reserved for the caller), register the
-- caller as a waiter if it is held, or re-enter a hold the caller has.
--
-- KEYS[1]  lock hash: owner id -> hold count, with a PX expiry; or, while a
--          released lock is kept for a woken waiter, the field "reserved" ->
--          that waiter's owner id
-- KEYS[2]  fence counter: a string with no expiry
-- KEYS[3]  waiters: sorted set of waiting owner ids, each scored by the server
--          time (ms) at which the entry lapses unless renewed
-- ARGV[1]  owner id
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  "1": re-enter a hold of ARGV[1]; "0": take the lock
-- ARGV[4]  "0": do not register; else how long (ms) the caller stays
--          registered as a waiter when the lock is held
--
-- Returns one integer (cheaper for Redis to reply than a table):
--    > 0  acquired; the value is the new fence
--      0  re-entered: hold count + 1, expiry unchanged
--     -1  re-enter asked, but ARGV[1] holds nothing: its lease is gone
--  <= -2  held by another owner (or kept for another waiter), whose remaining
--         TTL in ms is -value - 3 (-2: the key has no expiry)
--
-- Lua does not roll back, so every check (and every WRONGTYPE it can raise)
-- comes before the first write.
if ARGV[3] == '1' then
  return reenter(KEYS[1], ARGV[1])
end
local n = redis.call('HLEN', KEYS[1])
if n > 0 and not (n == 1 and redis.call('HGET', KEYS[1], 'reserved') == ARGV[1]) then
  if ARGV[4] ~= '0' then
    redis.call('ZADD', KEYS[3], now_ms() + tonumber(ARGV[4]), ARGV[1])
  end
  return -redis.call('PTTL', KEYS[1]) - 3
end
if ARGV[4] ~= '0' then
  redis.call('ZREM', KEYS[3], ARGV[1])
end
local fence = redis.call('INCR', KEYS[2])
if n > 0 then
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return fence
