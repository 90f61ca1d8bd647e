-- inspect.lua: read one lock as Redis holds it, in one step, writing
-- nothing: its holders, its waiters in the order they will be served, its
-- last fence, and a Semaphore's permits or a CountDownLatch's count.
--
-- KEYS     the lock's keys, in the order of its kind (ARGV[1]):
--          "fair":  lock (its state, a string), waiters, alive (a Mutex, a
--                   FairMutex or an Election)
--          "rw":    lock, fence, waiters, alive, readers, fences, writers
--          "sem":   semaphore, fence, waiters, alive, holders, total
--          "latch": count (the latch's hash; a string holding the count if an
--          earlier version of latch.lua armed it)
--          (the layouts are those of the acquire scripts' headers)
-- ARGV[1]  kind: as above
-- ARGV[2]  limit: the most holders and the most waiters listed
--
-- Returns {now, fence, holders, queued, waiters, total, used}:
--   now      the server time in microseconds
--   fence    the last fence handed out; -1 if none is kept
--   holders  {owner, holds, ttl ms, fence, what} per live holder, what being
--            "w" (the lock, or an RWMutex's write), "r" (a read hold) or a
--            Semaphore holder's permits; -1 where a field is unknown
--   queued   how many waiters are registered, counting lapsed ones no
--            script has dropped yet, and not a holder that keeps its place
--   waiters  {owner, ttl ms of the registration, arrival µs or -1, what} per
--            live waiter, first served first; what is "w", "r" or the
--            permits wanted
--   total    a Semaphore's total permits (-1 unknown); a CountDownLatch's
--            count (0: open)
--   used     a Semaphore's permits held by live holders
--
-- libraries: lib_common.lua lib_state.lua
local kind, limit = ARGV[1], tonumber(ARGV[2])
local t, now = server_time()
local holders, waiters = {}, {}

if kind == 'latch' then
  -- HGET fails on a string (a latch an earlier version armed), which GET
  -- reads: no command but those the other kinds use, so the same read-only
  -- user reads every kind. GET raises WRONGTYPE on a key of another type.
  local count = redis.pcall('HGET', KEYS[1], 'count')
  if type(count) == 'table' then
    count = redis.call('GET', KEYS[1])
  end
  if type(count) ~= 'string' then
    count = '0'
  end
  return {micros(t), -1, holders, 0, waiters, tonumber(count) or 0, 0}
end

local fence = -1

-- The holder of a lock's state (a Mutex, a FairMutex, an Election), and its
-- fence.
local function state_holders()
  local s = st_read(KEYS[1])
  if not s then
    return
  end
  fence = s.f
  if s.o ~= '' and (s.u == 0 or s.u > now) then
    local ttl = s.u - now
    if s.u == 0 then
      ttl = redis.call('PTTL', KEYS[1])
    end
    holders[1] = {s.o, s.c, ttl, s.f, 'w'}
  end
end

-- The holder of an RWMutex's lock hash, its writer; fences is the hash of
-- each holder's fence.
local function hash_holders(fences)
  local h = redis.call('HGETALL', KEYS[1])
  if #h == 0 then
    return
  end
  local ttl = redis.call('PTTL', KEYS[1])
  for i = 1, #h, 2 do
    local f = tonumber(redis.call('HGET', fences, h[i]) or '-1')
    holders[#holders + 1] = {h[i], tonumber(h[i + 1]), ttl, f, 'w'}
  end
end

-- The live members of the sorted set key scored by when they lapse (ms), up
-- to limit, with f(owner) giving each one's holds, fence and what.
local function zset_holders(key, f)
  local z = redis.call('ZRANGEBYSCORE', key, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #z, 2 do
    local holds, hf, what = f(z[i])
    holders[#holders + 1] = {z[i], holds, tonumber(z[i + 1]) - now, hf, what}
  end
end

-- The live waiters of a queue scored by arrival (µs) whose entries in the
-- hash alive read "<lapse ms>" or "<lapse ms>|<what>", first to arrive
-- first, up to limit; and how many are queued. A FairMutex's grantee, which
-- keeps its place while it holds the lock (for the other kinds: an owner in
-- the hash KEYS[1]), is a holder, not a waiter, and is not counted (if it
-- is among the entries read).
local function queue_waiters(queue, alive, only)
  local from, holding = 0, 0
  while #waiters < limit do
    local q = redis.call('ZRANGE', queue, from, from + 99, 'WITHSCORES')
    if #q == 0 then
      break
    end
    for i = 1, #q, 2 do
      local v = redis.call('HGET', alive, q[i])
      local holding_it
      if kind == 'fair' then
        holding_it = holders[1] ~= nil and holders[1][1] == q[i]
      else
        holding_it = redis.call('HEXISTS', KEYS[1], q[i]) == 1
      end
      if v and holding_it then
        holding = holding + 1 -- a grantee that keeps its place: no waiter
      elseif v then
        local lapse, what = string.match(v, '^(%d+)|?(.*)$')
        what = only or what
        if lapse and tonumber(lapse) > now and #waiters < limit then
          waiters[#waiters + 1] = {q[i], tonumber(lapse) - now, tonumber(q[i + 1]), what}
        end
      end
    end
    from = from + 100
  end
  return redis.call('ZCARD', queue) - holding
end

local queued, total, used = 0, -1, 0
if kind == 'fair' then
  state_holders()
  queued = queue_waiters(KEYS[2], KEYS[3], 'w') -- after the lapse, the waiter's grant lease
elseif kind == 'rw' then
  fence = tonumber(redis.call('GET', KEYS[2]) or '-1')
  hash_holders(KEYS[6])
  zset_holders(KEYS[5], function(o)
    return 1, tonumber(redis.call('HGET', KEYS[6], o) or '-1'), 'r'
  end)
  queued = queue_waiters(KEYS[3], KEYS[4])
elseif kind == 'sem' then
  fence = tonumber(redis.call('GET', KEYS[2]) or '-1')
  zset_holders(KEYS[5], function(o)
    local p, f = string.match(redis.call('HGET', KEYS[1], o) or '', '^(%d+)|(%d+)$')
    return 1, tonumber(f or '-1'), p or '-1'
  end)
  local z = redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. now, '+inf')
  for _, o in ipairs(z) do
    used = used + tonumber(string.match(redis.call('HGET', KEYS[1], o) or '0', '^(%d+)') or '0')
  end
  total = tonumber(redis.call('GET', KEYS[6]) or redis.call('HGET', KEYS[1], 'permits') or '-1')
  queued = queue_waiters(KEYS[3], KEYS[4])
else
  return redis.error_reply('ERR dlock: inspect: unknown kind ' .. kind)
end
return {micros(t), fence, holders, queued, waiters, total, used}
