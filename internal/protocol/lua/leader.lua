-- leader.lua: read who leads an Election, writing nothing (EVALSHA_RO).
--
-- KEYS[1]  lock: the Election's lock state (a string, lib_state.lua)
-- KEYS[2]  leader: its leader record, a hash: owner, term, since, value,
--          seq (st_hold in lib_state.lua writes it when the lease is granted,
--          proclaim.lua its value and seq)
--
-- Returns {pttl, term, since, value, seq} while the record's owner holds
-- the lease, pttl being what the lease has left (ms); {-2} otherwise: nobody
-- leads. A record whose lease has ended (it expired; the record lives at
-- least as long) says nothing.
--
-- libraries: lib_common.lua lib_state.lua
local r = redis.call('HMGET', KEYS[2], 'owner', 'term', 'since', 'value', 'seq')
local s = st_read(KEYS[1])
local now = s and s.u ~= 0 and now_ms() or nil
if r[1] and s and s.o == r[1] and st_live(s, now) then
  return {st_left(KEYS[1], s, now), r[2], r[3], r[4], r[5]}
end
return {-2}
