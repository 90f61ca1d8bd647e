-- raise_fence.lua: make a lock's fence at least a given one. On one node of a
-- RedLock: the fence an acquisition returned, the largest over the majority
-- of nodes that granted it; it is written to every node, not only that
-- majority, so that every later majority shares a node that has it even
-- after a minority of nodes lost their data; so every later fence is above
-- it. After ForceRelease (no owner): a fence above every evicted hold's.
--
-- KEYS[1]  lock: a lock's state (a string, lib_state.lua: ARGV[4] "s"), or a
--          lock hash of owner id -> hold count, beside
-- KEYS[2]  fence: (a lock hash's only) the last fence handed out on this node
-- ARGV[1]  owner: the owner id, "" for none
-- ARGV[2]  fence: the fence to raise the lock's to
-- ARGV[3]  ttl: the lock's TTL in milliseconds; the fence lives at least
--          as long (a state's lease does not: it ends when it would have)
-- ARGV[4]  type: "s" for a lock's state, else "h"
--
-- Returns 1 if the owner holds the lock here, else 0; either way the fence
-- is at least ARGV[2] now.
--
-- Run twice: the second run finds the fence raised already.
--
-- libraries: lib_common.lua lib_state.lua lib_hash.lua
local want, ms = tonumber(ARGV[2]), tonumber(ARGV[3])
if ARGV[4] == 's' then
  local s = st_read(KEYS[1])
  if not s then
    -- Waiters may be queued: a free state that says so sends the next
    -- taker through the queue.
    st_write(KEYS[1], {fs = ARGV[2], c = 0, m = '1', u = 0, o = '', l = '', r = ''}, ms)
    return 0
  end
  local now = s.u ~= 0 and now_ms() or nil
  local held = s.o ~= '' and s.o == ARGV[1] and st_live(s, now)
  local p = redis.call('PTTL', KEYS[1])
  if s.f < want or (p >= 0 and p < ms) then
    if s.f < want then
      s.f, s.fs = want, ARGV[2]
    end
    if p >= 0 and p < ms then
      -- The key lives longer; a running lease still ends when it would have.
      if s.u == 0 and st_live(s) then
        s.u = now_ms() + p
      end
      st_write(KEYS[1], s, ms)
    else
      st_write(KEYS[1], s)
    end
  end
  if held then
    return 1
  end
  return 0
end
local v = redis.call('GET', KEYS[2])
local last, r = fence_parse(v)
if v and not last then
  error({err = 'ERR dlock: fence key ' .. KEYS[2] .. ' holds a non-integer'})
end
if not last or last < want then
  if r ~= '' then
    -- A RedLock member's records stay.
    redis.call('SET', KEYS[2], ARGV[2] .. '|' .. r, 'KEEPTTL')
  else
    redis.call('SET', KEYS[2], ARGV[2], 'KEEPTTL')
  end
end
at_least(KEYS[2], ARGV[3])
return redis.call('HEXISTS', KEYS[1], ARGV[1])
