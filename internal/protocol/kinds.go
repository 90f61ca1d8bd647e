package protocol

// A Layout is a lock kind's scripts and the layout of its keys. Each key list
// names, in the order of the KEYS in its script's header, the keys of one
// lock by the name the header gives them; the key itself is the lock's tag
// followed by the name's suffix (keyNames).
type Layout struct {
	Name    string // the Go type, for messages
	Space   string // the keys' namespace after the prefix: "" for a Mutex, "fair:", ...
	acquire script
	release script

	acquireKeys []string // KEYS of acquire
	releaseKeys []string // KEYS of release
	// leaseKeys is a lease's group of KEYS in extend.lua (but for a
	// RedLock member's extends hash, extendsKey): the key that carries each
	// holder's lease, then those that must outlive it. The first is also
	// ttl.lua's KEYS[1], and raise_fence.lua's (with the second, for a lock
	// hash's fence).
	leaseKeys []string
	leaseIn   leaseCarrier // what carries each holder's lease
	// extendsHash: a holder's Extend generation is kept in the extends
	// hash, which extend.lua is given last; every other kind keeps it in a
	// key that exists while the lease runs (extend.lua).
	extendsHash bool
	Handoff     handoff // what a release that frees the lock does for the next waiter
	Reentrant   bool    // a Lease in the context makes an acquisition of the same lock re-enter its hold
	// order is what release.lua, leave.lua and evict.lua do with a
	// grantee's place in the queue (release.lua's ARGV[6]); nil for the
	// kinds that run other scripts.
	order any
	// own is which of KindArgs the acquire script takes, after the
	// arguments every kind's take.
	own ownArgs
}

// ownArgs names the arguments of a kind's own in its acquire script's ARGV.
type ownArgs uint8

const (
	ownNone    ownArgs = iota
	ownRead            // "r" and KindArgs.Writer (rw_acquire.lua)
	ownWrite           // "w" and "" (rw_acquire.lua)
	ownPermits         // KindArgs.Permits and Total (sem_acquire.lua)
	ownValue           // KindArgs.Value (acquire.lua, an Election's)
)

// The orders of release.lua's ARGV[6] (leave.lua's ARGV[4], evict.lua's
// ARGV[5]), boxed once.
var (
	orderPass any = "0" // a grant takes the grantee out of the queue: if it lapses, the next live waiter is served
	orderKeep any = "1" // the grantee keeps the head of the queue until it releases or its registration lapses
)

// handoff is what a release that frees a lock does for the waiter next in
// line.
type handoff uint8

const (
	// handoffNone: the kind's own release script decides (a Semaphore, a
	// read hold).
	handoffNone handoff = iota
	// HandoffGrant: the release grants the lock to the next waiter and tells
	// it the fence (st_grant in lua/lib_state.lua, grant in lua/lib_hash.lua),
	// so that its Lock may return on that message.
	HandoffGrant
	// handoffTell: the release keeps the lock for the next waiter a while
	// and tells it to take it (a RedLock's Mutex, whose members keep
	// separate queues).
	handoffTell
)

// leaseCarrier names, for extend.lua and ttl.lua, what carries a holder's
// lease.
type leaseCarrier string

const (
	leaseInState leaseCarrier = "s" // the lock's state, a string (lua/lib_state.lua)
	leaseInHash  leaseCarrier = "h" // the lock hash (owner id -> hold count)
	leaseInZSet  leaseCarrier = "z" // a sorted set of holders (owner id -> lapse time)
)

// leaseInRedLock is extend.lua's type of a RedLock member's lock hash, whose
// group names its extends hash last.
const leaseInRedLock = "r"

// arg returns c as a script argument. Each carrier is a constant, which an
// interface holds without allocating.
func (c leaseCarrier) arg() any {
	switch c {
	case leaseInZSet:
		return string(leaseInZSet)
	case leaseInState:
		return string(leaseInState)
	}
	return string(leaseInHash)
}

// keyNames maps the names of the scripts' headers to key suffixes.
var keyNames = map[string]string{
	"lock": "", "semaphore": "", "count": "",
	"fence": ":fence", "waiters": ":waiters", "alive": ":alive",
	"holders": ":holders", "total": ":total", "readers": ":readers", "fences": ":fences", "writers": ":writers",
	"leader": ":leader",
}

var (
	// A Mutex and a FairMutex keep the same queue, in arrival order, and
	// run the same scripts; they differ in a grant that lapses (its grantee
	// paused past it): a Mutex passes the lock to the next live waiter, a
	// FairMutex keeps it for the grantee while its registration lives.
	// The lock itself, its holder and its fence, is one string, its state.
	MutexKind = &Layout{Name: "Mutex", acquire: ScriptAcquire, release: scriptRelease,
		acquireKeys: []string{"lock", "waiters", "alive"},
		releaseKeys: []string{"lock", "waiters", "alive"},
		leaseKeys:   []string{"lock"},
		leaseIn:     leaseInState,
		Handoff:     HandoffGrant, Reentrant: true, order: orderPass}
	FairKind = &Layout{Name: "FairMutex", Space: "fair:", acquire: ScriptAcquire, release: scriptRelease,
		acquireKeys: []string{"lock", "waiters", "alive"},
		releaseKeys: []string{"lock", "waiters", "alive"},
		leaseKeys:   []string{"lock"},
		leaseIn:     leaseInState,
		Handoff:     HandoffGrant, Reentrant: true, order: orderKeep}
	SemKind = &Layout{Name: "Semaphore", Space: "sem:", acquire: ScriptSemAcquire, release: scriptSemRelease,
		acquireKeys: []string{"semaphore", "fence", "waiters", "alive", "holders", "total"},
		releaseKeys: []string{"semaphore", "waiters", "alive", "holders", "total", "fence"},
		leaseKeys:   []string{"holders", "fence", "semaphore"},
		leaseIn:     leaseInZSet, own: ownPermits}
	// The two kinds of hold of an RWMutex share its keys, scripts and
	// wake-up channel; a read hold's lease is its member of the readers set,
	// the write hold's is the lock hash.
	RWReadKind = &Layout{Name: "RWMutex", Space: "rw:", acquire: ScriptRWAcquire, release: scriptRWRelease,
		acquireKeys: []string{"lock", "fence", "waiters", "alive", "readers", "fences", "writers"},
		releaseKeys: []string{"lock", "waiters", "alive", "readers", "fences", "writers", "fence"},
		leaseKeys:   []string{"readers", "fence", "fences"},
		leaseIn:     leaseInZSet, Reentrant: true, own: ownRead}
	RWWriteKind = &Layout{Name: "RWMutex", Space: "rw:", acquire: ScriptRWAcquire, release: scriptRWRelease,
		acquireKeys: RWReadKind.acquireKeys,
		releaseKeys: RWReadKind.releaseKeys,
		leaseKeys:   []string{"lock", "fence", "fences"},
		Handoff:     HandoffGrant, Reentrant: true, own: ownWrite}
	LatchKind = &Layout{Name: "CountDownLatch", Space: "latch:"}
	// RedMutexKind is a Mutex on a RedLock member: the scripts of its own
	// (red_acquire.lua, red_release.lua) keep no order and grant nothing, for each
	// member keeps a queue of its own: a release tells the next waiter to
	// try.
	RedMutexKind = &Layout{Name: "Mutex", acquire: ScriptRedAcquire, release: scriptRedRelease,
		acquireKeys: []string{"lock", "fence", "waiters"},
		releaseKeys: []string{"lock", "fence", "waiters"},
		leaseKeys:   []string{"lock", "fence"},
		extendsHash: true,
		Handoff:     handoffTell, Reentrant: true}
)
