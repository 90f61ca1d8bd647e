-- sem_release.lua: give back a holder's permits, take a waiter out of the
-- queue, or change the total; then wake the waiters that can now proceed.
--
-- KEYS[1]  semaphore hash: "permits" -> total, "used" -> permits held,
--          owner id -> permits that holder has
-- KEYS[2]  queue: sorted set of waiting owner ids, scored by arrival
-- KEYS[3]  alive: hash of waiting owner id -> "<lapse ms>|<permits wanted>"
-- KEYS[4]  holders: sorted set of owner ids, scored by when their lease lapses
-- ARGV[1]  owner id
-- ARGV[2]  channel stem: a waiter is told on ARGV[2] .. ":" .. its Client id
-- ARGV[3]  "0" or "1": give back ARGV[1]'s permits
--          "2": the waiter ARGV[1] gives up
--          "3": set the total to ARGV[5]
--          "4": only report the permits available
-- ARGV[4]  unused (a semaphore keeps nothing for a waiter)
-- ARGV[5]  the new total, for mode "3"
--
-- Every waiter that now fits, counting what the live waiters before it want,
-- is told (its owner id is published on its Client's channel); the first that
-- does not fit stops the telling, so nobody is overtaken.
--
-- Returns: modes 0/1: 1 given back, -1 the lease had lapsed or was given back
-- already; mode 2: 0; mode 3: 1; mode 4: the permits available (total - used).
local mode = ARGV[3]
local total = tonumber(redis.call('HGET', KEYS[1], 'permits') or '0')
redis.call('ZCARD', KEYS[2]) -- type checks, before any write
redis.call('HLEN', KEYS[3])
redis.call('ZCARD', KEYS[4])
local now = now_ms()
local used = tonumber(redis.call('HGET', KEYS[1], 'used') or '0')
local res = 0

if mode == '0' or mode == '1' then
  local lapse = tonumber(redis.call('ZSCORE', KEYS[4], ARGV[1]))
  local n = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
  if not lapse or not n or lapse <= now then
    res = -1
  else
    res = 1
  end
  if n then
    used = used - n
    redis.call('HDEL', KEYS[1], ARGV[1])
  end
  redis.call('ZREM', KEYS[4], ARGV[1])
elseif mode == '2' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
elseif mode == '3' then
  total = tonumber(ARGV[5])
  redis.call('HSET', KEYS[1], 'permits', total)
  res = 1
end

for _, h in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 100)) do
  used = used - tonumber(redis.call('HGET', KEYS[1], h) or '0')
  redis.call('HDEL', KEYS[1], h)
  redis.call('ZREM', KEYS[4], h)
end
redis.call('HSET', KEYS[1], 'used', used)
if mode == '4' then
  return total - used
end

local free = total - used
for _, w in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local lapse, k = entry(KEYS[3], w, '%d+')
  local n = tonumber(k) or 0
  if lapse and lapse > now then
    if n > free then
      break
    end
    free = free - n
    tell(ARGV[2], w)
  else
    redis.call('ZREM', KEYS[2], w)
    redis.call('HDEL', KEYS[3], w)
  end
end
return res
