-- latch.lua: count a latch down by one, set its count if it has none, or
-- remove its count. When the count goes (down to zero, or removed) the latch
-- opens: every waiter, in every process, is woken.
--
-- KEYS[1]  count: the latch's count, a string holding a positive integer, no expiry
-- KEYS[2]  marker: this call's marker, its answer, kept for ARGV[4] ms, so that a
--          retry of the same call (after a lost reply) answers the same and
--          counts nothing twice
-- ARGV[1]  mode: "down", count down by one
--          "set": set the count to ARGV[3] if the latch has none
--          "delete": remove the count
-- ARGV[2]  channel: the latch's channel; "*" is published on it when the latch opens
-- ARGV[3]  count: for "set", the count
-- ARGV[4]  marker_ttl: how long (ms) the marker lives
--
-- Returns:
--   "down":   > 0 the count left; 0 the count reached zero and the latch
--             opened; -1 nothing done: the latch has no count
--   "set":    1 set; 0 nothing done: the latch has a count
--   "delete": 1 removed (the latch opened); 0 nothing done: it had no count
--
-- DECR fails on a value that is not an integer before anything is written.
local done = redis.call('GET', KEYS[2])
if done then
  return tonumber(done)
end
local mode, res = ARGV[1], 0
if mode == 'down' then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    res = -1
  else
    res = redis.call('DECR', KEYS[1])
    if res <= 0 then
      res = 0
      redis.call('DEL', KEYS[1])
      redis.call('SPUBLISH', ARGV[2], '*')
    end
  end
elseif mode == 'set' then
  if redis.call('SET', KEYS[1], ARGV[3], 'NX') then
    res = 1
  end
elseif redis.call('DEL', KEYS[1]) == 1 then
  res = 1
  redis.call('SPUBLISH', ARGV[2], '*')
end
redis.call('SET', KEYS[2], res, 'PX', ARGV[4])
return res
