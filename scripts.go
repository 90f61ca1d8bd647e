package dlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:generate go run ./internal/lualink

// The Lua scripts. Each is written in lua/NAME.lua, whose header names its
// KEYS, ARGV and return codes; Redis runs lua/gen/NAME.lua, that file with
// the functions of lua/lib.lua it calls put in front, which go generate
// writes (internal/lualink). They run with Script.Run: EVALSHA, falling back
// to EVAL when the server does not know the script (after a restart, a
// failover or SCRIPT FLUSH).
var (
	//go:embed lua/gen/acquire.lua
	acquireLua string
	//go:embed lua/gen/release.lua
	releaseLua string
	//go:embed lua/gen/extend.lua
	extendLua string
	//go:embed lua/gen/ttl.lua
	ttlLua string
	//go:embed lua/gen/fair_acquire.lua
	fairAcquireLua string
	//go:embed lua/gen/fair_release.lua
	fairReleaseLua string
	//go:embed lua/gen/sem_acquire.lua
	semAcquireLua string
	//go:embed lua/gen/sem_release.lua
	semReleaseLua string
	//go:embed lua/gen/latch.lua
	latchLua string
	//go:embed lua/gen/rw_acquire.lua
	rwAcquireLua string
	//go:embed lua/gen/rw_release.lua
	rwReleaseLua string
	//go:embed lua/gen/raise_fence.lua
	raiseFenceLua string
	//go:embed lua/gen/inspect.lua
	inspectLua string

	// defaultScripts are the embedded scripts, which every node runs unless
	// its Client was made with others (tests that show a check catches a
	// broken script).
	defaultScripts = scriptSet{
		scriptAcquire: redis.NewScript(acquireLua),
		scriptRelease: redis.NewScript(releaseLua),
		scriptExtend:  redis.NewScript(extendLua),
		scriptTTL:     redis.NewScript(ttlLua),

		scriptFairAcquire: redis.NewScript(fairAcquireLua),
		scriptFairRelease: redis.NewScript(fairReleaseLua),

		scriptSemAcquire: redis.NewScript(semAcquireLua),
		scriptSemRelease: redis.NewScript(semReleaseLua),

		scriptLatch: redis.NewScript(latchLua),

		scriptRWAcquire: redis.NewScript(rwAcquireLua),
		scriptRWRelease: redis.NewScript(rwReleaseLua),

		scriptRaiseFence: redis.NewScript(raiseFenceLua),

		scriptInspect: redis.NewScript(inspectLua),
	}
)

// script names one of the scripts.
type script uint8

const (
	scriptAcquire script = iota
	scriptRelease
	scriptExtend
	scriptTTL
	scriptFairAcquire
	scriptFairRelease
	scriptSemAcquire
	scriptSemRelease
	scriptLatch
	scriptRWAcquire
	scriptRWRelease
	scriptRaiseFence
	scriptInspect
	numScripts
)

// scriptSet is the scripts a node runs, by name: a value, so that a Client's
// tests can run a deliberately broken one in its place and show that the
// safety checks fail.
type scriptSet [numScripts]*redis.Script
