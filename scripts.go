package dlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one file each under lua/. Each file's header names its
// KEYS, ARGV and return codes. They run with Script.Run: EVALSHA, falling back
// to EVAL when the server does not know the script (after a restart, a
// failover or SCRIPT FLUSH).
var (
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/extend.lua
	extendLua string
	//go:embed lua/ttl.lua
	ttlLua string
	//go:embed lua/fair_acquire.lua
	fairAcquireLua string
	//go:embed lua/fair_release.lua
	fairReleaseLua string
	//go:embed lua/sem_acquire.lua
	semAcquireLua string
	//go:embed lua/sem_release.lua
	semReleaseLua string
	//go:embed lua/latch_countdown.lua
	latchCountDownLua string
	//go:embed lua/rw_acquire.lua
	rwAcquireLua string
	//go:embed lua/rw_release.lua
	rwReleaseLua string

	scripts = scriptSet{
		acquire: redis.NewScript(acquireLua),
		release: redis.NewScript(releaseLua),
		extend:  redis.NewScript(extendLua),
		ttl:     redis.NewScript(ttlLua),

		fairAcquire: redis.NewScript(fairAcquireLua),
		fairRelease: redis.NewScript(fairReleaseLua),

		semAcquire: redis.NewScript(semAcquireLua),
		semRelease: redis.NewScript(semReleaseLua),

		latchCountDown: redis.NewScript(latchCountDownLua),

		rwAcquire: redis.NewScript(rwAcquireLua),
		rwRelease: redis.NewScript(rwReleaseLua),
	}
)

// scriptSet is a variable rather than constants so that tests can swap a
// script for a deliberately broken one and show that the safety checks fail.
type scriptSet struct {
	acquire, release, extend, ttl *redis.Script
	fairAcquire, fairRelease      *redis.Script
	semAcquire, semRelease        *redis.Script
	latchCountDown                *redis.Script
	rwAcquire, rwRelease          *redis.Script
}

// Result codes of release.lua and extend.lua.
const (
	codeGone  = -1 // nobody holds the lock
	codeOther = 0  // another owner holds the lock
	codeDone  = 1  // release: the lock is free; extend: extended
	codeHeld  = 2  // release: one hold given back, the lock still held
)
