-- acquire.lua: take a Mutex, a FairMutex or an Election's lease in strict
-- arrival order: only when it is free (or kept for the caller) and no live
-- waiter arrived before the caller, so that nobody barges in, TryLock
-- included. Otherwise queue the caller, keeping its place, or re-enter a hold
-- it has.
--
-- KEYS[1]  lock: hash of owner id -> hold count, with a PX expiry
-- KEYS[2]  fence: the last fence handed out, expiring no sooner than the lock
-- KEYS[3]  waiters: the queue, a sorted set of waiting owner ids, scored by arrival (server
--          time in microseconds)
-- KEYS[4]  alive: hash of waiting owner id -> "<lapse>|<grant>": the server
--          time (ms) at which it lapses unless renewed, and its grant lease
--          (ARGV[5]); a lapsed waiter is dropped from the queue.
--          Queue and alive expire when the last registration would lapse.
--          An Election's candidate's entry is "<lapse>|<grant>|<value>"
--          (ARGV[6]), so that the release that grants it the lock (release.lua)
--          writes its value in the leader record.
-- KEYS[5]  leader: (an Election's only) its leader record, a hash that
--          taking the lock makes the caller's (take in lib.lua) and that
--          lapses with it
-- ARGV[1]  owner: the owner id
-- ARGV[2]  ttl: the TTL in milliseconds
-- ARGV[3]  mode: "0" to take the lock; "1" to re-enter a hold of ARGV[1]
-- ARGV[4]  register: taking, "0" not to queue (TryLock), else how long (ms) the caller
--          stays queued unless it renews (by calling again); re-entering: the
--          owner's hold count after this re-entry
-- ARGV[5]  grant: the caller's grant lease (ms), for which a release grants
--          it the lock (release.lua): its own, from its own TTL, whoever
--          releases
-- ARGV[6]  value: (an Election's only) the candidate's value
--
-- Returns:
--    > 0  acquired; the value is the fence (a lock the caller held already,
--         granted by release.lua or taken by a first run, now lapses TTL
--         from now)
--      0  re-entered: hold count set, expiry unchanged
--     -1  re-enter asked, but ARGV[1] holds nothing: its lease is gone
--   {c, f, t} not acquired; -c - 3 is how long (ms) the caller may sleep before
--         the situation changes by itself: the holder's remaining TTL, or the
--         time until the waiter ahead lapses (-2: no expiry known); f is the
--         fence floor (fence_floor): a grant made to the caller after this
--         call has a fence above f; t is the server time in µs
--
-- Run twice: a take that succeeded answers the same fence (an Election's
-- leader record stays as that take wrote it); a queued caller keeps its place
-- (its arrival is not renewed).
local me = ARGV[1]
-- The common case first: a free lock nobody waits for is taken with the
-- least the script defines and calls.
-- One EXISTS tells both: no lock and no queue.
if ARGV[3] ~= '1' and redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  return take(KEYS[1], KEYS[2], me, ARGV[2], redis.call('TIME'), false, KEYS[5], ARGV[6])
end
-- (shared functions the rest calls)
if ARGV[3] == '1' then
  return reenter(KEYS[1], me, ARGV[4])
end
-- Every WRONGTYPE comes before a write that matters: the lock's (HEXISTS),
-- the fence's (GET in fence_floor, or SET ... GET in next_fence), the
-- queue's and alive's (ZADD, HSET; or the walk's ZRANGE and HGET). A queue
-- entry written before alive's WRONGTYPE has no entry there: the next walk
-- drops it.
if redis.call('HEXISTS', KEYS[1], me) == 1 then
  local f = held_again(KEYS[1], KEYS[2], ARGV[2])
  if KEYS[5] then
    at_least(KEYS[5], ARGV[2])
  end
  return f
end
local pttl = redis.call('PTTL', KEYS[1])
local t, now = server_time()
-- What follows the lapse in the caller's queue entry, and the pattern of
-- that part in every entry.
local rest, pattern = ARGV[5], '%d+'
if KEYS[5] then
  rest, pattern = ARGV[5] .. '|' .. ARGV[6], '%d+|.*'
end
if pttl ~= -2 then
  -- Held by another owner: the caller is queued; its release walks the
  -- queue (dropping lapsed waiters), not this call.
  local floor = fence_floor(KEYS[2], t)
  if ARGV[4] ~= '0' then
    queue(KEYS[3], KEYS[4], me, t, now, ARGV[4], rest)
  end
  return {-pttl - 3, floor, micros(t)}
end
-- Free: the first live waiter takes it; lapsed ones ahead of it are dropped.
local head, lapse = live_waiters(KEYS[3], KEYS[4], now, pattern, me)()
if not head or head == me then
  local fence = take(KEYS[1], KEYS[2], me, ARGV[2], t, false, KEYS[5], ARGV[6])
  if head then
    redis.call('ZREM', KEYS[3], me)
    redis.call('HDEL', KEYS[4], me)
  end
  return fence
end
local floor = fence_floor(KEYS[2], t)
if ARGV[4] ~= '0' then
  queue(KEYS[3], KEYS[4], me, t, now, ARGV[4], rest)
end
return {-(lapse - now) - 3, floor, micros(t)}
