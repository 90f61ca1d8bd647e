-- lib_common.lua: what both lock state models share (lib_state.lua's packed
-- string state; lib_hash.lua's lock hash and fence key): the server's clock,
-- expiries, the records of owners that ended, and the wake-up messages.
--
-- A script names the libraries it links on a line of its own,
-- "-- libraries:" and their file names, this one first: internal/lualink
-- (go generate) writes lua/gen/NAME.lua, the text Redis runs: lua/NAME.lua
-- with, in front of it, each function of those libraries it calls, and each
-- function those call, in the libraries' order; so that it can, functions
-- are separated by a blank line, have none inside, and call only functions
-- defined above them, in their library or in one named before it.
--
-- Numbers written to Redis go through redis.call, which writes them exactly
-- (up to 2^53); never through '..', which rounds to 14 digits.

-- server_time returns the server's clock: the reply of TIME (seconds and
-- microseconds), and the same in milliseconds.
local function server_time()
  local t = redis.call('TIME')
  return t, t[1] * 1000 + math.floor(t[2] / 1000)
end

-- micros is t, a reply of TIME, in microseconds.
local function micros(t)
  return t[1] * 1000000 + t[2]
end

-- now_ms returns the server's clock in milliseconds.
local function now_ms()
  local _, now = server_time()
  return now
end

-- touch sets key's expiry again to when it is, so that a script that
-- otherwise changes nothing still writes: a retry of a grant that finds it
-- made then reaches the replicas after the grant's first run, and a WAIT
-- that follows the retry on its connection covers that run. A key without an
-- expiry, or none, is left alone. The expiry stays where it was, or moves a
-- millisecond later if the clock ticks between the two calls.
local function touch(key)
  local p = redis.call('PTTL', key)
  if p > 0 then
    redis.call('PEXPIRE', key, p)
  end
end

-- at_least makes key expire no sooner than ms from now: a key without an
-- expiry gets one, a key that would expire sooner is given more, and a
-- missing key stays missing.
local function at_least(key, ms)
  if redis.call('PEXPIRE', key, ms, 'GT') == 0 then
    redis.call('PEXPIRE', key, ms, 'NX') -- GT takes a key without expiry for one that never expires
  end
end

-- Records: "<owner>@<deadline>" or "!<owner>@<deadline>", separated by ';'.
-- A record names an owner that has ended while an acquire of its may still
-- reach Redis (its reply was lost), until that request's deadline (server
-- ms): its acquires take nothing until then. One marked '!' names an owner
-- whose hold ForceRelease took away, until its lease would have ended. A
-- lock's state keeps them (st_record), and so does a RedLock member's fence
-- key (fence_parse).

-- rec_find returns the deadline (ms) of owner's record in the records r if
-- it has one that has not lapsed by now, and whether it is marked '!'; nil
-- if none.
local function rec_find(r, owner, now)
  if r == '' then
    return nil
  end
  for x, o, d in string.gmatch(r, '(!?)([^@;]+)@(%d+)') do
    if o == owner and tonumber(d) > now then
      return tonumber(d), x == '!'
    end
  end
  return nil
end

-- rec_add returns the records r with a record of owner until the deadline d
-- (ms, a string), marked '!' if evicted, one per owner (the later deadline,
-- and the mark if either has it), those that lapsed by now dropped; and how
-- long (ms) they need to live.
local function rec_add(r, owner, d, evicted, now)
  local out, keep = {}, tonumber(d) - now
  for x, o, e in string.gmatch(r, '(!?)([^@;]+)@(%d+)') do
    local left = tonumber(e) - now
    if left > 0 then
      if o == owner then
        if left > keep then
          d, keep = e, left
        end
        evicted = evicted or x == '!'
      else
        out[#out + 1] = x .. o .. '@' .. e
        keep = math.max(keep, left)
      end
    end
  end
  if evicted then
    out[#out + 1] = '!' .. owner .. '@' .. d
  else
    out[#out + 1] = owner .. '@' .. d
  end
  return table.concat(out, ';'), keep
end

-- rec_prune returns the records r without those that lapsed by now, and how
-- long (ms) those left need to live (0 if none).
local function rec_prune(r, now)
  if r == '' then
    return '', 0
  end
  local out, keep = {}, 0
  for x, o, e in string.gmatch(r, '(!?)([^@;]+)@(%d+)') do
    local left = tonumber(e) - now
    if left > 0 then
      out[#out + 1] = x .. o .. '@' .. e
      keep = math.max(keep, left)
    end
  end
  return table.concat(out, ';'), keep
end

-- tell publishes msg, or owner if msg is nil, on the channel of owner's
-- Client: stem, ':' and the part of owner before its first ':' (the Client's
-- id). The channel is a shard channel (SPUBLISH), in the lock's slot: on a
-- Cluster the message stays on the shard that holds the lock instead of
-- crossing the bus to every node.
local function tell(stem, owner, msg)
  redis.call('SPUBLISH', stem .. ':' .. string.match(owner, '^[^:]*'), msg or owner)
end
