-- extend.lua: renew the leases of many locks in one call.
--
-- The keys come in one group per lease: first the key that carries the lease,
-- then the keys that must live at least as long as it (the lock's fence, and
-- for some kinds a hash of holders), and last, for a RedLock member's lock,
-- the lock's extends hash.
--
-- KEYS        lease: group i, ARGV[6i] keys, the first of which carries lease i: a
--             lock's state (a string, lib_state.lua), a lock hash (owner id ->
--             hold count, with a PX expiry), or a sorted set of holders (owner id -> server time in ms at which
--             that holder's lease lapses); then the keys that must live at
--             least as long. The generation of a holder's latest
--             Lease.Extend is kept where every key named exists while the
--             lease runs (a key named but missing would make a Cluster node
--             importing the slot refuse the call): a lock's state keeps it
--             after its owner's id; a group of a hash kind's ("h", "z") has
--             its third key a hash where ForceRelease records the holds it
--             took (an RWMutex's fences, a Semaphore's hash), which keeps it
--             as "gen:" .. owner id; a RedLock member's lock ("r"), never
--             in a Cluster, names last its extends hash (owner id -> the
--             generation), which exists only once an Extend has run
-- ARGV[6i-5]  type: "s" for a lock's state, "h" for a lock hash, "z" for a
--             sorted set of holders, "r" for a RedLock member's lock hash
-- ARGV[6i-4]  owner: the owner id expected to hold lease i
-- ARGV[6i-3]  ttl: the TTL of lease i in milliseconds
-- ARGV[6i-2]  how: "gt" to make lease i lapse TTL from now unless it lapses later
--             already (a renewal: never shortens a lease); "set": make it
--             lapse TTL from now (Lease.Extend)
-- ARGV[6i-1]  gen: the generation of the request: how many Extends of lease i
--             the client had sent when it sent this one (an Extend counts
--             itself)
-- ARGV[6i]    keys: how many keys group i has
--
-- Returns one code per lease, in order:
--    1  extended: the owner holds it, and it now lapses TTL from now (or
--       later, for "gt"); every key of its group expires no sooner (an
--       extends hash: if it holds the owner's entry); a grant not yet taken
--       up (lib_state.lua, lib_hash.lua) is taken up
--    0  not extended: another owner holds it (or a key of another type is there)
--   -1  not extended: nobody holds it (for "z": the owner's lease lapsed)
--    2  not extended: the owner holds it, but an Extend of a later
--       generation has run: this request is older than what Redis keeps
--    4  not extended: ForceRelease took the owner's hold away (a lock's
--       state records it until the lease would have ended)
--
-- A key of a foreign type is reported, not raised, so that it cannot make the
-- renewal of the other keys in the batch fail.
--
-- Run twice, or late: a request runs again when its reply is lost (the
-- client's retry), when the server did not know the script (EVAL after
-- NOSCRIPT), or when the client sends a renewal again after it went
-- unanswered; any of these may reach Redis after a newer request about the
-- same lease. Each run extends from a later time, which the client, counting
-- from before it sent the first run, never relies on. A renewal never
-- shortens a lease, and a request of an earlier generation than the lease's
-- latest Extend changes nothing (code 2): a renewal or Extend sent before an
-- Extend that shortened the lease cannot lengthen it again, whenever it runs.
--
-- libraries: lib_common.lua lib_state.lua

-- evicted tells whether ForceRelease took owner's hold away, for the group
-- of a lease of kind whose keys are KEYS[k] to KEYS[last], an extends hash
-- left out: a record in its third key, a hash (an RWMutex's fences, a
-- Semaphore's hash).
local function evicted(kind, k, last, owner)
  return kind ~= 's' and last >= k + 2 and redis.pcall('HEXISTS', KEYS[k + 2], 'evicted:' .. owner) == 1
end

local res = {}
local now
local k = 1
for i = 1, #ARGV / 6 do
  local kind, owner, ttl, gen, nk = ARGV[6 * i - 5], ARGV[6 * i - 4], tonumber(ARGV[6 * i - 3]), tonumber(ARGV[6 * i - 1]), tonumber(ARGV[6 * i])
  local gt = ARGV[6 * i - 2] == 'gt'
  -- Where the owner's Extend generation is kept (see the header): a lock's
  -- state; a field of the group's third key; a RedLock member's extends hash.
  local key, extends, last = KEYS[k], nil, k + nk - 1
  if kind == 'r' then
    kind, extends, last = 'h', KEYS[last], last - 1
  end
  local ok, tracked, changed = false, false, false
  local t, s
  if kind == 's' then
    -- One GET reads the state, and reports a key of another type.
    local v = redis.pcall('GET', key)
    if type(v) == 'table' then
      t = 'other'
    elseif v then
      t, s = 'string', st_parse(v)
    else
      t = 'none'
    end
  else
    t = redis.call('TYPE', key).ok
  end
  if s and s.u ~= 0 and not now then
    now = now_ms() -- a lease that ends before its key: the clock, once per call
  end
  if t == 'none' then
    res[i] = -1
    if evicted(kind, k, last, owner) then
      res[i] = 4
    end
  elseif (kind == 's' and not s) or (kind == 'h' and t ~= 'hash') or (kind == 'z' and t ~= 'zset') then
    res[i] = 0
  elseif kind == 's' and not (s.o == owner and st_live(s, now)) then
    local _, ev = st_record(s, owner, now or now_ms())
    if ev then
      res[i] = 4
    elseif st_live(s, now) then
      res[i] = 0
    else
      res[i] = -1
    end
  elseif kind == 'h' and not redis.call('HGET', key, owner) then
    res[i] = 0
    if evicted(kind, k, last, owner) then
      res[i] = 4
    end
  else
    if kind == 'z' then
      if not now then
        now = now_ms()
      end
      local lapse = tonumber(redis.call('ZSCORE', key, owner))
      if not (lapse and lapse > now) then
        res[i] = -1
        if evicted(kind, k, last, owner) then
          res[i] = 4
        end
      end
    end
    if not res[i] then
      local seen = false
      if kind == 's' then
        seen = s.g ~= '' and s.g
      elseif extends then
        seen = redis.pcall('HGET', extends, owner)
      else
        seen = redis.pcall('HGET', KEYS[k + 2], 'gen:' .. owner)
      end
      if type(seen) == 'table' and seen.err then
        res[i] = 0
      elseif gen < (tonumber(seen) or 0) then
        res[i] = 2
      else
        ok, tracked = true, seen ~= false and extends ~= nil
        if not gt and gen > (tonumber(seen) or 0) then
          if kind == 's' then
            s.g, changed = tostring(gen), true
          elseif extends then
            redis.call('HSET', extends, owner, gen)
            tracked = true
          else
            redis.call('HSET', KEYS[k + 2], 'gen:' .. owner, gen)
          end
        end
      end
    end
  end
  if ok then
    if kind == 's' then
      st_lengthen(key, s, ttl, gt, now, changed)
    elseif kind == 'h' then
      if redis.call('HGET', key, owner) == '0' then
        -- A grant (rw_release.lua), taken up now.
        redis.call('HSET', key, owner, 1)
      end
      if gt then
        redis.call('PEXPIRE', key, ttl, 'GT')
      else
        redis.call('PEXPIRE', key, ttl)
      end
    else
      if gt then
        redis.call('ZADD', key, 'XX', 'GT', now + ttl, owner)
      else
        redis.call('ZADD', key, 'XX', now + ttl, owner)
      end
      at_least(key, ttl)
    end
    for j = k + 1, last do
      at_least(KEYS[j], ttl)
    end
    if tracked then
      -- Only a lease that has been extended has an entry to keep.
      at_least(extends, ttl)
    end
    res[i] = 1
  end
  k = k + nk
end
return res
