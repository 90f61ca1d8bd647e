package protocol

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
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
	//go:embed lua/gen/group_result.lua
	GroupResultLua string
	//go:embed lua/gen/group_share.lua
	GroupShareLua string

	// DefaultScripts are the embedded scripts, which every node runs unless
	// its Client was made with others (tests that show a check catches a
	// broken script).
	DefaultScripts = ScriptSet{
		ScriptAcquire: NewScript(AcquireLua),
		scriptRelease: NewScript(ReleaseLua),
		scriptLeave:   NewScript(LeaveLua),
		scriptEvict:   NewScript(EvictLua),
		ScriptExtend:  NewScript(ExtendLua),
		scriptTTL:     NewScript(TtlLua),

		ScriptRedAcquire: NewScript(RedAcquireLua),
		scriptRedRelease: NewScript(RedReleaseLua),

		ScriptSemAcquire: NewScript(SemAcquireLua),
		scriptSemRelease: NewScript(SemReleaseLua),

		scriptLatch: NewScript(LatchLua),

		ScriptRWAcquire: NewScript(RwAcquireLua),
		scriptRWRelease: NewScript(RwReleaseLua),

		ScriptRaiseFence: NewScript(RaiseFenceLua),

		scriptInspect: NewScript(InspectLua),

		ScriptLeader:   NewScript(LeaderLua),
		ScriptProclaim: NewScript(ProclaimLua),

		scriptGroupResult: NewScript(GroupResultLua),
		scriptGroupShare:  NewScript(GroupShareLua),
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
	scriptGroupResult
	scriptGroupShare
	numScripts
)

// ScriptSet is the scripts a node runs, by name: a value, so that a Client's
// tests can run a deliberately broken one in its place and show that the
// safety checks fail.
type ScriptSet [numScripts]*Script

// Script is a Lua script as a call sends it: by its SHA1 (EVALSHA), and,
// when the server does not know it (NOSCRIPT), its body (EVAL); each boxed
// once, as an argument.
type Script struct {
	src, sha any // string
}

// NewScript returns the script whose body is src.
func NewScript(src string) *Script {
	h := sha1.Sum([]byte(src))
	return &Script{src: src, sha: hex.EncodeToString(h[:])}
}

// Hash returns the script's SHA1, in hex.
func (s *Script) Hash() string { return s.sha.(string) }

func shaArg(s *Script) any { return s.sha }
func srcArg(s *Script) any { return s.src }
