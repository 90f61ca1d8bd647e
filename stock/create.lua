-- create.lua: create a sale with its stock, if it does not exist.
--
-- KEYS[1]  stock: what is left
-- KEYS[2]  buyers: hash of user -> "<order id>:<n>"; its field "" holds the
--          id of the request that created the sale
-- KEYS[3]  given: set of the order ids given back (its member "" keeps it)
-- KEYS[4]  orders: stream of order intents
-- ARGV[1]  stock: how many items the sale has
-- ARGV[2]  ttl: how long (ms) the sale's keys live
-- ARGV[3]  group: the consumer group to create on the stream
-- ARGV[4]  request: this request's id
--
-- Returns 1 if this request created the sale, 0 if it exists already
-- (nothing changed). Run twice, the second run finds the request's own id
-- and answers 1 again.
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[2], '') == ARGV[4] then
    return 1
  end
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('HSET', KEYS[2], '', ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('SADD', KEYS[3], '')
redis.call('PEXPIRE', KEYS[3], ARGV[2])
if redis.call('EXISTS', KEYS[4]) == 0 then
  redis.call('XGROUP', 'CREATE', KEYS[4], ARGV[3], '0', 'MKSTREAM')
end
redis.call('PEXPIRE', KEYS[4], ARGV[2])
return 1
