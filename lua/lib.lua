-- lib.lua: functions the other scripts share. scripts.go puts each function
-- a script calls in front of it; so that it can, functions are separated by a
-- blank line, have none inside, and do not call each other.

-- now_ms returns the server time in milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- tell publishes owner on the channel of owner's Client: stem, ':' and the
-- part of owner before its first ':' (the Client's id).
local function tell(stem, owner)
  redis.call('PUBLISH', stem .. ':' .. string.match(owner, '^[^:]*'), owner)
end

-- reenter adds one hold of owner to the lock hash lock. Returns 0, or -1 if
-- owner holds nothing there.
local function reenter(lock, owner)
  if redis.call('HEXISTS', lock, owner) == 0 then
    return -1
  end
  redis.call('HINCRBY', lock, owner, 1)
  return 0
end

-- kept_for reports whether the lock hash lock is free but kept for owner.
local function kept_for(lock, owner)
  return redis.call('HGET', lock, 'reserved') == owner and redis.call('HLEN', lock) == 1
end

-- give_back gives back one hold of owner on the lock hash lock (mode "0"), or
-- its last one (mode "1"). It returns the code to return at once: 2 when one
-- of several holds went (the count never goes below 1), 0 when another owner
-- holds the lock, -1 when nobody does; or nil when owner's last hold goes and
-- the caller is to free the lock.
local function give_back(lock, owner, mode)
  local n = redis.call('HGET', lock, owner)
  if not n then
    if redis.call('EXISTS', lock) == 0 then
      return -1
    end
    return 0
  end
  if mode ~= '1' then
    if tonumber(n) > 1 then
      redis.call('HINCRBY', lock, owner, -1)
    end
    return 2
  end
  return nil
end

-- entry reads waiter w's entry in the hash h, "<lapse ms>|<rest>", where rest
-- matches the pattern rest. It returns the lapse time as a number and rest, or
-- nil if w has no entry or the entry does not match.
local function entry(h, w, rest)
  local v = redis.call('HGET', h, w)
  if v then
    local l, r = string.match(v, '^(%d+)|(' .. rest .. ')$')
    return tonumber(l), r
  end
  return nil
end

