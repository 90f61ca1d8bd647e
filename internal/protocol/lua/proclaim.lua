-- proclaim.lua: set the value of an Election's leader, if the caller leads
-- in the given term, unless a later Proclaim of that term ran first.
--
-- KEYS[1]  lock: the Election's lock state (a string, lib_state.lua)
-- KEYS[2]  leader: its leader record (leader.lua)
-- ARGV[1]  owner: the leader's owner id
-- ARGV[2]  term: its term (its lease's fence)
-- ARGV[3]  seq: how many Proclaims the leader had sent in this term when it
--          sent this one, itself included
-- ARGV[4]  value: the new value
--
-- Returns:
--    1  the record holds this Proclaim's value, or a later one's (the
--       change, if any, is published as "*" on the channel of the record's
--       name)
--    0  nothing done: another owner holds the lease, or the record is not
--       ARGV[1]'s of term ARGV[2]
--   -1  nothing done: nobody holds the lease
--
-- Run twice, or late: a Proclaim whose seq is not above the record's changes
-- nothing and answers 1, so a retry writes nothing twice and an earlier
-- Proclaim that runs after a later one does not undo it.
--
-- libraries: lib_common.lua lib_state.lua
local s = st_read(KEYS[1])
local now = s and s.u ~= 0 and now_ms() or nil
if not (s and s.o == ARGV[1] and st_live(s, now)) then
  if not st_live(s, now) then
    return -1
  end
  return 0
end
local r = redis.call('HMGET', KEYS[2], 'owner', 'term', 'seq')
if r[1] ~= ARGV[1] or tonumber(r[2]) ~= tonumber(ARGV[2]) then
  return 0
end
if (tonumber(r[3]) or 0) < tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[2], 'value', ARGV[4], 'seq', ARGV[3])
  redis.call('SPUBLISH', KEYS[2], '*')
end
return 1
