-- leader.lua: read who leads an Election, writing nothing (EVALSHA_RO).
--
-- KEYS[1]  lock: the Election's lock hash (owner id -> hold count)
-- KEYS[2]  leader: its leader record, a hash: owner, term, since, value,
--          seq (take in lib.lua writes it when the lease is granted,
--          proclaim.lua its value and seq)
--
-- Returns {pttl, term, since, value, seq} while the record's owner holds
-- the lease, pttl being what the lease has left (ms); {-2} otherwise: nobody
-- leads. A record whose lease has ended (it expired; the record lives at
-- least as long) says nothing.
local r = redis.call('HMGET', KEYS[2], 'owner', 'term', 'since', 'value', 'seq')
if r[1] and redis.call('HEXISTS', KEYS[1], r[1]) == 1 then
  return {redis.call('PTTL', KEYS[1]), r[2], r[3], r[4], r[5]}
end
return {-2}
