-- leave.lua: a waiter of a Mutex, a FairMutex or an Election gives up its
-- place: take it out of the queue; and if the lock was granted to it (its
-- Lock gave up before it heard), pass the lock on as its release would:
-- grant it at once to the next live waiter (st_grant), or free it.
--
-- KEYS[1]  lock: the lock's state, a string (lib_state.lua)
-- KEYS[2]  waiters: the queue, as acquire.lua names it
-- KEYS[3]  alive: the waiters' entries, as acquire.lua writes them
-- KEYS[4]  leader: (an Election's only) its leader record, as release.lua
--          writes or deletes it
-- ARGV[1]  owner: the waiter's owner id
-- ARGV[2]  channel: the channel stem, as release.lua's ARGV[2]
-- ARGV[3]  grant: the grant lease (ms) of a waiter the lock is passed to, if
--          its entry names none
-- ARGV[4]  order: as release.lua's ARGV[6]
-- ARGV[5]  void: (optional) the server time (ms) until which an acquire of
--          ARGV[1] may still reach Redis (its reply was lost): the state
--          records ARGV[1] until then, and such an acquire changes nothing
--          (acquire.lua)
--
-- Returns:
--    1  the lock had been granted to ARGV[1]: passed on or freed
--    0  the lock was not ARGV[1]'s (another owner holds it, or nobody does):
--       only its registration went
--
-- Run twice: the second run finds the registration gone and the lock passed
-- on, or never granted to ARGV[1], and answers 0, changing nothing; a
-- record, if asked for, is written once.
--
-- libraries: lib_common.lua lib_queue.lua lib_state.lua
local me = ARGV[1]
-- Every WRONGTYPE, and a lock key that holds no state, raises before the
-- first write: the state's, then alive's.
local s = st_read(KEYS[1])
local t, now = server_time()
local held = s ~= nil and s.o == me and st_live(s, now)
redis.call('HLEN', KEYS[3])
redis.call('ZREM', KEYS[2], me)
redis.call('HDEL', KEYS[3], me)
local need
s, need = st_void(s, me, ARGV[5], now)
if not held then
  if need > 0 then
    st_keep(KEYS[1], s, need, now)
  end
  return 0
end
-- A grant follows what the state lists: the releases before the grant to
-- ARGV[1].
st_pass_on(KEYS[1], KEYS[2], KEYS[3], KEYS[4], s, me, s.l, ARGV[3], ARGV[2], ARGV[4], t, now)
return 1
