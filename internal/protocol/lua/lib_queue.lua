-- lib_queue.lua: the queue of waiters, which both lock state models keep
-- beside their lock (a Mutex's, a FairMutex's and an Election's, next to
-- lib_state.lua's state; an RWMutex's and a Semaphore's, next to
-- lib_hash.lua's keys): a sorted set of owner ids by arrival, and a hash of
-- each waiter's entry, which lapses unless the waiter renews it. Its
-- functions call lib_common.lua's.

-- entry reads waiter w's entry in the hash h: "<lapse ms>|<rest>", where
-- rest matches the pattern rest, or "<lapse ms>" alone if rest is nil. It
-- returns the lapse time as a number and rest, or nil if w has no entry or
-- the entry does not match.
local function entry(h, w, rest)
  local v = redis.call('HGET', h, w)
  if not v then
    return nil
  end
  if not rest then
    return tonumber(v)
  end
  local l, r = string.match(v, '^(%d+)|(' .. rest .. ')$')
  return tonumber(l), r
end

-- live_waiters walks a queue in arrival order (the sorted set queue, each
-- waiter's entry in the hash alive, read with entry and rest) and returns an
-- iterator over its live waiters: owner id, lapse time, rest, and whether
-- anyone is queued after it (true or false; nil if the walk cannot tell
-- without reading on; the one after may have lapsed). Waiters
-- whose entry lapsed (before now) or is missing are dropped from both on the
-- way; keep, if given, is returned whatever its entry says. The walk reads the
-- queue 16 at a time, so a caller that stops early reads little of it; first,
-- if given, is how many it reads first (a caller that wants the head: 2, which
-- also tell whether anyone follows a live head, for Redis turns every member
-- read into a Lua string).
local function live_waiters(queue, alive, now, rest, keep, first)
  local page, i, kept, size = {}, 0, 0, first or 16
  return function()
    while true do
      i = i + 1
      if i > #page then
        if #page > 0 then
          size = 16
        end
        page = redis.call('ZRANGE', queue, kept, kept + size - 1)
        if #page == 0 then
          return nil
        end
        i = 1
      end
      local w = page[i]
      local lapse, r = entry(alive, w, rest)
      if w == keep or (lapse and lapse > now) then
        kept = kept + 1
        -- Whether anyone is queued after w: this page says, unless w ends
        -- a full one.
        local after
        if i < #page then
          after = true
        elseif #page < size then
          after = false
        end
        return w, lapse, r, after
      end
      redis.call('ZREM', queue, w)
      redis.call('HDEL', alive, w)
    end
  end
end

-- queue registers owner as a waiter in the sorted set queue (by arrival: t,
-- from TIME, in microseconds; a registered owner keeps its place) and in the
-- hash alive ("<lapse>|<grant>": it lapses register ms after now, the server
-- time in ms, unless renewed; grant is its grant lease). Both keys expire
-- when the last registration would lapse.
local function queue(q, alive, owner, t, now, register, grant)
  redis.call('ZADD', q, 'NX', micros(t), owner)
  redis.call('HSET', alive, owner, string.format('%.0f', now + tonumber(register)) .. '|' .. grant)
  at_least(q, register)
  at_least(alive, register)
end
