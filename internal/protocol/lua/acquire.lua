-- acquire.lua: take a Mutex, a FairMutex or an Election's lease in strict
-- arrival order: only when it is free (or kept for the caller) and no live
-- waiter arrived before the caller, so that nobody barges in, TryLock
-- included. Otherwise queue the caller, keeping its place, or re-enter a hold
-- it has.
--
-- KEYS[1]  lock: the lock's state, a string (lib_state.lua): its fence,
--          holder, hold count, whether anyone may wait, when the lease ends,
--          the release it follows and the records of owners that ended; it
--          expires with the lease, or later (a free state stays until the
--          lease that freed it would have ended)
-- KEYS[2]  waiters: the queue, a sorted set of waiting owner ids, scored by
--          arrival (server time in microseconds)
-- KEYS[3]  alive: hash of waiting owner id -> "<lapse>|<grant>": the server
--          time (ms) at which it lapses unless renewed, and its grant lease
--          (ARGV[6]); a lapsed waiter is dropped from the queue.
--          Queue and alive expire when the last registration would lapse.
--          An Election's candidate's entry is "<lapse>|<grant>|<value>"
--          (ARGV[9]), so that the release that grants it the lock (release.lua)
--          writes its value in the leader record.
-- KEYS[4]  leader: (an Election's only) its leader record, a hash that
--          taking the lock makes the caller's (st_hold in lib_state.lua)
--          and that lapses with it
-- ARGV[1]  owner: the owner id
-- ARGV[2]  ttl: the TTL in milliseconds
-- ARGV[3]  deadline: the server time (ms) from which this request changes
--          nothing: a copy whose reply was lost may reach Redis late, even
--          after its owner's Unlock
-- ARGV[4]  mode: (optional: "0" if absent) "0" to take the lock; "1" to
--          re-enter a hold of ARGV[1]
-- ARGV[5]  register: (optional: "0" if absent) taking, "0" not to queue
--          (TryLock), else how long (ms) the caller stays queued unless it
--          renews (by calling again); re-entering: the owner's hold count
--          after this re-entry
-- ARGV[6]  grant: (optional: sent by a take that queues) the caller's grant
--          lease (ms), for which a release grants it the lock (release.lua):
--          its own, from its own TTL, whoever releases
-- ARGV[7]  channel: (optional: sent by a take that queues) the channel
--          stem, as release.lua's ARGV[2]: a caller that finds the lock free
--          with a live waiter ahead of it grants it the lock, as a release
--          would have
-- ARGV[8]  order: (optional: sent with ARGV[7]) as release.lua's ARGV[6]
-- ARGV[9]  value: (an Election's only) the candidate's value
--          A take that does not queue may send ARGV[1] to ARGV[3] alone:
--          Redis turns every argument into a Lua string before the script
--          runs, and the common take needs no more.
--
-- Returns:
--    > 0  acquired; the value is the fence (taken now, or granted by
--         release.lua and taken up now: its lease lapses TTL from now)
--   {f, l} acquired already, by an earlier copy of the caller's request: f is
--         the fence and l (ms) what is left of the lease, which this call
--         does not lengthen
--      0  re-entered: hold count set, expiry unchanged
--     -1  re-enter asked, but ARGV[1] holds nothing: its lease is gone
--   {c, f, t} not acquired; -c - 3 is how long (ms) the caller may sleep before
--         the situation changes by itself: the holder's remaining TTL, or the
--         time until the waiter ahead lapses or takes up the lock granted to
--         it (-2: no expiry known); f is the fence floor: a grant made to the
--         caller after this call has a fence above f; t is the server time in
--         µs
--   {0, t} nothing done: the request came after its deadline, or after its
--         owner ended (a record in the state says so); t is the server time
--         in µs
--
-- Run twice: a take that succeeded answers the same fence, and what is left
-- of its lease, which it does not lengthen again (a later Extend may have
-- shortened it; the client counts from that); an Election's leader record
-- stays as that take wrote it; a queued caller keeps its place (its arrival
-- is not renewed). Run late: after its deadline, or once its owner ended
-- with this request's reply lost (its release recorded the owner until this
-- deadline), it changes nothing.
--
-- libraries: lib_common.lua lib_queue.lua lib_state.lua
local me = ARGV[1]
-- Every WRONGTYPE, and a lock key that holds no state, raises before a write:
-- the state's (GET) first; the queue's and alive's (ZADD, HSET; or the walk's
-- ZRANGE and HGET) before the state is written. A queue entry written before
-- alive's WRONGTYPE has no entry there: the next walk drops it.
local v = redis.call('GET', KEYS[1])
-- The common case first: a free Mutex or FairMutex nobody waits for is taken
-- with the least the script defines and calls, for every Lua call and every
-- number turned into a string costs Redis time: one pattern, TIME and one
-- SET. Such a state is its fence alone, digits (lib_state.lua); with no
-- state, the queue must be empty. The hold's link is that fence: the release
-- that freed the lock.
if ARGV[4] ~= '1' and not KEYS[4] and (not v or string.find(v, '^%d+$')) then
  if v or redis.call('EXISTS', KEYS[2]) == 0 then
    local t = redis.call('TIME')
    if t[1] * 1000 + t[2] / 1000 >= tonumber(ARGV[3]) then
      return {0, t[1] * 1000000 + t[2]}
    end
    local f, n = st_fence(v and v + 0, t)
    if v then
      redis.call('SET', KEYS[1], f .. '|1|0|0|' .. me .. '|' .. v, 'PX', ARGV[2])
    else
      redis.call('SET', KEYS[1], f .. '|1|0|0|' .. me, 'PX', ARGV[2])
    end
    return n
  end
end
-- (shared functions the rest calls)
local s = st_read(KEYS[1], v)
local t, now = server_time()
if now >= tonumber(ARGV[3]) or (s and st_record(s, me, now)) then
  return {0, micros(t)}
end
if ARGV[4] == '1' then
  if not (s and s.o == me and st_live(s, now)) then
    return -1
  end
  s.c = tonumber(ARGV[5])
  st_write(KEYS[1], s)
  return 0
end
if s and s.o == me and st_live(s, now) then
  -- A retry of a take that succeeded: its lease is left as it is. Or a
  -- lock a release granted the caller, which it takes up now: its lease
  -- then lapses TTL from now.
  if s.c == 0 then
    st_lengthen(KEYS[1], s, ARGV[2], false, now)
    if KEYS[4] then
      at_least(KEYS[4], ARGV[2])
    end
    return s.f
  end
  -- A write all the same, so that a WAIT after this call covers the first
  -- run's (touch).
  touch(KEYS[1])
  return {s.f, st_left(KEYS[1], s, now)}
end
local floor = micros(t)
if s and s.f > floor then
  floor = s.f
end
-- What follows the lapse in the caller's queue entry, and the pattern of
-- that part in every entry.
local rest, pattern = ARGV[6], '%d+'
if KEYS[4] then
  rest, pattern = ARGV[6] .. '|' .. ARGV[9], '%d+|.*'
end
local registers = ARGV[5] and ARGV[5] ~= '0'
if st_live(s, now) then
  -- Held by another owner: the caller is queued, and the state marked:
  -- someone may wait. Its release walks the queue (dropping lapsed
  -- waiters), not this call.
  local left = st_left(KEYS[1], s, now)
  if registers then
    queue(KEYS[2], KEYS[3], me, t, now, ARGV[5], rest)
    if s.m == '0' then
      s.m = '1'
      st_write(KEYS[1], s)
    end
  end
  return {-left - 3, floor, micros(t)}
end
-- Free: the first live waiter takes it; lapsed ones ahead of it are dropped.
-- The hold follows the release that freed it, if the state is free, and
-- those the state lists.
local link = st_links(s)
local head, lapse, g = live_waiters(KEYS[2], KEYS[3], now, pattern, me, 2)()
if not head or head == me then
  local waits = '0'
  if head then
    redis.call('ZREM', KEYS[2], me)
    redis.call('HDEL', KEYS[3], me)
    if redis.call('EXISTS', KEYS[2]) == 1 then
      waits = '1'
    end
  end
  local _, f = st_hold(KEYS[1], s, me, ARGV[2], t, waits, link, false, KEYS[4], ARGV[9])
  return f
end
if registers and ARGV[7] then
  -- Free, with a live waiter ahead of the caller: the lock freed itself (its
  -- holder's lease ended, or a grant lapsed), so no release granted it to
  -- that waiter. The caller, which waits too, does it now, as release.lua
  -- would have (a Mutex's grantee leaves the queue; a FairMutex's keeps its
  -- place), and queues: the line moves on within a grant lease, whether or
  -- not that waiter is still there to take it up.
  local value
  if KEYS[4] then
    g, value = string.match(g, '^(%d+)|(.*)$')
  end
  if ARGV[8] ~= '1' then
    redis.call('ZREM', KEYS[2], head)
    redis.call('HDEL', KEYS[3], head)
  end
  queue(KEYS[2], KEYS[3], me, t, now, ARGV[5], rest)
  g = g or ARGV[6]
  local f = tonumber(st_grant(KEYS[1], s, head, g, t, ARGV[7], '1', link, KEYS[4], value))
  return {-tonumber(g) - 3, math.max(floor, f), micros(t)}
end
if registers then
  queue(KEYS[2], KEYS[3], me, t, now, ARGV[5], rest)
  if s and s.m == '0' then
    s.m = '1'
    st_write(KEYS[1], s)
  end
end
return {-(lapse - now) - 3, floor, micros(t)}
