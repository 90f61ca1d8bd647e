package protocol

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:generate go run ../lualink

// The Lua scripts. Each is written in lua/NAME.lua, whose header names its
// KEYS, ARGV and return codes, and the libraries it links (lua/lib_*.lua,
// each opening with what it serves); Redis runs lua/gen/NAME.lua, that file
// with the functions of those libraries it calls put in front, which go
// generate writes (internal/lualink). They run with Script.Run: EVALSHA,
// falling back to EVAL when the server does not know the script (after a
// restart, a failover or SCRIPT FLUSH).
var (
	//go:embed lua/gen/acquire.lua
	AcquireLua string
	//go:embed lua/gen/release.lua
	ReleaseLua string
	//go:embed lua/gen/leave.lua
	LeaveLua string
	//go:embed lua/gen/evict.lua
	EvictLua string
	//go:embed lua/gen/extend.lua
	ExtendLua string
	//go:embed lua/gen/ttl.lua
	TtlLua string
	//go:embed lua/gen/red_acquire.lua
	RedAcquireLua string
	//go:embed lua/gen/red_release.lua
	RedReleaseLua string
	//go:embed lua/gen/sem_acquire.lua
	SemAcquireLua string
	//go:embed lua/gen/sem_release.lua
	SemReleaseLua string
	//go:embed lua/gen/latch.lua
	LatchLua string
	//go:embed lua/gen/rw_acquire.lua
	RwAcquireLua string
	//go:embed lua/gen/rw_release.lua
	RwReleaseLua string
	//go:embed lua/gen/raise_fence.lua
	RaiseFenceLua string
	//go:embed lua/gen/inspect.lua
	InspectLua string
	//go:embed lua/gen/leader.lua
	LeaderLua string
	//go:embed lua/gen/proclaim.lua
	ProclaimLua string

	// DefaultScripts are the embedded scripts, which every node runs unless
	// its Client was made with others (tests that show a check catches a
	// broken script).
	DefaultScripts = ScriptSet{
		ScriptAcquire: redis.NewScript(AcquireLua),
		scriptRelease: redis.NewScript(ReleaseLua),
		scriptLeave:   redis.NewScript(LeaveLua),
		scriptEvict:   redis.NewScript(EvictLua),
		ScriptExtend:  redis.NewScript(ExtendLua),
		scriptTTL:     redis.NewScript(TtlLua),

		ScriptRedAcquire: redis.NewScript(RedAcquireLua),
		scriptRedRelease: redis.NewScript(RedReleaseLua),

		ScriptSemAcquire: redis.NewScript(SemAcquireLua),
		scriptSemRelease: redis.NewScript(SemReleaseLua),

		scriptLatch: redis.NewScript(LatchLua),

		ScriptRWAcquire: redis.NewScript(RwAcquireLua),
		scriptRWRelease: redis.NewScript(RwReleaseLua),

		ScriptRaiseFence: redis.NewScript(RaiseFenceLua),

		scriptInspect: redis.NewScript(InspectLua),

		ScriptLeader:   redis.NewScript(LeaderLua),
		ScriptProclaim: redis.NewScript(ProclaimLua),
	}
)

// script names one of the scripts.
type script uint8

const (
	ScriptAcquire script = iota
	scriptRelease
	scriptLeave
	scriptEvict
	ScriptExtend
	scriptTTL
	ScriptRedAcquire
	scriptRedRelease
	ScriptSemAcquire
	scriptSemRelease
	scriptLatch
	ScriptRWAcquire
	scriptRWRelease
	ScriptRaiseFence
	scriptInspect
	ScriptLeader
	ScriptProclaim
	numScripts
)

// ScriptSet is the scripts a node runs, by name: a value, so that a Client's
// tests can run a deliberately broken one in its place and show that the
// safety checks fail.
type ScriptSet [numScripts]*redis.Script
