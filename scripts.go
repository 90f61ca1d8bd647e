package dlock

import (
	_ "embed"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one file each under lua/. Each file's header names its
// KEYS, ARGV and return codes; the functions of lua/lib.lua that a script
// calls are put in front of it. They run with Script.Run: EVALSHA, falling back to EVAL
// when the server does not know the script (after a restart, a failover or
// SCRIPT FLUSH).
var (
	//go:embed lua/lib.lua
	libLua string
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
		acquire: script(acquireLua),
		release: script(releaseLua),
		extend:  script(extendLua),
		ttl:     script(ttlLua),

		fairAcquire: script(fairAcquireLua),
		fairRelease: script(fairReleaseLua),

		semAcquire: script(semAcquireLua),
		semRelease: script(semReleaseLua),

		latchCountDown: script(latchCountDownLua),

		rwAcquire: script(rwAcquireLua),
		rwRelease: script(rwReleaseLua),
	}
)

// script makes a script of a file under lua/ and the shared functions it
// calls. Only those: Redis runs a script's whole text on every call, and each
// function defined costs a closure per call.
func script(src string) *redis.Script {
	var b strings.Builder
	for _, part := range strings.Split(libLua, "\n\n") {
		m := libFunc.FindStringSubmatch(part)
		if m != nil && strings.Contains(src, m[1]+"(") {
			b.WriteString(part)
			b.WriteString("\n\n")
		}
	}
	b.WriteString(src)
	return redis.NewScript(b.String())
}

// libFunc finds the name of the function a part of lib.lua defines. The
// functions do not call each other, so each is taken on its own.
var libFunc = regexp.MustCompile(`(?m)^local function (\w+)\(`)

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
