-- lib_hash.lua: the lock hash and fence key, the lock model of an RWMutex,
-- a Semaphore and a RedLock member's Mutex: the holds in a hash (owner id ->
-- hold count) or a sorted set of holders, and the last fence handed out in a
-- string key of its own, which on a RedLock member also carries the records
-- of owners that ended; ForceRelease marks the holds it took away in a hash
-- beside the lock. Its functions call lib_common.lua's.

-- fence_parse splits v, the value of a fence key ("<fence>", or
-- "<fence>|<records>" on a RedLock member), into the fence (nil if v is nil
-- or holds no fence) and the records ('' if none).
local function fence_parse(v)
  if not v then
    return nil, ''
  end
  local n = tonumber(v)
  if n then
    return n, ''
  end
  local f, r = string.match(v, '^(%d+)|(.*)$')
  return tonumber(f), r or ''
end

-- next_fence hands out a fence: above the last one (the string key), and at
-- least the server time in microseconds (t, from TIME), so that fences keep
-- rising when the key is gone (it expired, or Redis restarted without it).
-- The key lives ms from now if exact is true (a lock with one holder, whose
-- fence key lives as long as its lock), else at least ms. Raises before
-- writing if key is not a string; a key that holds anything but a fence is
-- put back as it was, but for its expiry, and raises. A RedLock member's
-- key may carry records (rec_find) after its fence: they are kept, and if
-- one names owner, nothing changes and nil is returned.
local function next_fence(key, t, ms, exact, owner)
  local f = micros(t)
  if exact then
    -- One command reads the last fence and writes this one, which is
    -- almost always the later: only fences handed out faster than the
    -- clock ticks, or a clock set back, need a second.
    local v = redis.call('SET', key, f, 'PX', ms, 'GET')
    if v then
      local last, r = fence_parse(v)
      if not last then
        redis.call('SET', key, v, 'KEEPTTL')
        error({err = 'ERR dlock: fence key ' .. key .. ' holds a non-integer'})
      end
      if r ~= '' then
        local now = t[1] * 1000 + math.floor(t[2] / 1000)
        if owner and rec_find(r, owner, now) then
          local _, left = rec_prune(r, now)
          redis.call('SET', key, v, 'PX', math.max(left, 1))
          return nil
        end
        local keep
        r, keep = rec_prune(r, now)
        if last >= f then
          f = last + 1
        end
        if r ~= '' then
          redis.call('SET', key, string.format('%.0f', f) .. '|' .. r, 'PX', math.max(tonumber(ms), keep))
        else
          redis.call('SET', key, f, 'PX', ms)
        end
        return f
      end
      if last >= f then
        f = last + 1
        redis.call('SET', key, f, 'PX', ms)
      end
    end
    return f
  end
  local v = redis.call('SET', key, f, 'KEEPTTL', 'GET')
  if v then
    local last = tonumber(v)
    if not last then
      redis.call('SET', key, v, 'KEEPTTL')
      error({err = 'ERR dlock: fence key ' .. key .. ' holds a non-integer'})
    end
    if last >= f then
      f = last + 1
      redis.call('SET', key, f, 'KEEPTTL')
    end
    -- The key had an expiry (dlock writes none without): lengthen it only.
    redis.call('PEXPIRE', key, ms, 'GT')
    return f
  end
  redis.call('PEXPIRE', key, ms)
  return f
end

-- fence_floor returns a number that every fence handed out on the string
-- key fence from now on exceeds, and no fence handed out before now does
-- (unless fences ran ahead of the clock and the key has gone since): the last
-- fence, or the server time in microseconds if that is later. A waiter sent
-- it with "held" compares it with the fence of a grant it is told of later,
-- to tell a grant made after its request from an older one. t is from TIME.
-- The reply "held" is {wait, fence_floor, server time in µs}: held_reply.
local function fence_floor(key, t)
  local f = micros(t)
  local last = fence_parse(redis.call('GET', key))
  if last and last > f then
    return last
  end
  return f
end

-- held_reply is an acquire script's answer "not acquired": the wait (ms,
-- -1 if unknown), the fence floor of the string key fence (fence_floor) and
-- the server time t (from TIME) in microseconds, by which the waiter dates a
-- grant it is told of later (grant).
local function held_reply(wait, fence, t)
  return {-wait - 3, fence_floor(fence, t), micros(t)}
end

-- held_again answers a take by an owner that holds the lock hash lock
-- already (a retry of a take that succeeded): its fence, read from the string
-- key fence (a new one, living as long as the lock, if that key has gone).
-- The lease is not lengthened: the client counts it from before the first
-- copy of the take was sent, and a later Extend may have shortened it.
local function held_again(lock, fence)
  local f = fence_parse(redis.call('GET', fence))
  if not f then
    f = next_fence(fence, (server_time()), math.max(redis.call('PTTL', lock), 1), true)
  end
  return f
end

-- take makes owner the holder of the free lock hash lock (an RWMutex's
-- writer, a RedLock member's Mutex): count holds (1, or 0 for a grant not
-- yet taken up; 1 if nil), lapsing ms from now, and a new fence (next_fence
-- on the string key fence, living as long, or at least as long if shared is
-- true; t is from TIME), which it returns; or, if the fence key records
-- owner (next_fence), nothing, and nil.
local function take(lock, fence, owner, ms, t, shared, count)
  local f = next_fence(fence, t, ms, not shared, owner)
  if not f then
    return nil
  end
  redis.call('HSET', lock, owner, count or 1)
  redis.call('PEXPIRE', lock, ms)
  return f
end

-- grant gives the free lock hash lock to the waiter w, which the caller has
-- taken out of its queue, as take does, with a count of 0 (a grant w takes
-- up with its next request or renewal, which lengthen it), and returns its
-- fence. Only w's Client is told, on the stem's channel, as tell does: the
-- message is w, the fence, ms and the server time in microseconds, separated
-- by spaces, so that w's Lock can return on it without another request.
local function grant(lock, fence, w, ms, t, stem, shared)
  local f = take(lock, fence, w, ms, t, shared, 0)
  tell(stem, w, w .. ' ' .. string.format('%.0f', f) .. ' ' .. ms .. ' ' .. string.format('%.0f', micros(t)))
  return f
end

-- reenter sets owner's hold count on the lock hash lock to count, the
-- client's own count after this re-entry (so that a retry counts once).
-- Returns 0, or -1 if owner holds nothing there.
local function reenter(lock, owner, count)
  if redis.call('HEXISTS', lock, owner) == 0 then
    return -1
  end
  redis.call('HSET', lock, owner, count)
  return 0
end

-- after tells whether the string key fence still holds myfence, the fence
-- of an owner that holds nothing (as the script sent it): no lock has been
-- taken since, so that owner's hold ended without another taking over: by
-- an earlier run of its release, or, once its lease's time is up, by
-- expiry, which the client tells apart by when the answer came. After a
-- restart that lost the keys, or another's take, the fence is gone or
-- another.
local function after(fence, myfence)
  if myfence == '0' then
    return false
  end
  local v = redis.call('GET', fence)
  return v == myfence or (v ~= false and string.find(v, myfence .. '|', 1, true) == 1)
end

-- evict records in the hash h (one whose other fields are not "evicted:"
-- and an owner id: an RWMutex's fences, a Semaphore's hash) that owner's
-- hold was taken away by ForceRelease, for ms (at least a millisecond), as
-- long as its lease would have lasted: owner's release then answers 4, not a
-- retry's 3, however often it runs, and its renewal 4 (extend.lua).
local function evict(h, owner, ms)
  redis.call('HSET', h, 'evicted:' .. owner, 1)
  at_least(h, math.max(tonumber(ms), 1))
end

-- evicted tells whether owner's hold was taken away (evict). The record is
-- read, not removed, so that a retry of owner's release answers the same; it
-- goes with h's expiry. h may be nil (no kind with it is evicted).
local function evicted(h, owner)
  return h ~= nil and redis.call('HEXISTS', h, 'evicted:' .. owner) == 1
end

-- give_back gives back holds of owner on the lock hash lock (a RedLock
-- member's), where held tells whether owner holds it (HEXISTS, read by the
-- caller): mode "0" sets its hold count to count (it keeps the lock), mode
-- "1" gives back its last hold. It returns the code to return at once: 2
-- when owner keeps the lock; 3 when owner holds nothing, its last hold was
-- to go, and the string key fence still holds owner's fence myfence (after);
-- 0 when another owner holds the lock or it is kept for a waiter; -1 when
-- nobody holds it; or nil when owner's last hold goes and the caller is to
-- free the lock.
local function give_back(lock, fence, owner, mode, count, myfence, held)
  if not held then
    if mode ~= '0' and after(fence, myfence) then
      return 3
    end
    if redis.call('EXISTS', lock) == 0 then
      return -1
    end
    return 0
  end
  if mode == '0' then
    redis.call('HSET', lock, owner, count)
    return 2
  end
  return nil
end

-- sem_used sweeps the holders whose lease lapsed from a semaphore (its hash
-- sem, its sorted set of holders, at most 100 a call) and returns the permits
-- the live holders have, which the caller records with put_used.
local function sem_used(sem, holders, now)
  local used = tonumber(redis.call('HGET', sem, 'used') or '0')
  for _, h in ipairs(redis.call('ZRANGEBYSCORE', holders, '-inf', now, 'LIMIT', 0, 100)) do
    used = used - (tonumber(string.match(redis.call('HGET', sem, h) or '', '^(%d+)')) or 0)
    redis.call('HDEL', sem, h, 'gen:' .. h)
    redis.call('ZREM', holders, h)
  end
  if redis.call('ZCARD', holders) == 0 then
    return 0
  end
  return used
end

-- put_used records in the semaphore hash sem that used permits are held.
local function put_used(sem, used)
  if used > 0 then
    redis.call('HSET', sem, 'used', used)
  else
    redis.call('HDEL', sem, 'used')
  end
end
