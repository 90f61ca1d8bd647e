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
	//go:embed lua/latch.lua
	latchLua string
	//go:embed lua/rw_acquire.lua
	rwAcquireLua string
	//go:embed lua/rw_release.lua
	rwReleaseLua string
	//go:embed lua/raise_fence.lua
	raiseFenceLua string
	//go:embed lua/inspect.lua
	inspectLua string

	scripts = scriptSet{
		acquire: script(acquireLua),
		release: script(releaseLua),
		extend:  script(extendLua),
		ttl:     script(ttlLua),

		fairAcquire: script(fairAcquireLua),
		fairRelease: script(fairReleaseLua),

		semAcquire: script(semAcquireLua),
		semRelease: script(semReleaseLua),

		latch: script(latchLua),

		rwAcquire: script(rwAcquireLua),
		rwRelease: script(rwReleaseLua),

		raiseFence: script(raiseFenceLua),

		inspect: script(inspectLua),
	}
)

// script makes a script of a file under lua/ and the shared functions it
// calls, directly or through each other. Only those: Redis runs a script's
// whole text on every call, and each function defined costs a closure per
// call. A script may be cut into sections by lines that read libMark: each
// function goes in front of the first section that needs it, so that a
// common case answered in an early section defines only what it calls.
func script(src string) *redis.Script {
	type part struct{ name, text string }
	var parts []part
	for _, text := range strings.Split(libLua, "\n\n") {
		if m := libFunc.FindStringSubmatch(text); m != nil {
			parts = append(parts, part{m[1], text})
		}
	}
	calls := func(text, name string) bool {
		return regexp.MustCompile(`\b` + name + `\(`).MatchString(text)
	}
	var b strings.Builder
	defined := make([]bool, len(parts))
	for _, section := range strings.Split(src, "\n"+libMark+"\n") {
		// A function calls only those above it, so one pass from the bottom
		// up finds every function the section needs.
		need := make([]bool, len(parts))
		for i := len(parts) - 1; i >= 0; i-- {
			need[i] = calls(section, parts[i].name)
			for j := i + 1; j < len(parts) && !need[i]; j++ {
				need[i] = need[j] && calls(parts[j].text, parts[i].name)
			}
		}
		for i, p := range parts {
			if need[i] && !defined[i] {
				defined[i] = true
				b.WriteString(p.text)
				b.WriteString("\n\n")
			}
		}
		b.WriteString(section)
		b.WriteString("\n")
	}
	return redis.NewScript(b.String())
}

// libMark is a line that ends a section of a script (script).
const libMark = "-- (shared functions the rest calls)"

// libFunc finds the name of the function a part of lib.lua defines.
var libFunc = regexp.MustCompile(`(?m)^local function (\w+)\(`)

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
