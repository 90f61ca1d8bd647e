-- sem_acquire.lua: take permits of a semaphore, in order of arrival, each
-- acquisition with a lease of its own.
--
-- KEYS[1]  semaphore hash: "permits" -> total, "used" -> permits held,
--          owner id -> permits that holder has
-- KEYS[2]  fence counter: a string with no expiry
-- KEYS[3]  queue: sorted set of waiting owner ids, scored by arrival (server µs)
-- KEYS[4]  alive: hash of waiting owner id -> "<lapse ms>|<permits wanted>"
-- KEYS[5]  holders: sorted set of owner ids, scored by when their lease lapses
-- ARGV[1]  owner id
-- ARGV[2]  TTL of the lease in milliseconds
-- ARGV[3]  "0" (an acquisition is never a re-entry)
-- ARGV[4]  "0": do not queue; else how long (ms) the caller stays queued
--          unless it renews (by calling again)
-- ARGV[5]  permits wanted
-- ARGV[6]  total permits, set if the semaphore has none yet
--
-- The caller gets its permits when they are free after every live waiter
-- queued before it has had its own: nobody overtakes a waiter, and a waiter
-- that fits is not held up by one ahead that is about to be served.
--
-- Returns:
--    > 0  acquired; the value is the new fence
--  <= -2  not acquired; -value - 3 is how long (ms) the caller may sleep
--         before the situation changes by itself (-2: nothing will lapse)
local total = tonumber(redis.call('HGET', KEYS[1], 'permits'))
redis.call('ZCARD', KEYS[3]) -- type checks, before any write
redis.call('HLEN', KEYS[4])
redis.call('ZCARD', KEYS[5])
redis.call('TYPE', KEYS[2])
if not total then
  total = tonumber(ARGV[6])
  redis.call('HSET', KEYS[1], 'permits', total)
end
local t = redis.call('TIME') -- also the arrival time of a caller queued below
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local me, want = ARGV[1], tonumber(ARGV[5])

-- Permits of holders whose lease lapsed come back.
local used = tonumber(redis.call('HGET', KEYS[1], 'used') or '0')
for _, h in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 100)) do
  used = used - tonumber(redis.call('HGET', KEYS[1], h) or '0')
  redis.call('HDEL', KEYS[1], h)
  redis.call('ZREM', KEYS[5], h)
end

-- What the live waiters before the caller want; lapsed ones are dropped.
local ahead, queued, soonest = 0, false, nil
for _, w in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  if w == me then
    queued = true
    break
  end
  local lapse, k = entry(KEYS[4], w, '%d+')
  local n = tonumber(k) or 0
  if lapse and lapse > now then
    ahead = ahead + n
    if not soonest or lapse < soonest then
      soonest = lapse
    end
  else
    redis.call('ZREM', KEYS[3], w)
    redis.call('HDEL', KEYS[4], w)
  end
end

if total - used >= ahead + want then
  if queued then
    redis.call('ZREM', KEYS[3], me)
    redis.call('HDEL', KEYS[4], me)
  end
  redis.call('HSET', KEYS[1], 'used', used + want, me, want)
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), me)
  return redis.call('INCR', KEYS[2])
end
redis.call('HSET', KEYS[1], 'used', used)
if ARGV[4] ~= '0' then
  redis.call('ZADD', KEYS[3], 'NX', t[1] * 1000000 + t[2], me)
  redis.call('HSET', KEYS[4], me, (now + tonumber(ARGV[4])) .. '|' .. want)
end
local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')[2]
if first and (not soonest or tonumber(first) < soonest) then
  soonest = tonumber(first)
end
if not soonest then
  return -2
end
return -(soonest - now) - 3
