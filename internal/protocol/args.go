package protocol

// What the scripts take and answer beyond keys: their modes, result codes
// and replies, as their headers name them, and the arguments boxed once so
// that a request does not allocate them.

import (
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/timing"
)

// remnantTTL is how long a name keeps the record of a call that removed its
// state: a latch's opening (latch.lua), a Semaphore's Delete of its total
// (sem_release.lua). A retry of that call (go-redis runs a request again
// when its reply is lost) finds it and answers as the first run did; retries
// come well within it.
const remnantTTL = 10 * time.Second

// remnantTTLArg is remnantTTL in milliseconds as a script argument, boxed
// once.
var remnantTTLArg any = remnantTTL.Milliseconds()

// Modes of the scripts, as their headers name them.
type (
	acquireMode string // ARGV[3] of an acquire script
	ReleaseMode string // ARGV[3] of a release script
	SemMode     string // ARGV[3] of sem_release.lua, beyond releaseLast and releaseLeave
	LatchMode   string // ARGV[1] of latch.lua
)

const (
	takeMode    acquireMode = "0" // take the lock, or register as a waiter
	reenterMode acquireMode = "1" // add a hold of an owner that has one

	ReleaseOne  ReleaseMode = "0" // one of several holds goes: the count that remains is given
	ReleaseLast ReleaseMode = "1" // the last hold goes: the lock is freed
	// ReleaseLastQueued is ReleaseLast for a hold that others are likely to
	// wait behind (it was granted): release.lua reads the state first
	// instead of trying the common case's write first, which it would only
	// have to put back. Scripts without that case take it as ReleaseLast.
	ReleaseLastQueued ReleaseMode = "4"
	// ReleaseLeave: a waiter gives up: unregister it, pass the lock on if
	// it was granted to it. The kinds of release.lua run leave.lua for it,
	// which takes no mode.
	ReleaseLeave ReleaseMode = "2"
	// releaseEvict is ReleaseLast for ForceRelease: the owner's own release
	// will say so. The kinds of release.lua run evict.lua for it.
	releaseEvict ReleaseMode = "3"

	SemSetTotal    SemMode = "3"
	SemAvailable   SemMode = "4"
	SemDeleteTotal SemMode = "5"
	semEvict       SemMode = "6" // as ReleaseLast, for ForceRelease: the holder's own release and renewal will say so

	LatchDown   LatchMode = "down"
	LatchSet    LatchMode = "set"
	LatchDelete LatchMode = "delete"
)

// arg returns m as a script argument. Each mode is a constant, which an
// interface holds without allocating.
func (m ReleaseMode) arg() any {
	switch m {
	case ReleaseOne:
		return string(ReleaseOne)
	case ReleaseLast:
		return string(ReleaseLast)
	case ReleaseLastQueued:
		return string(ReleaseLastQueued)
	case ReleaseLeave:
		return string(ReleaseLeave)
	case releaseEvict:
		return string(releaseEvict)
	}
	return string(m)
}

// SemWhy, as the registration of a Semaphore's acquire, does not queue the
// caller, and has an answer "not acquired" say why (AcquireResult.Sem): the
// register argument "-1" of sem_acquire.lua.
const SemWhy = -time.Millisecond

// Result codes of the release scripts and extend.lua.
const (
	CodeGone  = -1 // nobody holds the lock
	CodeOther = 0  // another owner holds the lock
	CodeDone  = 1  // release: the lock is free; extend: extended
	CodeHeld  = 2  // release: one hold given back, the lock still held
	CodeStale = 2  // extend: not extended, for a later Extend of the lease ran first
	// CodeAfter: release: the owner holds nothing, and the lock's keys show
	// that an earlier run of this release freed the lock (its reply was
	// lost): a lock's state is free with the owner's fence, or its holder
	// took the lock from that release, or was granted it by it (its link);
	// an RWMutex's or a RedLock member's fence key still holds the owner's
	// fence, which, once the lease's local deadline has passed, an expiry
	// would leave too.
	CodeAfter = 3
	// CodeEvicted: release, extend: the owner's hold was taken away by
	// ForceRelease.
	CodeEvicted = 4
)

// Replies and arguments of the scripts that are numbers or strings with a
// meaning of their own, as their headers name them.
const (
	// An acquire script's integer reply, beyond a fence (> 0): the owner's
	// hold count went up (reenterMode), or the owner holds nothing to
	// re-enter (for a Semaphore: more permits asked than its total). A wait
	// of w ms (-1: unknown) is -w - heldOffset (held_reply in lua/lib_hash.lua).
	replyReentered = 0
	replyGone      = -1
	heldOffset     = 3

	// ttl.lua's replies other than the time left.
	ttlOther = -3 // another owner holds the lock
	ttlGone  = -2 // nobody holds it, or the owner's lease lapsed

	// tellArg is release scripts' ARGV[4] (the grant lease) that tells the
	// next waiter to try instead of granting it the lock.
	tellArg = "0"
)

// extendHow is ARGV "how" of a lease in extend.lua.
type extendHow string

const (
	extendLonger extendHow = "gt"  // lengthen the lease only: a renewal
	extendExact  extendHow = "set" // the lease lapses ttl from now: Lease.Extend
)

// arg returns h as a script argument, without allocating.
func (h extendHow) arg() any {
	if h == extendExact {
		return string(extendExact)
	}
	return string(extendLonger)
}

// FenceArg is a fence as a script argument, boxed once: as the acquire
// script's reply holds it, kept by the lease for its release, which then
// sends it without boxing it again.
type FenceArg struct{ v any }

// BoxFence makes f a FenceArg, boxing it (an allocation).
func BoxFence(f int64) FenceArg { return FenceArg{f} }

// NoFence is the FenceArg of an owner whose fence is unknown: 0.
var NoFence = FenceArg{int64(0)}

// arg returns f as a script argument; the zero FenceArg is 0.
func (f FenceArg) arg() any {
	if f.v == nil {
		return NoFence.v
	}
	return f.v
}

// boxed is a script argument in milliseconds computed from a duration,
// boxed once for the last duration it was asked for: an int64 above 255 in
// an interface is an allocation, and most programs lock with one TTL.
type boxed struct {
	of   func(time.Duration) time.Duration
	last atomic.Pointer[boxedArg]
}

type boxedArg struct {
	d  time.Duration
	ms any
}

func (b *boxed) arg(d time.Duration) any {
	if a := b.last.Load(); a != nil && a.d == d {
		return a.ms
	}
	a := &boxedArg{d, b.of(d).Milliseconds()}
	b.last.Store(a)
	return a.ms
}

var (
	ttlArgs   = boxed{of: func(d time.Duration) time.Duration { return d }}
	grantArgs = boxed{of: timing.GrantFor}
)

// msArg returns d in milliseconds as a script argument.
func msArg(d time.Duration) any { return ttlArgs.arg(d) }

// grantArg returns timing.GrantFor(ttl) in milliseconds as a script argument.
func grantArg(ttl time.Duration) any { return grantArgs.arg(ttl) }
