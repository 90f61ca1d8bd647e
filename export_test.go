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
	// Acquires correctly but hands every holder the same fence.
	"constant-fence": `
if redis.call('HLEN', KEYS[1]) > 0 then
  return -redis.call('PTTL', KEYS[1]) - 3
end
redis.call('HSET', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`,
}

// semMutants are broken acquire scripts of the Semaphore.
var semMutants = map[string]string{
	// Permits are handed out whether or not any are free.
	"sem-ignores-count": `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[5])
redis.call('ZADD', KEYS[5], '+inf', ARGV[1])
return redis.call('INCR', KEYS[2])`,
}

// UseMutant replaces an acquire script by the named broken one. It reports
// false if there is no such mutant.
func UseMutant(name string) bool {
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
