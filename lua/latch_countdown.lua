-- latch_countdown.lua: count a latch down by one. At zero the latch opens:
-- its count is deleted and every waiter, in every process, is woken.
--
-- KEYS[1]  the latch's count: a string holding a positive integer, no expiry
-- ARGV[1]  the latch's channel; "*" is published on it when the count
--          reaches zero
--
-- Returns:
--   > 0  the count left
--     0  the count reached zero: the latch opened
--    -1  nothing done: the latch has no count
--
-- DECR fails on a value that is not an integer before anything is written.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local n = redis.call('DECR', KEYS[1])
if n > 0 then
  return n
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], '*')
return 0
