-- red_acquire.lua: on one member of a RedLock, take a free Mutex, register
-- the caller as a waiter if it is held, or re-enter a hold the caller has.
-- The members keep no order among the waiters (each has a queue of its own):
-- the first to come takes a free lock.
--
-- KEYS[1]  lock: hash of owner id -> hold count, with a PX expiry
-- KEYS[2]  fence: the last fence handed out, expiring no sooner than the lock,
--          followed by "|" and records (lib_common.lua) while an owner that
--          ended may still have an acquire on its way
-- KEYS[3]  waiters: sorted set of waiting owner ids, each scored by the server
--          time (ms) at which the entry lapses unless renewed; the key expires
--          when the last entry would
-- ARGV[1]  owner: the owner id
-- ARGV[2]  ttl: the TTL in milliseconds
-- ARGV[3]  deadline: the server time (ms) from which this request changes
--          nothing (a copy whose reply was lost may reach Redis late)
-- ARGV[4]  mode: "0" to take the lock; "1" to re-enter a hold of ARGV[1]
-- ARGV[5]  register: taking, "0" not to register, else how long (ms) the caller stays
--          registered as a waiter when the lock is held; re-entering: the
--          owner's hold count after this re-entry
--
-- Returns:
--    > 0  acquired; the value is the fence. If the caller held the lock
--         already (a retry of a take that succeeded), its lease is left as
--         it is: the client counts from before the first copy was sent.
--      0  re-entered: hold count set, expiry unchanged
--     -1  re-enter asked, but ARGV[1] holds nothing: its lease is gone
--   {c, f, t} held by another owner, whose remaining TTL in ms is -c - 3 (-2:
--         the key has no expiry); f is the fence floor (fence_floor): a grant
--         made to the caller after this call has a fence above f; t is the
--         server time in µs
--   {0, t} nothing done: the request came after its deadline, or after its
--         owner ended (the fence key records it: red_release.lua); t is the
--         server time in µs
--
-- Run twice (a retry after a lost reply): a take that succeeded finds the
-- caller holding and answers the same fence; a re-entry sets the same count;
-- a registration is renewed. Run late, after its deadline, it changes
-- nothing.
--
-- Lua does not roll back, so every check (and every WRONGTYPE it can raise)
-- comes before the first write.
--
-- libraries: lib_common.lua lib_hash.lua
local me = ARGV[1]
-- The common case first: a free lock is taken with the least the script
-- defines and calls. PTTL tells a free lock (no key) from a held one, whose
-- remaining TTL a waiter is told.
local pttl
if ARGV[4] ~= '1' then
  pttl = redis.call('PTTL', KEYS[1])
  if pttl == -2 then
    local t = redis.call('TIME')
    if t[1] * 1000 + t[2] / 1000 >= tonumber(ARGV[3]) then
      return {0, t[1] * 1000000 + t[2]}
    end
    if ARGV[5] ~= '0' then
      redis.call('ZREM', KEYS[3], me)
    end
    local f = take(KEYS[1], KEYS[2], me, ARGV[2], t)
    if not f then
      -- The fence key records the owner: it has ended.
      return {0, t[1] * 1000000 + t[2]}
    end
    return f
  end
end
-- (shared functions the rest calls)
local t, now = server_time()
local _, recs = fence_parse(redis.call('GET', KEYS[2]))
if now >= tonumber(ARGV[3]) or rec_find(recs, me, now) then
  return {0, micros(t)}
end
if ARGV[4] == '1' then
  return reenter(KEYS[1], me, ARGV[5])
end
if redis.call('HEXISTS', KEYS[1], me) == 1 then
  return held_again(KEYS[1], KEYS[2])
end
if ARGV[5] ~= '0' then
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[5]), me)
  at_least(KEYS[3], ARGV[5])
end
return held_reply(pttl, KEYS[2], t)
