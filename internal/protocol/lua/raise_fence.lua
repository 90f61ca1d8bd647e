-- raise_fence.lua: on one node of a RedLock, make a lock's fence key at
-- least the fence an acquisition returned: the largest over the majority of
-- nodes that granted it. It is written to every node, not only that
-- majority, so that every later majority shares a node that has it even after
-- a minority of nodes lost their data; so every later fence is above it.
--
-- KEYS[1]  lock: hash of owner id -> hold count
-- KEYS[2]  fence: the last fence handed out on this node
-- ARGV[1]  owner: the owner id
-- ARGV[2]  fence: the fence to raise the key to
-- ARGV[3]  ttl: the lock's TTL in milliseconds; the fence key lives at least
--          as long
--
-- Returns 1 if the owner holds the lock here, else 0; either way the fence
-- key is at least ARGV[2] now.
--
-- Run twice: the second run finds the key raised already.
local v = redis.call('GET', KEYS[2])
local last = tonumber(v)
if v and not last then
  error({err = 'ERR dlock: fence key ' .. KEYS[2] .. ' holds a non-integer'})
end
if not last or last < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'KEEPTTL')
end
at_least(KEYS[2], ARGV[3])
return redis.call('HEXISTS', KEYS[1], ARGV[1])
