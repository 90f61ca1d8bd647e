-- giveback.lua: give an order's items back to its sale, for an order that
-- finally failed; the user may order again.
--
-- KEYS[1]  stock: what is left
-- KEYS[2]  buyers: hash of user -> "<order id>:<n>"
-- KEYS[3]  given: set of the order ids given back (expires with the sale)
-- ARGV[1]  user: the user id
-- ARGV[2]  order: the order id
--
-- Returns:
--    1  given back: n added to the stock, the user forgotten, the order id
--       recorded as given back
--    0  nothing to give back: the user has no order with that id
--   -1  no such sale
--
-- Run twice, the second run finds the order id given back and answers 1.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if redis.call('SISMEMBER', KEYS[3], ARGV[2]) == 1 then
  return 1
end
local prev = redis.call('HGET', KEYS[2], ARGV[1])
if not prev then
  return 0
end
local id, n = string.match(prev, '^(%d+):(%d+)$')
if id ~= ARGV[2] then
  return 0
end
redis.call('INCRBY', KEYS[1], n)
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[2])
return 1
