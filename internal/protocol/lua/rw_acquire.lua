-- rw_acquire.lua: take an RWMutex for reading or for writing, in order of
-- arrival, so that a waiting writer is not starved by readers; or re-enter a
-- hold the caller has.
--
-- KEYS[1]  lock: hash of the writer's owner id -> hold count, with a PX expiry
-- KEYS[2]  fence: the last fence handed out, shared by reads and writes,
--          expiring no sooner than any hold
-- KEYS[3]  waiters: the queue, a sorted set of waiting owner ids, scored by arrival (server
--          time in microseconds)
-- KEYS[4]  alive: hash of waiting owner id -> "<lapse ms>|r" for a reader,
--          "<lapse ms>|w" for a writer; a lapsed waiter is dropped. Queue and
--          alive expire when the last registration would lapse.
-- KEYS[5]  readers: sorted set of read holders' owner ids, each scored by the
--          server time (ms) at which its lease lapses; the key expires when
--          the last of them would
-- KEYS[6]  fences: hash of holder owner id (readers and the writer) -> the
--          fence of its hold, expiring no sooner than any hold
-- KEYS[7]  writers: the waiting writers alone, scored as in the queue, so
--          that a reader finds the first writer before it without walking
--          the readers; an entry whose alive entry is gone is dropped when
--          met. Expires with the queue.
-- ARGV[1]  owner: the owner id
-- ARGV[2]  ttl: the TTL in milliseconds
-- ARGV[3]  deadline: the server time (ms) from which this request changes
--          nothing (a copy whose reply was lost may reach Redis late)
-- ARGV[4]  mode: "0" to acquire; "1" to re-enter the hold of ARGV[1], read or write,
--          whichever it is
-- ARGV[5]  register: acquiring, "0" not to queue (TryLock, TryRLock), else how long
--          (ms) the caller stays queued unless it renews (by calling again);
--          re-entering: the owner's hold count after this re-entry (a read
--          hold has no count in Redis)
-- ARGV[6]  access: "r" to acquire for reading; "w" for writing
-- ARGV[7]  writer: for "r", the owner id of a write hold the caller has, or "". A
--          writer that reads gets the read at once, whoever waits, since all
--          of them wait for it.
--
-- A writer granted the lock by a release (rw_release.lua) holds it with a
-- count of 0 until it takes it up: its next request, or its renewal, makes
-- it 1 and lengthens the lease to its TTL.
--
-- A writer takes the lock when nobody holds it (no writer, no live reader)
-- and no live waiter is queued before it; a release may also grant it to the
-- writer first in line (rw_release.lua). A reader takes it when no writer
-- holds it and no live writer is queued before it: once a writer waits, the
-- readers that come after it wait behind it.
--
-- Returns, as acquire.lua does (its held reply included):
--    > 0  acquired; the value is the fence (a write hold granted by
--         rw_release.lua and taken up now lapses TTL from now)
--   {f, l} acquired already, by an earlier copy of the caller's request: f is
--         the fence and l (ms) what is left of the hold, which this call
--         does not lengthen
--      0  re-entered
--     -1  re-enter asked, but ARGV[1] holds nothing: its lease is gone
--   {0, t} nothing done: the request came after its deadline, or after its
--         owner ended (the fences hash records it: "void:" .. owner id ->
--         that deadline, written by its release); t is the server time (µs)
--   {c, f, t} not acquired; -c - 3 is how long (ms) the caller may sleep
--         before the situation changes by itself: the writer's remaining TTL,
--         or the time until the first reader's lease or the waiter in the
--         way lapses (-2: none known); f is the fence floor and t the server
--         time, as in acquire.lua
--
-- Run twice: an acquisition that succeeded finds the caller holding and
-- answers the same fence and what is left of the hold, without lengthening
-- it (a later Extend may
-- have shortened it), but writing its hold's key's expiry again as it is
-- (touch, for WAIT); a re-entry sets the same count; a queued caller keeps
-- its place. Run late (after its deadline, or its owner's end), it changes
-- nothing.
--
-- Lua does not roll back, so every check (and every WRONGTYPE it can raise)
-- comes before the first write.
--
-- libraries: lib_common.lua lib_queue.lua lib_hash.lua
local me = ARGV[1]
local t, now = server_time() -- also the arrival time of a caller queued below
local reading = ARGV[6] == 'r'
local void = tonumber(redis.call('HGET', KEYS[6], 'void:' .. me)) -- raises WRONGTYPE before any write
if now >= tonumber(ARGV[3]) or (void and void > now) then
  return {0, micros(t)}
end

if ARGV[4] == '1' then
  if redis.call('HEXISTS', KEYS[1], me) == 1 then
    redis.call('HSET', KEYS[1], me, ARGV[5])
    return 0
  end
  local lapse = tonumber(redis.call('ZSCORE', KEYS[5], me))
  if lapse and lapse > now then
    return 0
  end
  return -1
end

local ttl = tonumber(ARGV[2])
local n = redis.call('HLEN', KEYS[1])
redis.call('GET', KEYS[2]) -- type checks, before any write
redis.call('ZCARD', KEYS[3])
redis.call('HLEN', KEYS[4])
redis.call('HLEN', KEYS[6])
redis.call('ZCARD', KEYS[7])
local held, count
if reading then
  local lapse = tonumber(redis.call('ZSCORE', KEYS[5], me))
  held = lapse and lapse > now and lapse
else
  count = n > 0 and redis.call('HGET', KEYS[1], me)
  held = count
end
if held then
  local fence = tonumber(redis.call('HGET', KEYS[6], me)) or tonumber(redis.call('GET', KEYS[2]))
  if reading then
    touch(KEYS[5])
    return {fence, held - now}
  elseif count == '0' then
    -- A lock a release granted the caller, which it takes up now.
    redis.call('HSET', KEYS[1], me, 1)
    redis.call('PEXPIRE', KEYS[1], ttl)
    at_least(KEYS[2], ttl)
    at_least(KEYS[6], ttl)
    return fence
  end
  touch(KEYS[1])
  return {fence, redis.call('PTTL', KEYS[1])}
end
local readers = redis.call('ZCOUNT', KEYS[5], '(' .. now, '+inf')

-- The live waiters before the caller, as far as they matter: for a writer,
-- the first one; for a reader, the first writer, found among the writers
-- alone, so that a long queue of readers costs nothing here. Lapsed ones are
-- dropped.
local ahead, aheadLapse
if reading then
  local mine = tonumber(redis.call('ZSCORE', KEYS[3], me))
  while true do
    local first = redis.call('ZRANGE', KEYS[7], 0, 0, 'WITHSCORES')
    if not first[1] or (mine and tonumber(first[2]) >= mine) then
      break
    end
    local lapse = entry(KEYS[4], first[1], 'w')
    if lapse and lapse > now then
      ahead, aheadLapse = first[1], lapse
      break
    end
    redis.call('ZREM', KEYS[7], first[1])
    redis.call('ZREM', KEYS[3], first[1])
    redis.call('HDEL', KEYS[4], first[1])
  end
else
  for w, lapse in live_waiters(KEYS[3], KEYS[4], now, '[rw]', me) do
    if w ~= me then
      ahead, aheadLapse = w, lapse
    end
    break
  end
end

local granted
if reading then
  granted = n == 0 and not ahead
  if not granted and ARGV[7] ~= '' then
    granted = redis.call('HEXISTS', KEYS[1], ARGV[7]) == 1
  end
else
  granted = readers == 0 and not ahead and
    n == 0
end

if granted then
  local fence = next_fence(KEYS[2], t, ttl, false)
  if ARGV[5] ~= '0' then
    redis.call('ZREM', KEYS[3], me)
    redis.call('HDEL', KEYS[4], me)
    if not reading then
      redis.call('ZREM', KEYS[7], me)
    end
  end
  for _, r in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 100)) do
    redis.call('ZREM', KEYS[5], r)
    redis.call('HDEL', KEYS[6], r, 'gen:' .. r)
  end
  if reading then
    redis.call('ZADD', KEYS[5], now + ttl, me)
    at_least(KEYS[5], ttl)
  else
    if n > 0 then
      redis.call('DEL', KEYS[1])
    end
    redis.call('HSET', KEYS[1], me, 1)
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
  redis.call('HSET', KEYS[6], me, fence)
  at_least(KEYS[6], ttl)
  return fence
end

if ARGV[5] ~= '0' then
  local what = 'w'
  if reading then
    what = 'r'
  end
  redis.call('ZADD', KEYS[3], 'NX', micros(t), me)
  redis.call('HSET', KEYS[4], me, string.format('%d|%s', now + tonumber(ARGV[5]), what))
  at_least(KEYS[3], ARGV[5])
  at_least(KEYS[4], ARGV[5])
  if not reading then
    redis.call('ZADD', KEYS[7], 'NX', redis.call('ZSCORE', KEYS[3], me), me)
    at_least(KEYS[7], ARGV[5])
  end
end

-- How long until the situation changes by itself: whichever of the things in
-- the caller's way lapses first.
local sleep
if n > 0 then
  local p = redis.call('PTTL', KEYS[1])
  if p >= 0 then
    sleep = p
  end
end
if not reading and readers > 0 then
  local first = redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2]
  if first and (not sleep or tonumber(first) - now < sleep) then
    sleep = tonumber(first) - now
  end
end
if ahead and (not sleep or aheadLapse - now < sleep) then
  sleep = aheadLapse - now
end
return held_reply(sleep or -1, KEYS[2], t)
