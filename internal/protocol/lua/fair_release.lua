-- fair_release.lua: give back one hold of an owner, or the lock itself. A lock
-- freed while others are queued is granted at once to the first live waiter,
-- as release.lua grants it, and only that waiter's Client is told.
--
-- KEYS[1]  lock: hash of owner id -> hold count
-- KEYS[2]  fence: the last fence handed out
-- KEYS[3]  waiters: the queue, a sorted set of waiting owner ids, scored by arrival
-- KEYS[4]  alive: hash of waiting owner id -> lapse time (server ms)
-- KEYS[5]  extends: as in release.lua
-- ARGV[1]  owner: as in release.lua
-- ARGV[2]  channel: as in release.lua
-- ARGV[3]  mode: as in release.lua
-- ARGV[4]  grant: as in release.lua
-- ARGV[5]  count: as in release.lua
-- ARGV[6]  fence: as in release.lua
--
-- Returns, and runs twice, as release.lua does.
local mode = ARGV[3]
-- Every WRONGTYPE comes before the first write: the lock, then the queue.
local held = redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1
local queued = redis.call('ZCARD', KEYS[3])
if mode == '1' and held and queued == 0 then
  -- The common case, with the least the script defines and calls.
  redis.call('DEL', KEYS[1])
  return 1
end
-- (shared functions the rest calls)
redis.call('HLEN', KEYS[4])
if queued > 0 then
  redis.call('STRLEN', KEYS[2]) -- a grant writes it
end
if mode == '2' then
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
  if not held then
    return 0
  end
else
  if mode == '3' then
    redis.call('HLEN', KEYS[5]) -- evict writes it
  end
  local code = give_back(KEYS[1], KEYS[2], KEYS[5], ARGV[1], mode, ARGV[5], ARGV[6], held)
  if code then
    return code
  end
end
redis.call('DEL', KEYS[1])
if queued == 0 then
  return 1
end
local t, now = server_time()
local head = live_waiters(KEYS[3], KEYS[4], now)()
if head then
  redis.call('ZREM', KEYS[3], head)
  redis.call('HDEL', KEYS[4], head)
  grant(KEYS[1], KEYS[2], head, ARGV[4], t, ARGV[2], true) -- as release.lua grants
end
return 1
