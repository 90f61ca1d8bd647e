-- next.lua: reserve a block of ids of one generator.
--
-- An id is (second << 32) | sequence: the second, counted from the epoch
-- (ARGV[1]), in which the block was reserved, and the block's place among
-- that second's ids. The generator's state is the second and the next
-- sequence number in it.
--
-- KEYS[1]  state: hash with fields "s" (second) and "n" (next sequence)
-- ARGV[1]  epoch: the Unix second ids count from
-- ARGV[2]  block: how many ids to reserve, 1 to 2^32
-- ARGV[3]  idle: seconds the state lives after its last use
--
-- Returns {second, first sequence}: the block is that second's sequences
-- first .. first + block - 1; or {-1, ms}: nothing reserved, call again in
-- ms milliseconds, when the server's clock reaches the state's second.
--
-- The second is the server's clock (TIME), so the application servers'
-- clocks do not matter, and it never goes back:
--   * A missing state (first use, expiry after idle seconds, a restart or a
--     failover that lost it) may have handed out ids of the current second
--     before it was lost: the state starts at the next second, and ids are
--     handed out once the clock reaches it (a wait of under a second).
--   * A second whose 2^32 sequences are used up is followed by the next,
--     once the clock reaches it.
--   * Ids are handed out of a second ahead of the clock only if the clock is
--     behind the stored second by more than one (stepped back, or a failover
--     to a server whose clock is behind): the stored second goes on.
-- So no id is handed out of a second the clock has not reached, but after a
-- step back of the clock, and a lost state never repeats an id.
--
-- Run twice (a retry after a lost reply) it reserves a second block: the
-- first is never handed out, a gap, never a duplicate.
local t = redis.call('TIME')
local now = tonumber(t[1]) - tonumber(ARGV[1])
local ms = math.floor(tonumber(t[2]) / 1000)
local block = tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 's', 'n')
local s, n = tonumber(state[1]), tonumber(state[2])
if not s or not n then
  s, n = now + 1, 0
elseif s < now then
  s, n = now, 0
elseif n + block > 4294967296 then
  s, n = s + 1, 0
end
redis.call('HSET', KEYS[1], 's', s, 'n', n)
redis.call('EXPIRE', KEYS[1], ARGV[3])
if s == now + 1 then
  return {-1, 1000 - ms}
end
redis.call('HSET', KEYS[1], 'n', n + block)
return {s, n}
