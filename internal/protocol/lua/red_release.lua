-- red_release.lua: on one member of a RedLock, give back one hold of an
-- owner, or the lock itself. A lock freed while others wait is not granted:
-- the waiter whose registration lapses first is told to try, and only its
-- Client is told (a RedLock's members keep separate queues).
--
-- KEYS[1]  lock: hash of owner id -> hold count
-- KEYS[2]  fence: the last fence handed out
-- KEYS[3]  waiters: sorted set of owner ids, scored by when the entry lapses
-- ARGV[1]  owner: the owner id (mode "2": a waiter's)
-- ARGV[2]  channel: the channel stem; a waiter is told on ARGV[2] .. ":" .. its Client id
--          (the part of its owner id before the first ':'); the message is
--          its owner id, a space and its fence
-- ARGV[3]  mode: "1", the owner's last hold goes: free the lock
--          "0": one of several holds goes: set the owner's hold count to
--          ARGV[5] (the client keeps the authoritative count)
--          "2": the waiter ARGV[1] gives up: unregister it, and if it holds
--          the lock (its acquire's reply was lost), free it
-- ARGV[4]  grant: "0", as every release script's ARGV[4] would grant: here
--          the next waiter is always told to try
-- ARGV[5]  count: for mode "0", the hold count that remains
-- ARGV[6]  fence: ARGV[1]'s fence (0 if unknown), which a retry compares with
--          KEYS[2] (after, in lib_hash.lua)
-- ARGV[7]  void: (optional) the server time (ms) until which an acquire of
--          ARGV[1] may still reach this member (its reply was lost): the
--          fence key records ARGV[1] until then, and such an acquire changes
--          nothing (red_acquire.lua)
--
-- Returns:
--    1  released (mode 2: passed on or freed)
--    2  still held: one hold was given back
--    0  nothing done: another owner holds the lock (mode 2: the lock was not
--       granted to ARGV[1]; only its registration went)
--   -1  nothing done: nobody holds the lock (it expired, or was never taken,
--       or Redis lost its keys)
--    3  mode 1: nothing done: ARGV[1] holds nothing, and the fence key
--       still holds ARGV[1]'s fence: no lock was taken since, and its hold
--       ended by an earlier run of this release or, once its lease's time
--       was up, by expiry; the caller tells which by when the answer came
--
-- Run twice: a release that freed the lock finds the lock free of its owner
-- and the fence it left (or a later one) and answers 3; it writes nothing, so
-- the lock is not granted twice and no key is written for the call; mode
-- "0" sets the same count; mode "2" finds nothing more to do.
--
-- libraries: lib_common.lua lib_hash.lua
local mode = ARGV[3]
-- Every WRONGTYPE comes before the first write: the lock, then the queue.
local held = redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1
local waiting = redis.call('ZCARD', KEYS[3])
if mode == '1' and held and waiting == 0 and not ARGV[7] then
  -- The common case, with the least the script defines and calls.
  redis.call('DEL', KEYS[1])
  return 1
end
-- (shared functions the rest calls)
if ARGV[7] then
  -- Whatever follows, ARGV[1]'s late acquires take nothing: a record on
  -- the fence key until ARGV[7], which lives at least as long.
  local t, now = server_time()
  if tonumber(ARGV[7]) > now then
    local v = redis.call('GET', KEYS[2])
    local f, r = fence_parse(v)
    local keep
    r, keep = rec_add(r, ARGV[1], ARGV[7], false, now)
    local p = redis.call('PTTL', KEYS[2])
    redis.call('SET', KEYS[2], string.format('%.0f', f or 0) .. '|' .. r, 'PX', math.max(p, keep))
  end
end
if mode == '2' then
  redis.call('ZREM', KEYS[3], ARGV[1])
  if not held then
    return 0
  end
else
  local code = give_back(KEYS[1], KEYS[2], ARGV[1], mode, ARGV[5], ARGV[6], held)
  if code then
    return code
  end
end
redis.call('DEL', KEYS[1])
if waiting > 0 then
  local _, now = server_time()
  -- The waiter whose registration lapses first; lapsed ones go on the way.
  while true do
    -- ZRANGE and ZREM rather than ZPOPMIN: the commands the other
    -- scripts need are all an ACL has to allow.
    local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    if not head[1] then
      break
    end
    redis.call('ZREM', KEYS[3], head[1])
    if tonumber(head[2]) > now then
      tell(ARGV[2], head[1])
      break
    end
  end
end
return 1
