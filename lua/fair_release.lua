-- fair_release.lua: give back one hold of an owner, or the lock itself. A lock
-- freed while others are queued is kept for a short while for the first live
-- waiter, and only that waiter's Client is told; the waiter keeps its place at
-- the head until it takes the lock or lapses.
--
-- KEYS[1]  lock: hash of owner id -> hold count, or "reserved" -> owner id
-- KEYS[2]  waiters: the queue, a sorted set of waiting owner ids, scored by arrival
-- KEYS[3]  alive: hash of waiting owner id -> lapse time (server ms)
-- KEYS[4]  marker: the release marker of ARGV[1], as in release.lua
-- ARGV[1]  owner: as in release.lua
-- ARGV[2]  channel: as in release.lua
-- ARGV[3]  mode: as in release.lua
-- ARGV[4]  reserve: as in release.lua
-- ARGV[5]  count: as in release.lua
-- ARGV[6]  marker_ttl: as in release.lua
--
-- Returns, and runs twice, as release.lua does.
local mode = ARGV[3]
local queued = redis.call('ZCARD', KEYS[2]) -- type checks, before any write
redis.call('HLEN', KEYS[3])
if mode == '2' then
  local kept = kept_for(KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  if not kept then
    return 0
  end
else
  local code = give_back(KEYS[1], ARGV[1], mode, ARGV[5], KEYS[4])
  if code then
    return code
  end
  redis.call('SET', KEYS[4], 1, 'PX', ARGV[6])
end
redis.call('DEL', KEYS[1])
if queued == 0 then
  return 1
end
-- The first live waiter; lapsed ones ahead of it are dropped.
local head = live_waiters(KEYS[2], KEYS[3], now_ms())()
if head then
  redis.call('HSET', KEYS[1], 'reserved', head)
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  tell(ARGV[2], head)
end
return 1
