-- lib_state.lua: the packed string state, the lock model of a Mutex, a
-- FairMutex and an Election: the holder, its hold count and lease, the fence
-- and the records of owners that ended, all in one string key. Its functions
-- call lib_common.lua's.
--
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
  if not s and string.sub(v, 1, 3) == 'p1|' then
    error({err = 'ERR dlock: lock key ' .. key .. ' holds a lock of a Client made with dlock.WithoutScripts(): a name is used in one mode, by every Client'})
  elseif not s then
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

-- st_not_held returns what a request about owner's hold answers when owner
-- holds nothing on the state s (nil if none): 4 when a record says that
-- ForceRelease took its hold away; 3 when the state shows that the release
-- of owner's hold, whose fence is myfence, freed the lock (an earlier run of
-- this request: st_follows); 0 when another owner holds the lock and the
-- state shows neither; -1 when nobody does (nor does it show either). A
-- request about one of several holds (last false) looks for neither: only
-- the last hold's going leaves them. now is the server time in ms.
local function st_not_held(s, owner, last, myfence, now)
  if s and last then
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

-- st_give_back gives back holds of owner on the state key (s: its state,
-- nil if none; held: whether owner's lease runs): mode "0" sets its hold
-- count to count (it keeps the lock), mode "1" gives back its last hold. It
-- returns the code to return at once: 2 when owner keeps the lock;
-- st_not_held's when owner holds nothing (myfence: its fence); or nil when
-- owner's last hold goes and the caller is to pass the lock on. now is the
-- server time in ms.
local function st_give_back(key, s, owner, mode, count, myfence, held, now)
  if not held then
    return st_not_held(s, owner, mode ~= '0', myfence, now)
  end
  if mode == '0' then
    s.c = tonumber(count)
    st_write(key, s)
    return 2
  end
  return nil
end

-- st_void gives the state s (nil: none; a free state with no fence is made
-- for it) a record of owner until void (ms, a string; nil for none), unless
-- that has passed by now: owner's acquire that reaches Redis by then (its
-- reply was lost) takes nothing. It returns the state and how long (ms) the
-- key must live for the records, 0 if none was written.
local function st_void(s, owner, void, now)
  if not void or tonumber(void) <= now then
    return s, 0
  end
  if not s then
    s = {f = 0, fs = '0', c = 0, m = '0', u = 0, o = '', l = '', r = ''}
  end
  return s, st_note(s, owner, void, false, now)
end

-- st_pass_on passes on the lock of the state key (s: its state) whose
-- holder owner's hold has gone: to the first live waiter of the queue q
-- (alive: the waiters' entries), if the state's mark says anyone may wait,
-- granted as st_grant does, with the link given, for the grant lease its
-- entry names or else grant, and told on the channel stem; if nobody waits,
-- the state is written free, its fence, link and records kept. order is
-- release.lua's ARGV[6]: "1" (a FairMutex, an Election) keeps a grantee at
-- the head of the queue, so owner's place there goes with its hold; "0" (a
-- Mutex) takes a grantee out. leader, an Election's leader record (nil for
-- the other kinds), is written for the waiter the lock goes to, or deleted
-- if none (the change published on the channel of its name). t is the
-- server time (from TIME), now the same in ms.
local function st_pass_on(key, q, alive, leader, s, owner, link, grant, stem, order, t, now)
  if s.m == '1' then
    if order == '1' then
      -- A FairMutex grantee kept its place: it goes with its hold. (A
      -- Mutex's left the queue when it was granted the lock or took it.)
      redis.call('ZREM', q, owner)
      redis.call('HDEL', alive, owner)
    end
    local pattern = '%d+' -- of what follows the lapse in a queue entry
    if leader then
      pattern = '%d+|.*'
    end
    local head, _, g, after = live_waiters(q, alive, now, pattern, nil, 2)()
    if head then
      local value
      if leader then
        g, value = string.match(g, '^(%d+)|(.*)$')
      end
      -- A FairMutex's grantee stays at the head of the queue; a Mutex's
      -- leaves it, and whether anyone waits behind it is what the queue
      -- keeps.
      local waits = '1'
      if order ~= '1' then
        redis.call('ZREM', q, head)
        redis.call('HDEL', alive, head)
        if after == false or (after == nil and redis.call('EXISTS', q) == 0) then
          waits = '0'
        end
      end
      -- The state keeps its expiry if that is later than the grant lease's:
      -- the releaser's retry reads the fence until its lease's end.
      st_grant(key, s, head, g or grant, t, stem, waits, link, leader, value)
      return
    end
  end
  -- Nobody waits: the walk emptied the queue, or the mark said it was empty.
  -- The free state keeps the fence and what it lists.
  if s.r == '' then
    st_free(key, s)
  else
    s.c, s.m, s.u, s.o = 0, '0', 0, ''
    st_keep(key, s, st_prune(s, now), now)
  end
  if leader then
    redis.call('DEL', leader)
    redis.call('SPUBLISH', leader, '*')
  end
end
