-- sem_acquire.lua: take permits of a semaphore, in order of arrival, each
-- acquisition with a lease of its own.
--
-- KEYS[1]  semaphore: hash, "used" -> permits held, "permits" -> the total
--          when none is stored in KEYS[6] (the first caller's), owner id ->
--          "<permits>|<fence>" of that holder; expires when the last holder's
--          lease would
-- KEYS[2]  fence: the last fence handed out, expiring no sooner than the
--          holders' leases
-- KEYS[3]  waiters: the queue, a sorted set of waiting owner ids, scored by
--          arrival (server µs)
-- KEYS[4]  alive: hash of waiting owner id -> "<lapse ms>|<permits wanted>".
--          Queue and alive expire when the last registration would lapse.
-- KEYS[5]  holders: sorted set of owner ids, scored by when their lease lapses
-- KEYS[6]  total: the total set with SetPermits, with no expiry
-- ARGV[1]  owner: the owner id
-- ARGV[2]  ttl: the TTL of the lease in milliseconds
-- ARGV[3]  deadline: the server time (ms) from which this request changes
--          nothing (a copy whose reply was lost may reach Redis late)
-- ARGV[4]  mode: "0" (an acquisition is never a re-entry)
-- ARGV[5]  register: "0" not to queue; "-1" not to queue either, and to have an
--          answer "not acquired" say why (TryAcquire's error tells it); else
--          how long (ms) the caller stays queued unless it renews (by calling
--          again)
-- ARGV[6]  permits: how many are wanted
-- ARGV[7]  total: the total when none is stored
--
-- The caller gets its permits when they are free after every live waiter
-- queued before it has had its own: nobody overtakes a waiter, and a waiter
-- that fits is not held up by one ahead that fits too. A request for more
-- than the total can never be served while the total stays; it waits without
-- holding anyone up.
--
-- Returns:
--    > 0  acquired; the value is the fence
--   {f, l} acquired already, by an earlier copy of the caller's request: f is
--         the fence and l (ms) what is left of the lease
--     -1  not acquired, not queued: more permits wanted than the total
--  <= -2  not acquired; -value - 3 is how long (ms) the caller may sleep
--         before the situation changes by itself (-2: nothing will lapse)
--   {0, t} nothing done: the request came after its deadline, or after its
--         owner ended (the hash records it, "void:" .. owner id, until that
--         deadline: sem_release.lua); t is the server time in µs
--   {-2, used, total, ahead, set}
--         not acquired, with ARGV[4] "-1" (which never answers -1): the
--         permits live holders hold, the total, the permits live waiters
--         queued before the caller want (as far as the walk went: enough to
--         leave the caller no room), and 1 if the total is the one
--         SetPermits stored, 0 if it is the first caller's
--
-- Run twice: an acquisition that succeeded finds its holder live and answers
-- the same fence and what is left of its lease (as {f, l}), counting nothing twice and writing only the holders' key's
-- expiry again as it is (touch, for WAIT); a queued caller keeps its place.
--
-- libraries: lib_common.lua lib_queue.lua lib_hash.lua
local me, want, ttl, register = ARGV[1], tonumber(ARGV[6]), ARGV[2], tonumber(ARGV[5])
local total = tonumber(redis.call('GET', KEYS[6])) -- type checks, before any write
local set = total ~= nil
local default = tonumber(redis.call('HGET', KEYS[1], 'permits'))
redis.call('GET', KEYS[2])
redis.call('ZCARD', KEYS[3])
redis.call('HLEN', KEYS[4])
redis.call('ZCARD', KEYS[5])
local t, now = server_time() -- also the arrival time of a caller queued below
local void = tonumber(redis.call('HGET', KEYS[1], 'void:' .. me))
if now >= tonumber(ARGV[3]) or (void and void > now) then
  return {0, micros(t)}
end

local mine = redis.call('HGET', KEYS[1], me)
if mine then
  local lapse = tonumber(redis.call('ZSCORE', KEYS[5], me))
  if lapse and lapse > now then
    touch(KEYS[5])
    return {tonumber(string.match(mine, '|(%d+)$')), lapse - now}
  end
end
if not default then
  default = tonumber(ARGV[7])
  redis.call('HSET', KEYS[1], 'permits', default)
end
if not total then
  total = default
end

-- Permits of holders whose lease lapsed come back.
local used = sem_used(KEYS[1], KEYS[5], now)

-- What the live waiters before the caller want; lapsed ones are dropped.
-- The walk stops as soon as those seen leave the caller no room: the ones
-- behind them matter neither for it nor for when that may change, so a long
-- queue costs what its head costs.
local ahead, queued, soonest = 0, false, nil
for w, lapse, k in live_waiters(KEYS[3], KEYS[4], now, '%d+', me) do
  if w == me then
    queued = true
    break
  end
  local n = tonumber(k)
  if n <= total then
    ahead = ahead + n
    if not soonest or lapse < soonest then
      soonest = lapse
    end
    if ahead + want > total - used then
      break
    end
  end
end

if want <= total and total - used >= ahead + want then
  local fence = next_fence(KEYS[2], t, ttl, false)
  if queued then
    redis.call('ZREM', KEYS[3], me)
    redis.call('HDEL', KEYS[4], me)
  end
  redis.call('HSET', KEYS[1], 'used', used + want, me, string.format('%d|%d', want, fence))
  redis.call('ZADD', KEYS[5], now + tonumber(ttl), me)
  at_least(KEYS[5], ttl)
  at_least(KEYS[1], ttl)
  return fence
end
put_used(KEYS[1], used)
at_least(KEYS[1], ttl)
if want > total and register == 0 then
  return -1
end
if register > 0 then
  redis.call('ZADD', KEYS[3], 'NX', micros(t), me)
  redis.call('HSET', KEYS[4], me, string.format('%d|%d', now + tonumber(ARGV[5]), want))
  at_least(KEYS[3], ARGV[5])
  at_least(KEYS[4], ARGV[5])
end
if register < 0 then
  return {-2, used, total, ahead, set and 1 or 0}
end
if want > total then
  return -2
end
local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')[2]
if first and (not soonest or tonumber(first) < soonest) then
  soonest = tonumber(first)
end
if not soonest then
  return -2
end
return -(soonest - now) - 3
