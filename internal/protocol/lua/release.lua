-- release.lua: give back one hold of an owner of a Mutex or a FairMutex,
-- or the lock itself, or an Election's lease. A lock freed while others are
-- queued is granted at once to the first live waiter (st_grant): it holds
-- the lock for a short grant lease, with a new fence, and only its Client is
-- told; an Election's leader record says it leads from then on. (A waiter
-- that gives up runs leave.lua; ForceRelease, evict.lua.)
--
-- KEYS[1]  lock: the lock's state, a string (lib_state.lua)
-- KEYS[2]  waiters: the queue, a sorted set of waiting owner ids, scored by arrival
-- KEYS[3]  alive: hash of waiting owner id -> "<lapse>|<grant>", as acquire.lua
--          writes it; an Election's candidate's entry carries its value
--          (acquire.lua)
-- KEYS[4]  leader: (an Election's only) its leader record (st_hold in
--          lib_state.lua): written for the candidate a freed lease is granted
--          to, deleted when nobody is (and the change published on the
--          channel of its name)
-- ARGV[1]  owner: the owner id
-- ARGV[2]  channel: the channel stem; a waiter is told on ARGV[2] .. ":" .. its Client id
--          (the part of its owner id before the first ':'), as tell writes it
-- ARGV[3]  mode: "1", the owner's last hold goes: free the lock
--          "0": one of several holds goes: set the owner's hold count to
--          ARGV[7] (the client keeps the authoritative count)
--          "4": as "1", for a hold that was granted: others likely wait, so
--          the state is read first rather than written first (the common
--          case below), which would only have to be put back
-- ARGV[4]  grant: the grant lease (ms) of a waiter the lock is granted to, if
--          its entry names none
-- ARGV[5]  fence: ARGV[1]'s fence (0 if unknown), by which a retry finds
--          whether an earlier run of it freed the lock (st_give_back in
--          lib_state.lua)
-- ARGV[6]  order: "0" (a Mutex) takes a grantee out of the queue: if its
--          grant lapses (it was paused past it), the next live waiter is
--          served, and it goes to the back when it returns; "1" (a
--          FairMutex) leaves it at the head until it releases or its
--          registration lapses
-- ARGV[7]  count: (optional: mode "0"'s, or "0" before ARGV[8]) the hold
--          count that remains (Redis turns every argument into a Lua string
--          before the script runs, so the other modes do not send it)
-- ARGV[8]  void: (optional; modes "1" and "4") the server time (ms)
--          until which an acquire of ARGV[1] may still reach Redis (its
--          reply was lost): the state records ARGV[1] until then, and such
--          an acquire changes nothing (acquire.lua)
--
-- Returns:
--    1  released
--    2  still held: one hold was given back
--    0  nothing done: another owner holds the lock, and the state shows no
--       release of ARGV[1]'s hold
--   -1  nothing done: nobody holds the lock (it expired, or was never taken,
--       or Redis lost its keys), and the state shows no release of ARGV[1]'s
--       hold
--    3  modes 1 and 4: nothing done: ARGV[1] holds nothing, and the state
--       shows that an earlier run of this release freed the lock: it is free
--       with ARGV[1]'s fence, or lists it (its link: the lock went on from
--       that release, by a take or a grant, a few holders at most since)
--    4  modes 1 and 4: nothing done: ARGV[1]'s hold was taken away by
--       ForceRelease (evict.lua)
--
-- Run twice: a release that freed the lock finds the state free with the
-- fence it left, or listing that fence, and answers 3; it
-- leaves every key as it found it (an Election's leader record is left to
-- the lease's next holder), so the lock is not granted twice and no key is
-- written for the call; mode "0" sets the same count. A record, if asked
-- for, is written once per owner.
--
-- libraries: lib_common.lua lib_queue.lua lib_state.lua
local mode = ARGV[3]
local v
if mode == '1' and ARGV[5] ~= '0' and not ARGV[8] then
  -- The common case, with the least the script defines and calls: the
  -- owner gives back its one hold, its lease ending with the key, and
  -- nobody waits: the state is "<fence>|1|0|0|<owner>", with the fence the
  -- owner was given (ARGV[5]; without one, as when an acquire whose answer
  -- was lost is undone, nothing can match, and the state is read first),
  -- and maybe its link ("|" and fences). One command writes the free state
  -- "<fence>", which stays until the lease would have ended so that a retry
  -- finds the fence, and reads what it replaced; one string compared, none
  -- parsed. Anything else is put back as it was, expiry included, before
  -- the rest reads it: no other script runs in between, so nothing else
  -- sees it. (SET raises WRONGTYPE before it writes; a key that holds no
  -- state is put back before the rest raises.)
  v = redis.call('SET', KEYS[1], ARGV[5], 'KEEPTTL', 'GET')
  if v then
    local e = ARGV[5] .. '|1|0|0|' .. ARGV[1]
    if v == e or (string.find(v, e, 1, true) == 1 and string.find(v, '^|[%d,]+$', #e + 1)) then
      if KEYS[4] then
        -- An Election's: nobody leads now.
        redis.call('DEL', KEYS[4])
        redis.call('SPUBLISH', KEYS[4], '*')
      end
      return 1
    end
    redis.call('SET', KEYS[1], v, 'KEEPTTL')
  else
    redis.call('DEL', KEYS[1])
  end
else
  -- Every WRONGTYPE, and a lock key that holds no state, raises before the
  -- first write: the state's, then the queue's where the script reads it.
  v = redis.call('GET', KEYS[1])
  if mode == '4' then
    mode = '1'
  end
end
-- (shared functions the rest calls)
local s = st_read(KEYS[1], v)
local t, now = server_time()
local held = s ~= nil and s.o == ARGV[1] and st_live(s, now)
if mode ~= '1' or ARGV[6] == '1' then
  -- A type check, before the writes to alive below: a Mutex's release
  -- reads alive first in the walk, or not at all.
  redis.call('HLEN', KEYS[3])
end
local code = st_give_back(KEYS[1], s, ARGV[1], mode, ARGV[7], ARGV[5], held, now)
local need
s, need = st_void(s, ARGV[1], ARGV[8], now)
if code then
  if need > 0 then
    st_keep(KEYS[1], s, need, now)
  end
  return code
end
-- The owner's last hold has gone. A grant follows this release (owner's)
-- and those the state lists.
s.o = ''
st_pass_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], s, ARGV[1], st_links(s), ARGV[4], ARGV[2], ARGV[6], t, now)
return 1
