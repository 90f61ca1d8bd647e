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

	scripts = scriptSet{
		acquire: redis.NewScript(acquireLua),
		release: redis.NewScript(releaseLua),
		extend:  redis.NewScript(extendLua),
		ttl:     redis.NewScript(ttlLua),

		fairAcquire: redis.NewScript(fairAcquireLua),
		fairRelease: redis.NewScript(fairReleaseLua),

		semAcquire: redis.NewScript(semAcquireLua),
		semRelease: redis.NewScript(semReleaseLua),

		latch: redis.NewScript(latchLua),

		rwAcquire: redis.NewScript(rwAcquireLua),
		rwRelease: redis.NewScript(rwReleaseLua),

		raiseFence: redis.NewScript(raiseFenceLua),

		inspect: redis.NewScript(inspectLua),
	}
)

// scriptSet is a variable rather than constants so that tests can swap a
// script for a deliberately broken one and show that the safety checks fail.
type scriptSet struct {
	acquire, release, extend, ttl *redis.Script
	fairAcquire, fairRelease      *redis.Script
	semAcquire, semRelease        *redis.Script
	latch                         *redis.Script
	rwAcquire, rwRelease          *redis.Script
	raiseFence                    *redis.Script
	inspect                       *redis.Script
}
