-- group_share.lua: leave the result of a Group key's run for the callers
-- that wait for it, if the caller still runs it.
--
-- KEYS[1]  lock: the key's lock state (a string, lib_state.lua)
-- KEYS[2]  result: the latest result, a hash: f (the fence of the run that
--          made it), t (the server time, ms, when it was left), e ("1" if
--          it is an error's message, else "0"), v (the value or message)
-- ARGV[1]  owner: the runner's owner id
-- ARGV[2]  fence: the fence of its lease
-- ARGV[3]  value: the value, or the error's message
-- ARGV[4]  failed: "1" if ARGV[3] is an error's message, else "0"
-- ARGV[5]  keep: how long (ms) the result is kept
--
-- Returns:
--    1  the result is left (by this call, or by an earlier copy of it)
--    0  nothing done: ARGV[1] does not hold the lock with fence ARGV[2]
--
-- Run twice: the copy that finds the result of its own fence answers 1 and
-- writes nothing. Run late, after the runner released: the lock is not its
-- any more, and nothing is written, so a later run's result stays.
--
-- libraries: lib_common.lua lib_state.lua
local fence = tonumber(ARGV[2])
if tonumber(redis.call('HGET', KEYS[2], 'f')) == fence then
  return 1
end
local s = st_read(KEYS[1])
local now = now_ms()
if not (s and s.o == ARGV[1] and s.f == fence and st_live(s, now)) then
  return 0
end
redis.call('HSET', KEYS[2], 'f', ARGV[2], 't', now, 'e', ARGV[4], 'v', ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
