-- ttl.lua: the remaining TTL of a lock, if the given owner holds it.
--
-- KEYS[1]  lock hash: owner id -> hold count
-- ARGV[1]  owner id
--
-- Returns the remaining TTL in ms (-1 if the key has no expiry) when ARGV[1]
-- holds the lock; -3 when another owner holds it; -2 when nobody does.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return redis.call('PTTL', KEYS[1])
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return -3
end
return -2
