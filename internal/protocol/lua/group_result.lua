-- group_result.lua: read the latest result of a Group key, writing nothing
-- (EVALSHA_RO).
--
-- KEYS[1]  result: the result hash group_share.lua writes
--
-- Returns {f, age, e, v}: the fence of the run that made the result (a
-- string), how long ago (ms) it was left, "1" if v is an error's message
-- ("0" if a value), and v; {} if there is none.
--
-- libraries: lib_common.lua
local r = redis.call('HMGET', KEYS[1], 'f', 't', 'e', 'v')
if not r[1] then
  return {}
end
return {r[1], now_ms() - tonumber(r[2]), r[3], r[4]}
