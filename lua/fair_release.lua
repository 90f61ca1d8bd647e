-- fair_release.lua: give back one hold of an owner, or the lock itself. A lock
-- freed while others are queued is kept for a short while for the first live
-- waiter, and only that waiter's Client is told; the waiter keeps its place at
-- the head until it takes the lock or lapses.
--
-- KEYS[1]  lock hash: owner id -> hold count, or "reserved" -> owner id
-- KEYS[2]  queue: sorted set of waiting owner ids, scored by arrival
-- KEYS[3]  alive: hash of waiting owner id -> lapse time (server ms)
-- KEYS[4]  release marker of ARGV[1], as in release.lua
-- ARGV[1..6] as in release.lua: owner id, channel stem, mode, reservation
--          (ms), remaining hold count (mode "0"), marker lifetime (ms)
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
local now = now_ms()
while true do
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not head then
    return 1
  end
  local lapse = tonumber(redis.call('HGET', KEYS[3], head))
  if lapse and lapse > now then
    redis.call('HSET', KEYS[1], 'reserved', head)
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    tell(ARGV[2], head)
    return 1
  end
  redis.call('ZREM', KEYS[2], head)
  redis.call('HDEL', KEYS[3], head)
end
