-- extend.lua: renew the leases of many locks in one call.
--
-- The keys come in one group per lease: first the key that carries the lease,
-- then the keys that must live at least as long as it (the lock's fence, and
-- for some kinds a hash of holders).
--
-- KEYS        lease: group i, ARGV[5i] keys, the first of which carries lease i: a
--             lock hash (owner id -> hold count, with a PX expiry), or a
--             sorted set of holders (owner id -> server time in ms at which
--             that holder's lease lapses)
-- ARGV[5i-4]  type: "h" for a lock hash, "z" for a sorted set of holders
-- ARGV[5i-3]  owner: the owner id expected to hold lease i
-- ARGV[5i-2]  ttl: the TTL of lease i in milliseconds
-- ARGV[5i-1]  how: "gt" to make lease i lapse TTL from now unless it lapses later
--             already (a renewal: never shortens a lease); "set": make it
--             lapse TTL from now (Lease.Extend)
-- ARGV[5i]    keys: how many keys group i has
--
-- Returns one code per lease, in order:
--    1  extended: the owner holds it, and it now lapses TTL from now (or
--       later, for "gt"); every key of its group expires no sooner
--    0  not extended: another owner holds it (or a key of another type is there)
--   -1  not extended: nobody holds it (for "z": the owner's lease lapsed)
--
-- A key of a foreign type is reported, not raised, so that it cannot make the
-- renewal of the other keys in the batch fail. Run twice, it extends again
-- from a later time, which the client, counting from before it sent the first
-- run, never relies on; and since a renewal never shortens a lease, a renewal
-- that reaches Redis late cannot undo a longer Lease.Extend.
local res = {}
local now
local k = 1
for i = 1, #ARGV / 5 do
  local kind, owner, ttl, nk = ARGV[5 * i - 4], ARGV[5 * i - 3], tonumber(ARGV[5 * i - 2]), tonumber(ARGV[5 * i])
  local gt = ARGV[5 * i - 1] == 'gt'
  local key = KEYS[k]
  local t = redis.call('TYPE', key).ok
  local ok = false
  if t == 'none' then
    res[i] = -1
  elseif kind == 'h' then
    if t == 'hash' and redis.call('HEXISTS', key, owner) == 1 then
      if gt then
        redis.call('PEXPIRE', key, ttl, 'GT')
      else
        redis.call('PEXPIRE', key, ttl)
      end
      ok = true
    else
      res[i] = 0
    end
  elseif t ~= 'zset' then
    res[i] = 0
  else
    if not now then
      now = now_ms()
    end
    local lapse = tonumber(redis.call('ZSCORE', key, owner))
    if lapse and lapse > now then
      if gt then
        redis.call('ZADD', key, 'XX', 'GT', now + ttl, owner)
      else
        redis.call('ZADD', key, 'XX', now + ttl, owner)
      end
      at_least(key, ttl)
      ok = true
    else
      res[i] = -1
    end
  end
  if ok then
    for j = k + 1, k + nk - 1 do
      at_least(KEYS[j], ttl)
    end
    res[i] = 1
  end
  k = k + nk
end
return res
