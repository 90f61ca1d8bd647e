package dlock

import "github.com/redis/go-redis/v9"

// Deliberately broken scripts: the multi-process safety tests run them in
// their worker processes to show that their checks catch a broken lock.
var mutants = map[string]string{
	// The lock is granted whether or not someone holds it: the check-then-set
	// race of the naive lock, made certain.
	"acquire-ignores-holder": `
local fence = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return fence`,
	// Acquires correctly but hands out a fence it does not record: the
	// server time an hour ahead, so the next holder's fence is lower.
	"unrecorded-fence": `
if redis.call('HLEN', KEYS[1]) > 0 then
  return -redis.call('PTTL', KEYS[1]) - 3
end
redis.call('HSET', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local t = redis.call('TIME')
return t[1] * 1000000 + t[2] + 3600000000`,
}

// semMutants are broken acquire scripts of the Semaphore.
var semMutants = map[string]string{
	// Permits are handed out whether or not any are free.
	"sem-ignores-count": `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[5])
redis.call('ZADD', KEYS[5], '+inf', ARGV[1])
return redis.call('INCR', KEYS[2])`,
}

// rwMutants are broken acquire scripts of the RWMutex.
var rwMutants = map[string]string{
	// A writer waits for another writer but not for readers; readers wait
	// for a writer. Nobody queues.
	"rw-writer-ignores-readers": `
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if ARGV[3] == '1' then
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
    redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
    return 0
  end
  local lapse = tonumber(redis.call('ZSCORE', KEYS[5], ARGV[1]))
  if lapse and lapse > now then
    return 0
  end
  return -1
end
if redis.call('HLEN', KEYS[1]) > 0 then
  return -redis.call('PTTL', KEYS[1]) - 3
end
if ARGV[5] == 'r' then
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('INCR', KEYS[2])`,
}

// UseMutant replaces an acquire script by the named broken one. It reports
// false if there is no such mutant.
func UseMutant(name string) bool {
	if src, ok := rwMutants[name]; ok {
		rwReadKind.acquire = redis.NewScript(src)
		rwWriteKind.acquire = rwReadKind.acquire
		return true
	}
	if src, ok := mutants[name]; ok {
		mutexKind.acquire = redis.NewScript(src)
		return true
	}
	if src, ok := semMutants[name]; ok {
		semKind.acquire = redis.NewScript(src)
		return true
	}
	return false
}
