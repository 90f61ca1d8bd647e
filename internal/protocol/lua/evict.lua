-- evict.lua: ForceRelease of the holder of a Mutex, a FairMutex or an
-- Election: take its hold away, whatever its count, and pass the lock on as
-- its release of its last hold would (release.lua). A record in the state,
-- marked, says so until the hold's lease would have ended: its owner's
-- release and renewal then answer 4.
--
-- KEYS[1]  lock: the lock's state, a string (lib_state.lua)
-- KEYS[2]  waiters: the queue, as acquire.lua names it
-- KEYS[3]  alive: the waiters' entries, as acquire.lua writes them
-- KEYS[4]  leader: (an Election's only) its leader record, as release.lua
--          writes or deletes it
-- ARGV[1]  owner: the holder's owner id
-- ARGV[2]  channel: the channel stem, as release.lua's ARGV[2]
-- ARGV[3]  grant: the grant lease (ms) of a waiter the lock is passed to, if
--          its entry names none
-- ARGV[4]  fence: ARGV[1]'s fence (0 if unknown), by which the state shows
--          whether ARGV[1]'s own release freed the lock (st_not_held in
--          lib_state.lua)
-- ARGV[5]  order: as release.lua's ARGV[6]
--
-- Returns, as release.lua does:
--    1  taken away: the lock is passed on, or free
--    0  nothing done: another owner holds the lock, and the state shows no
--       release of ARGV[1]'s hold
--   -1  nothing done: nobody holds the lock, and the state shows no release
--       of ARGV[1]'s hold
--    3  nothing done: ARGV[1] holds nothing, and the state shows that its
--       release freed the lock
--    4  nothing done: ARGV[1]'s hold was taken away already, by an earlier
--       run of this request or another ForceRelease
--
-- Run twice: the second run finds the record the first left and answers 4,
-- changing nothing.
--
-- libraries: lib_common.lua lib_queue.lua lib_state.lua
local me = ARGV[1]
-- Every WRONGTYPE, and a lock key that holds no state, raises before the
-- first write: the state's, then alive's.
local s = st_read(KEYS[1])
local t, now = server_time()
local held = s ~= nil and s.o == me and st_live(s, now)
redis.call('HLEN', KEYS[3])
if not held then
  return st_not_held(s, me, true, ARGV[4], now)
end
local left = st_left(KEYS[1], s, now)
st_keep(KEYS[1], s, st_note(s, me, string.format('%.0f', now + math.max(left, 1)), true, now), now)
-- A grant follows what the state lists: the hold taken away released
-- nothing.
st_pass_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], s, me, s.l, ARGV[3], ARGV[2], ARGV[5], t, now)
return 1
