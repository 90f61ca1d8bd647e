package dlock

import (
	"github.com/dlock-go/dlock/internal/protocol"
	"time"

	"github.com/redis/go-redis/v9"
)

// Transient reports whether err says Redis could not be reached or is
// changing hands.
var Transient = protocol.Transient

// RequestTTL is how long an acquire may take to reach Redis; a record of
// its owner, once it ended, lasts that long at most.
const RequestTTL = protocol.RequestTTL

// Deliberately broken scripts: the multi-process safety tests run them in
// their worker processes to show that their checks catch a broken lock.
var mutants = map[string]string{
	// The lock is granted whether or not someone holds it: the check-then-set
	// race of the naive lock, made certain.
	"acquire-ignores-holder": `
local v = redis.call('GET', KEYS[1])
local fence = (tonumber(v and string.match(v, '^(%d+)|')) or 0) + 1
redis.call('SET', KEYS[1], string.format('%.0f|1|0|0|', fence) .. ARGV[1], 'PX', ARGV[2])
return fence`,
	// Acquires correctly but hands out a fence it does not record: the
	// server time an hour ahead, so the next holder's fence is lower.
	"unrecorded-fence": `
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^%d+|%d+|[01]|%d+|(.*)$') ~= '' then
  return -redis.call('PTTL', KEYS[1]) - 3
end
local t = redis.call('TIME')
redis.call('SET', KEYS[1], string.format('%.0f|1|0|0|', t[1] * 1000000 + t[2]) .. ARGV[1], 'PX', ARGV[2])
return t[1] * 1000000 + t[2] + 3600000000`,
}

// redMutants are the same broken acquire scripts for a RedLock's members,
// whose lock is a hash beside a fence key.
var redMutants = map[string]string{
	// The fence key may hold records after its number: they are dropped.
	"acquire-ignores-holder": `
local v = redis.call('GET', KEYS[2])
local fence = (tonumber(v and string.match(v, '^(%d+)')) or 0) + 1
redis.call('SET', KEYS[2], fence)
redis.call('HSET', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return fence`,
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
redis.call('HSET', KEYS[1], ARGV[1], ARGV[6])
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
if ARGV[4] == '1' then
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
if ARGV[6] == 'r' then
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('INCR', KEYS[2])`,
}

// extendMutants are broken renewal scripts.
var extendMutants = map[string]string{
	// Renews whatever holds each lock and says yes: the watchdog that
	// extends a lock its holder no longer has.
	"extend-ignores-owner": `
local res, k = {}, 1
for i = 1, #ARGV / 6 do
  redis.call('PEXPIRE', KEYS[k], ARGV[6 * i - 3])
  res[i] = 1
  k = k + tonumber(ARGV[6 * i])
end
return res`,
}

// UseMutant replaces an acquire or extend script by the named broken one, in
// every Client the process makes from then on: it is process-wide, for the
// worker processes of the multi-process safety tests call it before they make
// any Client. It reports false if there is no such mutant.
func UseMutant(name string) bool {
	if src, ok := extendMutants[name]; ok {
		protocol.DefaultScripts[protocol.ScriptExtend] = protocol.NewScript(src)
		return true
	}
	if src, ok := rwMutants[name]; ok {
		protocol.DefaultScripts[protocol.ScriptRWAcquire] = protocol.NewScript(src)
		return true
	}
	if src, ok := mutants[name]; ok {
		// A Mutex's, and a RedLock member's.
		protocol.DefaultScripts[protocol.ScriptAcquire] = protocol.NewScript(src)
		protocol.DefaultScripts[protocol.ScriptRedAcquire] = protocol.NewScript(redMutants[name])
		return true
	}
	if src, ok := semMutants[name]; ok {
		protocol.DefaultScripts[protocol.ScriptSemAcquire] = protocol.NewScript(src)
		return true
	}
	return useElectionMutant(name)
}

// ScriptHash returns the SHA1 of the script that does op ("acquire",
// "release", "leave", "evict", "extend", "ttl", "red_acquire", "red_release",
// "sem_acquire", "sem_release", "rw_acquire", "rw_release", "latch",
// "raise_fence", "inspect"), as sent to Redis, for tests that inject faults
// into its requests.
func ScriptHash(op string) string {
	return redis.NewScript(ScriptSource(op)).Hash()
}

// ScriptSource returns the text of the script that does op, as ScriptHash
// names it.
func ScriptSource(op string) string {
	src, ok := map[string]string{
		"acquire": protocol.AcquireLua, "release": protocol.ReleaseLua, "leave": protocol.LeaveLua, "evict": protocol.EvictLua,
		"extend": protocol.ExtendLua, "ttl": protocol.TtlLua,
		"red_acquire": protocol.RedAcquireLua, "red_release": protocol.RedReleaseLua,
		"sem_acquire": protocol.SemAcquireLua, "sem_release": protocol.SemReleaseLua,
		"rw_acquire": protocol.RwAcquireLua, "rw_release": protocol.RwReleaseLua,
		"raise_fence": protocol.RaiseFenceLua,
		"latch":       protocol.LatchLua,
		"inspect":     protocol.InspectLua,
		"leader":      protocol.LeaderLua, "proclaim": protocol.ProclaimLua,
		"group_result": protocol.GroupResultLua, "group_share": protocol.GroupShareLua,
	}[op]
	if !ok {
		panic("ScriptSource: no script " + op)
	}
	return src
}

// testOption is an Option that only tests can make: it sets what
// config holds for them.
func testOption(name string, apply func(*config)) Option {
	return Option{name: name, clientOnly: true, apply: func(c *config) error {
		apply(c)
		return nil
	}}
}

// WithNotifierTimes sets how long the Client's wake-up connection may stay
// silent before it is pinged, and how long a ping may go unanswered.
func WithNotifierTimes(silence, pong time.Duration) Option {
	return testOption("WithNotifierTimes", func(c *config) {
		c.notify.HealthCheck, c.notify.PongWait = silence, pong
	})
}

// WithMaxIdleGates sets how many channels the Client keeps subscribed with
// nobody waiting.
func WithMaxIdleGates(n int) Option {
	return testOption("WithMaxIdleGates", func(c *config) { c.notify.MaxIdleGates = n })
}

// WithUnsubscribeHook makes f run whenever the Client's notifier is about to
// let go of idle channels.
func WithUnsubscribeHook(f func()) Option {
	return testOption("WithUnsubscribeHook", func(c *config) { c.notify.BeforeUnsubscribe = f })
}

// WithRecordEvery makes the Client write its record (its name) at most every
// d instead of every 20s.
func WithRecordEvery(d time.Duration) Option {
	return testOption("WithRecordEvery", func(c *config) { c.recordEvery = d })
}

// WithLostSUnsubscribe makes the Client's notifier pass over the SUNSUBSCRIBE
// a server sends when a channel's slot moves, as if it were lost.
func WithLostSUnsubscribe() Option {
	return testOption("WithLostSUnsubscribe", func(c *config) { c.notify.LoseDropped = true })
}

// WithoutFenceRaise makes the Client's RedLock acquisitions skip writing
// their fence back to the nodes, as a broken RedLock would: the raise script
// only reports whether the owner holds the lock.
func WithoutFenceRaise() Option {
	return testOption("WithoutFenceRaise", func(c *config) {
		s := *c.scripts
		s[protocol.ScriptRaiseFence] = protocol.NewScript(`return redis.call('HEXISTS', KEYS[1], ARGV[1])`)
		c.scripts = &s
	})
}

// ReadyChannels returns the channels c believes it is subscribed to.
func ReadyChannels(c *Client) []string { return c.e.note.ReadyChannels() }

// GroupBySlot makes c's node group renewals by hash slot, as on a Cluster,
// so that tests on one server can see the per-slot script calls.
func GroupBySlot(c *Client) {
	switch b := c.e.backend.(type) {
	case *protocol.Node:
		b.Cluster = true
	case *protocol.WaitNode:
		b.Cluster = true
	}
}
