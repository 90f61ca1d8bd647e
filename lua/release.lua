-- release.lua: give back one hold of an owner, or the lock itself; wake a
-- waiter when the lock becomes free.
--
-- KEYS[1]  lock hash: owner id -> hold count
-- ARGV[1]  owner id
-- ARGV[2]  channel to publish on when the lock becomes free
-- ARGV[3]  "1": the owner's last hold goes: delete the lock and publish
--          "0": one of several holds goes: decrement the count, never below 1
--          (the client keeps the authoritative count, so a retried or lost
--          reply can never free a lock that is still in use)
--
-- Returns:
--    1  released: the lock is free and the channel was told
--    2  still held: one hold was given back
--    0  nothing done: another owner holds the lock
--   -1  nothing done: nobody holds the lock (it expired, or was never taken)
local n = redis.call('HGET', KEYS[1], ARGV[1])
if not n then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return -1
  end
  return 0
end
if ARGV[3] ~= '1' then
  if tonumber(n) > 1 then
    redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  end
  return 2
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
return 1
