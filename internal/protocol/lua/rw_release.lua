-- rw_release.lua: give back a hold of an RWMutex, read or write, or take a
-- waiter out of the queue; then wake only the waiters that can now proceed.
--
-- KEYS[1]  lock: hash of the writer's owner id -> hold count
-- KEYS[2]  waiters: the queue, a sorted set of waiting owner ids, scored by arrival
-- KEYS[3]  alive: hash of waiting owner id -> "<lapse ms>|r" or "<lapse ms>|w"
-- KEYS[4]  readers: sorted set of read holders' owner ids, scored by when
--          their lease lapses (server ms)
-- KEYS[5]  fences: hash of holder owner id -> the fence of its hold; and
--          "evicted:" .. owner id -> 1 for a hold ForceRelease took away, and
--          "void:" .. owner id -> a deadline (ms) for an owner that ended while
--          an acquire of its may still reach Redis (rw_acquire.lua), each
--          until then
-- KEYS[6]  writers: the waiting writers' owner ids, scored as in the queue
-- KEYS[7]  fence: the last fence handed out, shared by reads and writes
-- ARGV[1]  owner: the owner id (mode "2": a waiter's); whether it holds a read or the
--          write is found in Redis
-- ARGV[2]  channel: the channel stem; a waiter is told on ARGV[2] .. ":" .. its Client id
--          (the part of its owner id before the first ':'); the message is
--          its owner id, and for a writer granted the lock, as grant
--          (lib_hash.lua) writes it
-- ARGV[3]  mode: "1", the owner's last hold goes
--          "0": one of several holds goes: a write hold's count is set to
--          ARGV[5]; a read hold has no count in Redis (the client keeps the
--          authoritative count)
--          "2": the waiter ARGV[1] gives up: unregister it, and if the lock
--          was granted to it, or it stood in others' way, wake who can now
--          proceed
--          "3": as "1", for ForceRelease: the fences hash records it, until
--          the lease would have ended, and ARGV[1]'s own release and renewal
--          say so (4)
-- ARGV[4]  grant: the grant lease (ms) of a writer the lock is granted to
-- ARGV[5]  count: for mode "0", the hold count that remains
-- ARGV[6]  fence: ARGV[1]'s fence (0 if unknown), by which a retry finds
--          whether an earlier run of it freed the lock
-- ARGV[7]  void: (optional; modes "1" and "2") the server time (ms) until
--          which an acquire of ARGV[1] may still reach Redis (its reply was
--          lost): the fences hash records ARGV[1] until then, and such an
--          acquire changes nothing (rw_acquire.lua)
--
-- A writer granted the lock holds it with a count of 0 until it takes it up
-- (rw_acquire.lua).
--
-- Who is woken, when the lock has no writer: if the first live waiter is a
-- writer and no live reader holds, the lock is granted to that writer, as
-- release.lua grants a Mutex, and only it is told; if it is a reader, every
-- reader queued before the first writer is told (nothing is kept for readers:
-- nobody can take the lock from them, since they are ahead of every writer
-- that waits), and each takes its read hold with one request.
-- A reader that leaves while other readers hold wakes nobody.
--
-- Returns, as release.lua does:
--    1  released (mode 2: the lock was granted to ARGV[1] and is passed on)
--    2  still held: one of several holds was given back
--    0  nothing done: another owner holds the lock (mode 2: it was not
--       granted to ARGV[1]; only its registration went)
--   -1  nothing done: ARGV[1] holds nothing (its lease lapsed, or it was never
--       taken, or Redis lost the keys)
--    3  mode 1: nothing done: ARGV[1] holds nothing, and the fence KEYS[7]
--       is still its fence: no lock was taken since its hold, which ended by
--       an earlier run of this release or, once its lease's time was up, by
--       expiry (the caller tells which by when the answer came)
--    4  mode 1: nothing done: ARGV[1]'s hold was taken away by ForceRelease
--
-- Run twice: a release that gave back the last hold finds nothing of its
-- owner and the fence it left (or a later one), and answers 3, writing
-- nothing; mode "0" sets the same count; mode "2" finds nothing more to do.
--
-- libraries: lib_common.lua lib_queue.lua lib_hash.lua
local me, mode = ARGV[1], ARGV[3]
redis.call('HLEN', KEYS[1]) -- type checks, before any write
redis.call('ZCARD', KEYS[2])
redis.call('HLEN', KEYS[3])
redis.call('ZCARD', KEYS[4])
redis.call('HLEN', KEYS[5])
redis.call('ZCARD', KEYS[6])
redis.call('STRLEN', KEYS[7])
local t, now = server_time()
if ARGV[7] and tonumber(ARGV[7]) > now then
  -- Whatever follows, ARGV[1]'s late acquires take nothing.
  redis.call('HSET', KEYS[5], 'void:' .. me, ARGV[7])
  at_least(KEYS[5], tonumber(ARGV[7]) - now)
end

local res, reader
if mode == '2' then
  local v = redis.call('HGET', KEYS[3], me)
  local granted = redis.call('HEXISTS', KEYS[1], me) == 1
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  redis.call('ZREM', KEYS[2], me)
  redis.call('HDEL', KEYS[3], me)
  redis.call('ZREM', KEYS[6], me)
  if granted then
    redis.call('DEL', KEYS[1])
    redis.call('HDEL', KEYS[5], me, 'gen:' .. me)
    res = 1
  elseif v and (head == me or string.sub(v, -1) == 'w') then
    -- A writer held up the readers behind it; the head held up everyone.
    res = 0
  else
    return 0
  end
else
  local count = redis.call('HGET', KEYS[1], me)
  if count then
    if mode == '0' then
      redis.call('HSET', KEYS[1], me, ARGV[5])
      return 2
    end
    if mode == '3' then
      evict(KEYS[5], me, redis.call('PTTL', KEYS[1]))
    end
    redis.call('DEL', KEYS[1])
    redis.call('HDEL', KEYS[5], me, 'gen:' .. me)
    res = 1
  else
    local lapse = tonumber(redis.call('ZSCORE', KEYS[4], me))
    if not lapse then
      if mode == '1' and evicted(KEYS[5], me) then
        return 4
      end
      if mode ~= '0' and after(KEYS[7], ARGV[6]) then
        return 3
      end
      if redis.call('HLEN', KEYS[1]) > 0 then
        return 0
      end
      return -1
    end
    if lapse > now and mode == '0' then
      return 2
    end
    if lapse > now and mode == '3' then
      evict(KEYS[5], me, lapse - now)
    end
    redis.call('ZREM', KEYS[4], me)
    redis.call('HDEL', KEYS[5], me, 'gen:' .. me)
    res, reader = 1, true
    if lapse <= now then
      res = -1
    end
  end
end

-- The lock's state now: a writer wakes nobody; nor does a reader leaving
-- while others read.
if redis.call('HLEN', KEYS[1]) > 0 then
  return res
end
for _, r in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 100)) do
  redis.call('ZREM', KEYS[4], r)
  redis.call('HDEL', KEYS[5], r, 'gen:' .. r)
end
local readers = redis.call('ZCARD', KEYS[4])
if readers > 0 and reader then
  return res
end
local told = 0
for w, _, what in live_waiters(KEYS[2], KEYS[3], now, '[rw]') do
  if what == 'w' then
    if told == 0 and readers == 0 then
      redis.call('ZREM', KEYS[2], w)
      redis.call('HDEL', KEYS[3], w)
      redis.call('ZREM', KEYS[6], w)
      redis.call('HSET', KEYS[5], w, grant(KEYS[1], KEYS[7], w, ARGV[4], t, ARGV[2], true))
      at_least(KEYS[5], ARGV[4])
    end
    break
  end
  tell(ARGV[2], w)
  told = told + 1
end
return res
