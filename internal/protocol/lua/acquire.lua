-- acquire.lua: take a Mutex, a FairMutex or an Election's lease in strict
-- arrival order: only when it is free (or kept for the caller) and no live
-- waiter arrived before the caller, so that nobody barges in, TryLock
-- included. Otherwise queue the caller, keeping its place, or re-enter a hold
-- it has.
--
-- KEYS[1]  lock: the lock's state, a string (lib.lua): its fence, holder,
--          hold count, whether anyone may wait, and when the lease ends; it
--          expires with the lease, or later (a free state stays until the
--          lease that freed it would have ended)
-- KEYS[2]  waiters: the queue, a sorted set of waiting owner ids, scored by arrival (server
--          time in microseconds)
-- KEYS[3]  alive: hash of waiting owner id -> "<lapse>|<grant>": the server
--          time (ms) at which it lapses unless renewed, and its grant lease
--          (ARGV[5]); a lapsed waiter is dropped from the queue.
--          Queue and alive expire when the last registration would lapse.
--          An Election's candidate's entry is "<lapse>|<grant>|<value>"
--          (ARGV[6]), so that the release that grants it the lock (release.lua)
--          writes its value in the leader record.
-- KEYS[4]  leader: (an Election's only) its leader record, a hash that
--          taking the lock makes the caller's (st_hold in lib.lua) and that
--          lapses with it
-- ARGV[1]  owner: the owner id
-- ARGV[2]  ttl: the TTL in milliseconds
-- ARGV[3]  mode: (optional: "0" if absent) "0" to take the lock; "1" to
--          re-enter a hold of ARGV[1]
-- ARGV[4]  register: (optional: "0" if absent) taking, "0" not to queue
--          (TryLock), else how long (ms) the caller stays queued unless it
--          renews (by calling again); re-entering: the owner's hold count
--          after this re-entry
-- ARGV[5]  grant: (optional: sent by a take that queues) the caller's grant
--          lease (ms), for which a release grants it the lock (release.lua):
--          its own, from its own TTL, whoever releases
--          A take that does not queue may send ARGV[1] and ARGV[2] alone:
--          Redis turns every argument into a Lua string before the script
--          runs, and the common take needs no more.
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
--         fence floor: a grant made to the caller after this call has a
--         fence above f; t is the server time in µs
--
-- Run twice: a take that succeeded answers the same fence (an Election's
-- leader record stays as that take wrote it); a queued caller keeps its place
-- (its arrival is not renewed).
local me = ARGV[1]
-- Every WRONGTYPE, and a lock key that holds no state, raises before a write:
-- the state's (GET) first; the queue's and alive's (ZADD, HSET; or the walk's
-- ZRANGE and HGET) before the state is written. A queue entry written before
-- alive's WRONGTYPE has no entry there: the next walk drops it.
local v = redis.call('GET', KEYS[1])
-- The common case first: a free Mutex or FairMutex nobody waits for is taken
-- with the least the script defines and calls, for every Lua call and every
-- number turned into a string costs Redis time: one pattern, TIME and one
-- SET. Such a state is its fence alone, digits (lib.lua); with no state, the
-- queue must be empty.
if ARGV[3] ~= '1' and not KEYS[4] and (not v or string.find(v, '^%d+$')) then
  if v or redis.call('EXISTS', KEYS[2]) == 0 then
    local f, n = st_fence(v and v + 0, redis.call('TIME'))
    redis.call('SET', KEYS[1], f .. '|1|0|0|' .. me, 'PX', ARGV[2])
    return n
  end
end
-- (shared functions the rest calls)
local s = st_read(KEYS[1], v)
if ARGV[3] == '1' then
  if not (s and s.o == me and st_live(s)) then
    return -1
  end
  s.c = tonumber(ARGV[4])
  st_write(KEYS[1], s)
  return 0
end
local t, now = server_time()
if s and s.o == me and st_live(s, now) then
  -- A retry of a take that succeeded, or a lock a release granted the
  -- caller: its lease now lapses TTL from now.
  st_lengthen(KEYS[1], s, ARGV[2], false, now)
  if KEYS[4] then
    at_least(KEYS[4], ARGV[2])
  end
  return s.f
end
local floor = micros(t)
if s and s.f > floor then
  floor = s.f
end
-- What follows the lapse in the caller's queue entry, and the pattern of
-- that part in every entry.
local rest, pattern = ARGV[5], '%d+'
if KEYS[4] then
  rest, pattern = ARGV[5] .. '|' .. ARGV[6], '%d+|.*'
end
-- queue_me queues the caller (unless it only tries), and marks the state:
-- someone may wait.
local function queue_me()
  if not ARGV[4] or ARGV[4] == '0' then
    return
  end
  queue(KEYS[2], KEYS[3], me, t, now, ARGV[4], rest)
  if s and s.m == '0' then
    s.m = '1'
    st_write(KEYS[1], s)
  end
end
if s and s.o ~= '' and (s.u == 0 or s.u > now) then
  -- Held by another owner: the caller is queued; its release walks the
  -- queue (dropping lapsed waiters), not this call.
  local left = s.u - now
  if s.u == 0 then
    left = redis.call('PTTL', KEYS[1])
  end
  queue_me()
  return {-left - 3, floor, micros(t)}
end
-- Free: the first live waiter takes it; lapsed ones ahead of it are dropped.
local head, lapse = live_waiters(KEYS[2], KEYS[3], now, pattern, me, 2)()
if not head or head == me then
  local waits = '0'
  if head then
    redis.call('ZREM', KEYS[2], me)
    redis.call('HDEL', KEYS[3], me)
    if redis.call('EXISTS', KEYS[2]) == 1 then
      waits = '1'
    end
  end
  local _, f = st_hold(KEYS[1], s and s.f, me, ARGV[2], t, waits, KEYS[4], ARGV[6])
  return f
end
queue_me()
return {-(lapse - now) - 3, floor, micros(t)}
