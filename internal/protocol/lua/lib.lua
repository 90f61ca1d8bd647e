-- lib.lua: functions the other scripts share. internal/lualink (go generate)
-- writes lua/gen/NAME.lua, the text Redis runs: lua/NAME.lua with, in front of
-- it, each function it calls, and each function those call, in this
-- file's order; so that it can, functions are separated by a blank line, have
-- none inside, and call only functions defined above them.
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

-- tell publishes msg, or owner if msg is nil, on the channel of owner's
-- Client: stem, ':' and the part of owner before its first ':' (the Client's
-- id). The channel is a shard channel (SPUBLISH), in the lock's slot: on a
-- Cluster the message stays on the shard that holds the lock instead of
-- crossing the bus to every node.
local function tell(stem, owner, msg)
  redis.call('SPUBLISH', stem .. ':' .. string.match(owner, '^[^:]*'), msg or owner)
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

-- A Mutex, a FairMutex and an Election keep their lock in one string key,
-- its state: "<fence>|<holds>|<waits>|<until>|<owner>", and, when they are
-- not empty, "|<link>" and "|<link>|<records>" after it. fence is the last
-- fence handed out; owner the holder's owner id, empty when nobody holds it;
-- holds its hold count (0 when free, and 0 for a grant its grantee has not
-- taken up yet: its next request or renewal takes it up and lengthens it);
-- waits "1" if the queue may hold waiters, "0" if it holds none (so that a
-- free lock nobody waits for is taken, and a hold nobody waits behind is
-- given back, without reading the queue); until 0 if the lease ends with
-- the key (its PX expiry), else the server time (ms) at which it ends, the
-- key living longer. The owner may be followed by "/<gen>", the generation
-- of its latest Lease.Extend that Redis ran (extend.lua), so that a request
-- of an earlier one changes nothing. link lists the fences of the holds
-- whose releases this state follows, the latest first, at most st_chain of
-- them, separated by ',': a hold that took the lock a release freed, or
-- that a release granted it to, lists that release's fence, then what that
-- hold's state listed; a free state written by a script that read the
-- state first lists what the released hold's did (its own fence is the free
-- state's). A retry of one of those releases, finding the lock moved on,
-- tells from it that its own first run freed the lock (st_follows). The
-- common release, which writes without reading, leaves its fence alone: the
-- list starts again. records
-- are "<owner>@<deadline>" (or "!<owner>@<deadline>"), separated by ';': an
-- owner that has ended while an acquire of its may still be on its way
-- (its reply was lost), whose acquires take nothing until that request's
-- deadline (ms), and, marked '!', an owner whose hold ForceRelease took
-- away, until its lease would have ended: its release and its renewals say
-- so. The key lives until the last record's deadline at least.
--
-- A free state stays until the key's expiry, so that a retried release
-- finds the fence it left (DECISIONS 4). A free state nobody waits for,
-- with no records, is written as its fence alone ("<fence>"), which a take
-- tells apart with one pattern and a release writes without building a
-- string. The fence is kept as the string it was written as: string.format,
-- the one exact way to write a number of 16 digits, costs more than the
-- rest of a take, so a fence is formatted only when it is not the server's
-- time.

-- st_parse decodes a state's string v, or returns nil if v is nil or not a
-- state.
local function st_parse(v)
  if not v then
    return nil
  end
  local f, c, m, u, o, l, r = string.match(v, '^(%d+)|(%d+)|([01])|(%d+)|([^|]*)|?([%d,]*)|?(.*)$')
  if not f then
    if string.find(v, '^%d+$') then
      return {f = tonumber(v), fs = v, c = 0, m = '0', u = 0, o = '', g = '', l = '', r = ''}
    end
    return nil
  end
  local g = ''
  if string.find(o, '/', 1, true) then
    o, g = string.match(o, '^([^/]*)/(%d*)$')
    if not o then
      return nil
    end
  end
  return {f = tonumber(f), fs = f, c = tonumber(c), m = m, u = tonumber(u), o = o, g = g, l = l, r = r}
end

-- st_read decodes v, the value of the state key as GET read it (false if
-- missing; GET raises WRONGTYPE), or reads it if v is nil: nil if the key
-- is missing; it raises, before any write, if the key holds a string that
-- is not a state.
local function st_read(key, v)
  if v == nil then
    v = redis.call('GET', key)
  end
  if not v then
    return nil
  end
  local s = st_parse(v)
  if not s then
    error({err = 'ERR dlock: lock key ' .. key .. ' holds no lock state: another program writes under this prefix (give dlock its own with WithPrefix)'})
  end
  return s
end

-- st_write writes the state s to key: lapsing ms from now, or keeping its
-- expiry if ms is nil. until, a time in ms, has 13 digits: '..' writes it
-- exactly.
local function st_write(key, s, ms)
  local v = s.fs
  if s.o ~= '' or s.m ~= '0' or s.r ~= '' or s.l ~= '' then
    v = s.fs .. '|' .. s.c .. '|' .. s.m .. '|' .. s.u .. '|' .. s.o
    if s.g and s.g ~= '' and s.o ~= '' then
      v = v .. '/' .. s.g
    end
    if s.r ~= '' then
      v = v .. '|' .. s.l .. '|' .. s.r
    elseif s.l ~= '' then
      v = v .. '|' .. s.l
    end
  end
  if ms then
    redis.call('SET', key, v, 'PX', ms)
  else
    redis.call('SET', key, v, 'KEEPTTL')
  end
end

-- st_live tells whether the state s (nil: none) has a holder whose lease
-- runs. now is the server time in ms if the caller has it; it is read only
-- for a lease that ends before its key.
local function st_live(s, now)
  if not s or s.o == '' then
    return false
  end
  return s.u == 0 or s.u > (now or now_ms())
end

-- st_left returns what is left (ms) of the lease of the live state s at key;
-- now as for st_live.
local function st_left(key, s, now)
  if s.u == 0 then
    return redis.call('PTTL', key)
  end
  return s.u - (now or now_ms())
end

-- st_chain is how many release fences a state lists at most (its link).
local function st_chain()
  return 4
end

-- st_links returns the link of a state that follows the state s (nil: none):
-- s's fence first if s is free (a release freed it), then what s lists, at
-- most st_chain fences in all.
local function st_links(s)
  if not s then
    return ''
  end
  local l = s.l
  if s.o == '' then
    if l == '' then
      return s.fs
    end
    l = s.fs .. ',' .. l
  end
  local cut = 0
  for _ = 1, st_chain() do
    cut = string.find(l, ',', cut + 1, true)
    if not cut then
      return l
    end
  end
  return string.sub(l, 1, cut - 1)
end

-- st_follows tells whether the state s, of which owner holds nothing, shows
-- that the release of owner's hold, whose fence is myfence (a string, as the
-- script got it), freed the lock: s is free with that fence, or lists it.
-- Only that release can have put it there (an eviction leaves a record; an
-- expiry or a loss of the keys, no link). The fence must be the very one: a
-- range of fences would take a history that went on from a replica that
-- missed the hold (a failover) for this one.
local function st_follows(s, myfence)
  if myfence == '0' then
    return false
  end
  if s.o == '' and s.fs == myfence then
    return true
  end
  return s.l ~= '' and string.find(',' .. s.l .. ',', ',' .. myfence .. ',', 1, true) ~= nil
end

-- st_record returns the deadline (ms) of owner's record in the state s if
-- it has one that has not lapsed by now, and whether it records that
-- ForceRelease took owner's hold away; nil if none.
local function st_record(s, owner, now)
  return rec_find(s.r, owner, now)
end

-- st_note gives the state s a record of owner until the deadline d (ms, a
-- string), marked '!' if evicted (rec_add). It returns how long (ms) the key
-- must live for the records.
local function st_note(s, owner, d, evicted, now)
  local keep
  s.r, keep = rec_add(s.r, owner, d, evicted, now)
  return keep
end

-- st_prune drops the records of the state s that lapsed by now, and returns
-- how long (ms) the key must live for those left (0 if none).
local function st_prune(s, now)
  local keep
  s.r, keep = rec_prune(s.r, now)
  return keep
end

-- st_keep writes the state s to key so that the key lives at least ms (a
-- number) from now (the server time in ms), and no less than it would have.
-- A lease that ends with the key is given its end in until first: it ends
-- when it would have.
local function st_keep(key, s, ms, now)
  local p = redis.call('PTTL', key)
  if s.o ~= '' and s.u == 0 and p > 0 then
    s.u = now + p
  end
  if p ~= -1 and p < ms then
    st_write(key, s, ms)
  else
    st_write(key, s)
  end
end

-- st_lengthen makes the lease of the live state s at key lapse ms from now;
-- if gt, only if it would lapse sooner. A grant not yet taken up (holds 0)
-- is taken up: its hold count becomes 1. A lease that ends with its key
-- moves the key's expiry; one that ends before its key does (after a grant,
-- while records live, or shortened while the key's link is read) moves
-- until, the key never lapsing sooner than it would have. If write is true
-- (the caller changed s), the state is written whatever happens to the
-- lease. now as for st_live.
local function st_lengthen(key, s, ms, gt, now, write)
  ms = tonumber(ms)
  if s.c == 0 then
    s.c, write = 1, true
  end
  if s.u == 0 and not write and s.r == '' then
    if gt then
      redis.call('PEXPIRE', key, ms, 'GT')
      return
    end
    local p = redis.call('PTTL', key)
    if p > ms and s.l ~= '' then
      -- Shortened: the key keeps its life, for the link a retried release
      -- reads; the lease ends at until.
      s.u = (now or now_ms()) + ms
      st_write(key, s)
    else
      redis.call('PEXPIRE', key, ms)
    end
    return
  end
  now = now or now_ms()
  local p = redis.call('PTTL', key)
  local left = p
  if s.u ~= 0 then
    left = s.u - now
  end
  if gt and left >= ms then
    if write then
      st_write(key, s)
    end
    return
  end
  if p < 0 or ms >= p or (not gt and s.l == '' and s.r == '') then
    -- (Shortened, the key goes with the lease when nothing else needs it.)
    s.u = 0
    st_write(key, s, ms)
  else
    s.u = now + ms
    st_write(key, s)
  end
end

-- micros_string is t, a reply of TIME (two strings), in microseconds, as a
-- string.
local function micros_string(t)
  return t[1] .. string.sub('00000', #t[2]) .. t[2]
end

-- st_fence returns a new fence, as a string and as a number: above last (a
-- number, nil if none) and at least the server time t (from TIME) in
-- microseconds.
local function st_fence(last, t)
  local n = t[1] * 1000000 + t[2]
  if last and last >= n then
    return string.format('%.0f', last + 1), last + 1
  end
  return micros_string(t), n
end

-- st_hold makes owner the holder of the state key in place of s (its
-- state, nil if none): one hold, or 0 if grant is true (a grant its
-- grantee takes up with its next request or renewal), lapsing ms from now,
-- waits as given, the link given ("" for none), s's records that have not
-- lapsed, and a new fence, above s's and at least the server time t (from
-- TIME) in microseconds, which it returns as a string and as a number. The
-- key lives as long as the records need, and, if keep is true, at least as
-- long as it would have (a grant: the releaser reads its fence until its
-- lease's end). An Election's take passes its leader record rec, a hash,
-- which then says that owner leads: its term is the fence, its since t in
-- microseconds, its value value, its seq (the last Proclaim's) 0; it
-- lapses with the lease, and the change is published, as "*", on the shard
-- channel named as rec is.
local function st_hold(key, s, owner, ms, t, waits, link, grant, rec, value, keep)
  local f, n = st_fence(s and s.f, t)
  if rec then
    redis.call('HSET', rec, 'owner', owner, 'term', f, 'since', micros_string(t), 'value', value, 'seq', 0)
    redis.call('PEXPIRE', rec, ms)
    redis.call('SPUBLISH', rec, '*')
  end
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local r, need = '', 0
  if s and s.r ~= '' then
    need = st_prune(s, now)
    r = s.r
  end
  local c = 1
  if grant then
    c = 0
  end
  -- The common case writes strings only: a number turned into a string
  -- costs Redis a formatting call.
  local p = -2
  if keep then
    p = redis.call('PTTL', key)
  end
  ms = tonumber(ms)
  local h = {fs = f, c = c, m = waits, u = 0, o = owner, l = link, r = r}
  if r == '' and p <= ms then
    st_write(key, h, ms)
    return f, n
  end
  -- The key outlives the lease: it ends at until.
  h.u = now + ms
  local life = math.max(need, ms)
  if life > p then
    st_write(key, h, life)
  else
    st_write(key, h)
  end
  return f, n
end

-- st_grant gives the free state key (s: its state) to the waiter w, which
-- the caller has taken out of the queue or kept at its head, as st_hold
-- does for a grant, keeping the key's expiry, with the link given, and
-- returns its fence. Only w's Client is told, as tell does: the message is
-- w, the fence, ms and the server time in microseconds, separated by
-- spaces, so that w's Lock can return on it without another request.
local function st_grant(key, s, w, ms, t, stem, waits, link, rec, value)
  local f = st_hold(key, s, w, ms, t, waits, link, true, rec, value, true)
  tell(stem, w, w .. ' ' .. f .. ' ' .. ms .. ' ' .. micros_string(t))
  return f
end

-- st_free writes the state s at key free: no holder, nobody waiting (the
-- caller knows the queue is empty), the fence, the link and the records
-- kept, the key's expiry too.
local function st_free(key, s)
  if s.r == '' and s.l == '' then
    redis.call('SET', key, s.fs, 'KEEPTTL')
    return
  end
  s.c, s.m, s.u, s.o = 0, '0', 0, ''
  st_write(key, s)
end

-- st_give_back gives back holds of owner on the state key (s: its state,
-- nil if none; held: whether owner's lease runs): mode "0" sets its hold
-- count to count (it keeps the lock), mode "1" gives back its last hold,
-- mode "3" takes it away (ForceRelease: a record, marked, says so until its
-- lease would have ended). It returns the code to return at once: 2 when
-- owner keeps the lock; 4 when owner holds nothing and a record says its
-- hold was taken away; 3 when owner holds nothing, its last hold was to go,
-- and the state shows that the release of owner's hold, whose fence is
-- myfence, freed the lock (an earlier run of this release: st_follows); 0
-- when another
-- owner holds the lock and the state shows no such release; -1 when nobody
-- does (nor does it show one); or nil when owner's last hold goes and the
-- caller is to free the lock. now is the server time in ms.
local function st_give_back(key, s, owner, mode, count, myfence, held, now)
  if not held then
    if s and mode ~= '0' then
      local _, ev = st_record(s, owner, now)
      if ev then
        return 4
      end
      if st_follows(s, myfence) then
        return 3
      end
    end
    if not st_live(s, now) then
      return -1
    end
    return 0
  end
  if mode == '0' then
    s.c = tonumber(count)
    st_write(key, s)
    return 2
  end
  if mode == '3' then
    local left = st_left(key, s, now)
    st_keep(key, s, st_note(s, owner, string.format('%.0f', now + math.max(left, 1)), true, now), now)
  end
  return nil
end

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
