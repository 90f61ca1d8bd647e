-- sem_release.lua: give back a holder's permits, take a waiter out of the
-- queue, or set, read or remove the total; then wake the waiters that can now
-- proceed.
--
-- KEYS[1]  semaphore: the hash, as in sem_acquire.lua; also "set" -> the ids
--          of the latest SetPermits calls (mode "3"), and once a Delete (mode
--          "5") removed a total, "deleted" -> that call's id: after either the
--          hash lives ARGV[6] ms at least; "evicted:" .. owner id -> 1 for a
--          holder ForceRelease took the permits of (mode "6"), and "void:"
--          .. owner id -> a deadline (ms) for an owner that ended while an
--          acquire of its may still reach Redis (ARGV[8]), each until then
-- KEYS[2]  waiters: the queue, a sorted set of waiting owner ids, scored by arrival
-- KEYS[3]  alive: hash of waiting owner id -> "<lapse ms>|<permits wanted>"
-- KEYS[4]  holders: sorted set of owner ids, scored by when their lease lapses
-- KEYS[5]  total: the total set with SetPermits, with no expiry
-- KEYS[6]  fence: the last fence handed out, as in sem_acquire.lua
-- ARGV[1]  owner: the owner id (modes "3" and "5": the call's own id)
-- ARGV[2]  channel: the channel stem; a waiter is told on ARGV[2] .. ":" .. its Client id
-- ARGV[3]  mode: "1", give back ARGV[1]'s permits
--          "2": the waiter ARGV[1] gives up
--          "3": store ARGV[5] as the total (SetPermits)
--          "4": only report the permits available
--          "5": remove the stored total
--          "6": as "1", for ForceRelease: the hash records it until the
--          lease would have lapsed, and ARGV[1]'s own release and renewal say
--          so (4)
-- ARGV[4]  reserve: unused (a semaphore keeps nothing for a waiter)
-- ARGV[5]  total: for mode "3", the new total; modes "4" and "5": the total when none
--          is stored and the semaphore hash has none either (modes "1" and
--          "2" find it there)
-- ARGV[6]  remnant_ttl: modes "3" and "5": how long (ms) at least the
--          semaphore hash keeps the call's id
-- ARGV[7]  fence: (optional: modes "1" and "2"; "0" if unknown) ARGV[1]'s
--          fence, by which a retry finds whether an earlier run freed its
--          permits (after, in lib_hash.lua)
-- ARGV[8]  void: (optional; modes "1" and "2") the server time (ms) until
--          which an acquire of ARGV[1] may still reach Redis (its reply was
--          lost): the hash records ARGV[1] until then, and such an acquire
--          changes nothing (sem_acquire.lua)
--
-- Every waiter that now fits, counting what the live waiters before it want,
-- is told (its owner id is published on its Client's channel); the first that
-- does not fit stops the telling, so nobody is overtaken. A waiter that wants
-- more than the total is passed over: it holds nobody up. A total lowered
-- below the permits in use takes none back and tells nobody: nobody fits
-- until the holders have given back enough.
--
-- Returns:
--   mode 1:  1 given back
--            3 nothing given back: ARGV[1] holds nothing, and the fence key
--              still holds its fence: nobody acquired permits since, and
--              its hold ended by an earlier run of this release or, once
--              its time was up, by expiry (the caller tells which by when
--              the answer came)
--           -1 nothing given back: ARGV[1] holds nothing, and the keys do not
--              show that (they were lost, or made again, since)
--            4 nothing given back: ForceRelease took them (mode "6")
--   mode 2:  0
--   mode 3:  1
--   mode 4:  the permits available (total - used)
--   mode 5:  1 a total was removed; 0 there was none
--
-- Run twice (a call is sent again when its reply is lost): a give-back finds
-- its holder gone and answers 3; nothing is given back twice. A SetPermits finds its id among the last
-- 16 in "set" and answers 1, changing nothing (a total another call set or
-- removed since stays), until ARGV[6] ms have passed since the latest
-- SetPermits. A Delete finds its id as "deleted" and answers 1, removing
-- nothing (a total set since stays), until another Delete removes a total or
-- ARGV[6] ms have passed. Giving up a wait and reading give the same outcome
-- whenever they run again.
--
-- libraries: lib_common.lua lib_queue.lua lib_hash.lua

-- recent returns the ids of the list ids (separated by spaces, oldest first;
-- nil for none) with id added last, the last 16 of them.
local function recent(ids, id)
  local list = {}
  for w in string.gmatch(ids or '', '%S+') do
    list[#list + 1] = w
  end
  list[#list + 1] = id
  return table.concat(list, ' ', math.max(1, #list - 15))
end

local mode = ARGV[3]
local stored = tonumber(redis.call('GET', KEYS[5])) -- type checks, before any write
redis.call('ZCARD', KEYS[2])
redis.call('HLEN', KEYS[3])
redis.call('ZCARD', KEYS[4])
local now = now_ms()
local res, given = 0, 0
if ARGV[8] and tonumber(ARGV[8]) > now then
  -- Whatever follows, ARGV[1]'s late acquires take nothing.
  redis.call('HSET', KEYS[1], 'void:' .. ARGV[1], ARGV[8])
  at_least(KEYS[1], tonumber(ARGV[8]) - now)
end

if mode == '0' or mode == '1' or mode == '6' then
  local lapse = tonumber(redis.call('ZSCORE', KEYS[4], ARGV[1]))
  local v = redis.call('HGET', KEYS[1], ARGV[1])
  if v then
    given = tonumber(string.match(v, '^(%d+)')) or 0
    redis.call('HDEL', KEYS[1], ARGV[1], 'gen:' .. ARGV[1])
  end
  redis.call('ZREM', KEYS[4], ARGV[1])
  if v and lapse and lapse > now then
    res = 1
    if mode == '6' then
      redis.call('HSET', KEYS[1], 'evicted:' .. ARGV[1], 1)
      at_least(KEYS[1], lapse - now)
    end
  elseif redis.call('HEXISTS', KEYS[1], 'evicted:' .. ARGV[1]) == 1 then
    res = 4
  else
    res = -1
    if mode ~= '0' and ARGV[7] and after(KEYS[6], ARGV[7]) then
      res = 3
    end
  end
elseif mode == '2' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
elseif mode == '3' then
  local ids = redis.call('HGET', KEYS[1], 'set')
  if ids and string.find(' ' .. ids .. ' ', ' ' .. ARGV[1] .. ' ', 1, true) then
    return 1
  end
  redis.call('SET', KEYS[5], ARGV[5])
  redis.call('HSET', KEYS[1], 'set', recent(ids, ARGV[1]))
  at_least(KEYS[1], ARGV[6])
  stored = tonumber(ARGV[5])
  res = 1
elseif mode == '5' then
  if redis.call('HGET', KEYS[1], 'deleted') == ARGV[1] then
    return 1
  end
  res = redis.call('DEL', KEYS[5])
  if res == 1 then
    redis.call('HSET', KEYS[1], 'deleted', ARGV[1])
    at_least(KEYS[1], ARGV[6])
  end
  stored = nil
end
local total = stored or tonumber(redis.call('HGET', KEYS[1], 'permits')) or tonumber(ARGV[5])

-- Permits given back and those of holders whose lease lapsed come back.
local used = math.max(sem_used(KEYS[1], KEYS[4], now) - given, 0)
put_used(KEYS[1], used)
if mode == '4' then
  return total - used
end

local free = total - used
for w, _, k in live_waiters(KEYS[2], KEYS[3], now, '%d+') do
  local n = tonumber(k)
  if n <= total then
    if n > free then
      break
    end
    free = free - n
    tell(ARGV[2], w)
  end
end
return res
