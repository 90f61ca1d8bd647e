-- release.lua: give back one hold of an owner, or the lock itself. A lock
-- freed while others wait is granted at once to the waiter registered
-- longest ago (grant): it holds the lock for a short grant lease, with a new
-- fence, and only its Client is told.
--
-- KEYS[1]  lock: hash of owner id -> hold count
-- KEYS[2]  fence: the last fence handed out
-- KEYS[3]  waiters: sorted set of owner ids, scored by when the entry lapses
-- KEYS[4]  marker: the release marker of ARGV[1], set when its last hold goes, for
--          ARGV[6] ms, so that a retried release knows it happened
-- ARGV[1]  owner: the owner id (mode "2": a waiter's)
-- ARGV[2]  channel: the channel stem; a waiter is told on ARGV[2] .. ":" .. its Client id
--          (the part of its owner id before the first ':'); the message is
--          its owner id, a space and its fence
-- ARGV[3]  mode: "1", the owner's last hold goes: free the lock
--          "0": one of several holds goes: set the owner's hold count to
--          ARGV[5] (the client keeps the authoritative count)
--          "2": the waiter ARGV[1] gives up: unregister it, and if the lock
--          was granted to it, grant it to the next waiter instead, or free it
-- ARGV[4]  grant: the grant lease (ms) of a waiter the lock is granted to;
--          "0" grants nothing: the waiter is told to try again (a RedLock
--          node, whose queue is one of several)
-- ARGV[5]  count: for mode "0", the hold count that remains
-- ARGV[6]  marker_ttl: how long (ms) the release marker lives
--
-- Returns:
--    1  released (mode 2: passed on or freed)
--    2  still held: one hold was given back
--    0  nothing done: another owner holds the lock (mode 2: the lock was not
--       granted to ARGV[1]; only its registration went)
--   -1  nothing done: nobody holds the lock (it expired, or was never taken)
--
-- Run twice: a release that freed the lock finds its marker and answers 1
-- again (the lock is not granted twice); mode "0" sets the same count; mode
-- "2" finds nothing more to do.
local mode = ARGV[3]
-- Every WRONGTYPE comes before the first write: the lock, then the queue.
local held = redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1
local waiting = redis.call('ZCARD', KEYS[3])
if mode == '1' and held and waiting == 0 then
  -- The common case, with the least the script defines and calls.
  redis.call('SET', KEYS[4], 1, 'PX', ARGV[6])
  redis.call('DEL', KEYS[1])
  return 1
end
-- (shared functions the rest calls)
if waiting > 0 then
  redis.call('STRLEN', KEYS[2]) -- a grant writes it
end
if mode == '2' then
  redis.call('ZREM', KEYS[3], ARGV[1])
  if not held then
    return 0
  end
else
  local code = give_back(KEYS[1], ARGV[1], mode, ARGV[5], KEYS[4], held)
  if code then
    return code
  end
  redis.call('SET', KEYS[4], 1, 'PX', ARGV[6])
end
redis.call('DEL', KEYS[1])
if waiting > 0 then
  local t, now = server_time()
  -- The waiter whose registration lapses first; lapsed ones go on the way.
  while true do
    local head = redis.call('ZPOPMIN', KEYS[3])
    if not head[1] then
      break
    end
    if tonumber(head[2]) > now then
      if ARGV[4] == '0' then
        tell(ARGV[2], head[1])
      else
        grant(KEYS[1], KEYS[2], head[1], ARGV[4], t, ARGV[2])
      end
      break
    end
  end
end
return 1
