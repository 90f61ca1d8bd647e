-- buy.lua: one user's order in a sale, checked and deducted in one step.
--
-- KEYS[1]  stock: what is left, an integer (the sale exists while it does)
-- KEYS[2]  buyers: hash of user -> "<order id>:<n>" of the order they have
--          (it expires with the sale)
-- KEYS[3]  orders: stream of order intents, one entry per order
-- ARGV[1]  user: the user id
-- ARGV[2]  n: how many items, at least 1
-- ARGV[3]  order: the order id this request would make
--
-- Returns {code, order id, left}:
--    1  ordered: n deducted, the user remembered with the order id, and an
--       entry (order, user, n) appended to the stream
--    2  the user has an order in this sale already: its id
--    0  sold out: fewer than n left (nothing changed)
--   -1  no such sale (not created, or over)
--
-- Run twice with the same order id (go-redis retrying after a lost reply),
-- the second run finds the user's order with that id and answers 1 again:
-- deducted once, one stream entry, the same order id.
local left = redis.call('GET', KEYS[1])
if not left then
  return {-1, 0, 0}
end
local prev = redis.call('HGET', KEYS[2], ARGV[1])
if prev then
  local id = string.match(prev, '^(%d+):')
  if id == ARGV[3] then
    return {1, id, tonumber(left)}
  end
  return {2, id, tonumber(left)}
end
local n = tonumber(ARGV[2])
if tonumber(left) < n then
  return {0, 0, tonumber(left)}
end
left = redis.call('DECRBY', KEYS[1], n)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3] .. ':' .. ARGV[2])
redis.call('XADD', KEYS[3], '*', 'order', ARGV[3], 'user', ARGV[1], 'n', ARGV[2])
return {1, ARGV[3], left}
