-- latch.lua: count a latch down by one, set its count if it has none, or
-- remove its count. When the count goes (down to zero, or removed) the latch
-- opens: every waiter, in every process, is woken.
--
-- KEYS[1]  count: the armed latch, a hash with no expiry: "count" -> the count
--          left (above zero), "set" -> the id of the TrySetCount call that
--          armed it, and the id of each CountDown call that counted -> "1"
--          (at most the count it was armed with); none while the latch is open
-- KEYS[2]  opened: the latch's last opening: KEYS[1] as it was when it opened,
--          but for "count", with "open" -> the id of the call that opened it
--          (the last CountDown, or Delete); expires ARGV[5] ms after the opening
-- ARGV[1]  mode: "down", count down by one
--          "set": set the count to ARGV[3] if the latch has none
--          "delete": remove the count
-- ARGV[2]  channel: the latch's channel; "*" is published on it when the latch opens
-- ARGV[3]  count: for "set", the count
-- ARGV[4]  id: the call's own id, the same in every run of the call
-- ARGV[5]  opened_ttl: how long (ms) the record of an opening (KEYS[2]) lasts
--
-- Returns:
--   "down":   > 0 the count left; 0 the count reached zero and the latch
--             opened; -1 nothing done: the latch has no count
--   "set":    1 set; 0 nothing done: the latch has a count
--   "delete": 1 removed (the latch opened); 0 nothing done: it had no count
--
-- Run twice (go-redis runs a call again when its reply is lost): the latch's
-- own keys tell that the call ran, so it counts nothing twice and answers as
-- it did. A CountDown whose id is in KEYS[1] answers the count left and one
-- whose id is in KEYS[2] answers 0, counting nothing; a TrySetCount named by
-- "set" in either answers 1, arming nothing (the latch it armed may have
-- opened since); a Delete named by "open" in KEYS[2] answers 1, removing
-- nothing (the latch may have been armed again since). This holds while the
-- latch has opened at most once after the call's first run, and that opening
-- is younger than ARGV[5] ms: each opening replaces the record of the one
-- before. A call whose first run did nothing ("down" -1, "set" 0, "delete" 0)
-- leaves no trace, so a retry that finds the latch changed acts on it as a
-- later call would.
--
-- A latch armed by an earlier version of this script is a string holding
-- its count; it becomes the hash first. Every error (a key of another type,
-- a count that is not a positive integer) is raised before anything is
-- written.
local latch, opened, mode, id = KEYS[1], KEYS[2], ARGV[1], ARGV[4]
local kind = redis.call('TYPE', latch).ok
redis.call('HLEN', opened) -- type check
local count
if kind == 'hash' then
  count = redis.call('HGET', latch, 'count')
elseif kind == 'string' then
  count = redis.call('GET', latch)
elseif kind ~= 'none' then
  error({err = 'WRONGTYPE dlock: latch key ' .. latch .. ' is a ' .. kind .. ', not a latch'})
end
if count and not string.match(count, '^%d+$') then
  error({err = 'ERR dlock: latch key ' .. latch .. ' holds the count ' .. string.format('%q', count) .. ', not an integer'})
end
if kind == 'string' then
  redis.call('DEL', latch)
  if tonumber(count) > 0 then
    redis.call('HSET', latch, 'count', count)
  else
    count = nil
  end
end
count = tonumber(count)

-- open opens the latch, by the call id: its hash becomes the record of the
-- opening, and every waiter is woken.
local function open(by)
  redis.call('HDEL', latch, 'count')
  redis.call('HSET', latch, 'open', by)
  redis.call('RENAME', latch, opened)
  redis.call('PEXPIRE', opened, ARGV[5])
  redis.call('SPUBLISH', ARGV[2], '*')
end

if mode == 'down' then
  if redis.call('HEXISTS', latch, id) == 1 then
    return count or -1
  end
  if redis.call('HEXISTS', opened, id) == 1 then
    return 0
  end
  if not count then
    return -1
  end
  redis.call('HSET', latch, id, 1)
  local left = redis.call('HINCRBY', latch, 'count', -1)
  if left > 0 then
    return left
  end
  open(id)
  return 0
elseif mode == 'set' then
  if redis.call('HGET', latch, 'set') == id or redis.call('HGET', opened, 'set') == id then
    return 1
  end
  if count then
    return 0
  end
  redis.call('DEL', latch)
  redis.call('HSET', latch, 'count', ARGV[3], 'set', id)
  return 1
end
if redis.call('HGET', opened, 'open') == id then
  return 1
end
if not count then
  return 0
end
open(id)
return 1
