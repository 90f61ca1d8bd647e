// Package protocol is the layer of dlock that talks to Redis: what is sent
// and what comes back. Backend declares every request, one method each; Node
// (a plain, Sentinel or Cluster deployment) and WaitNode (WithWaitReplicas)
// implement it, and a RedLock (internal/quorum) is a Backend made of member
// Backends. Nothing here waits, retries or keeps state; the layers above
// decide what a reply means for a lease.
package protocol

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/rclient"
)

// Record is a string key a renewal round writes beside its extends (a
// Client's name): Key holds Value for TTL. The backend sets Sent if the
// write went with the round, and Err to its failure.
type Record struct {
	Key, Value string
	TTL        time.Duration
	Sent       bool
	Err        error
}

// Backend is where a Client's locks are held: the requests every deployment
// answers, one method each, with typed arguments and replies. A plain,
// Sentinel or Cluster deployment is a Node; WithWait wraps a Node in a
// WaitNode; a RedLock is quorum.New of member Backends. What a deployment
// can do beyond these, the layers above ask by type assertion, for one of
// the capabilities below (Semaphores, Latches, Elections, Groups, Admin, Sharded,
// Replicated, Kinds), never by the Backend's type; what differs in how it
// does them, through Traits.
type Backend interface {
	// Acquire runs k's acquire script once; if the lock is held and
	// register is above zero, owner is registered as a waiter for that long
	// (a Semaphore's register may be SemWhy). x are the kind's own
	// arguments.
	Acquire(ctx context.Context, k Keys, owner string, ttl, register time.Duration, x KindArgs) (AcquireResult, error)
	// Reenter adds a hold of owner, which then has count holds.
	Reenter(ctx context.Context, k Keys, owner string, ttl time.Duration, count int, x KindArgs) (AcquireResult, error)
	// Release runs k's release script and returns its result code. The
	// owner's fence lets a retry of a release that freed the lock answer
	// CodeAfter, read from the lock's own keys.
	Release(ctx context.Context, k Keys, a ReleaseArgs) (Released, error)
	// Extend runs extend.lua once over items; ExtendAll runs it once per
	// call, all in one round trip per server, and writes rec there too if
	// it is not nil and the backend can (rec.Sent).
	Extend(ctx context.Context, items []ExtendItem) ([]int64, error)
	ExtendAll(ctx context.Context, calls [][]ExtendItem, rec *Record) ([][]int64, []error)
	// TTL tells whether owner holds its lease on k and how long it has left.
	TTL(ctx context.Context, k Keys, owner string) (left time.Duration, code int64, err error)

	// Announce keeps value at the string key for ttl (a Client's record:
	// its name); a ttl of 0 removes the key.
	Announce(ctx context.Context, key, value string, ttl time.Duration) error
	// Places returns where channel is to be subscribed.
	Places(ctx context.Context, channel string) (Placement, error)
	// EvictionPolicy reads Redis's maxmemory-policy; known is false if
	// Redis will not tell.
	EvictionPolicy(ctx context.Context) (policy string, known bool, err error)

	// Settle waits for the goroutines that requests started and that outlive
	// their callers.
	Settle()
	// Traits tells what the layers above may count on.
	Traits() Traits
}

// KindArgs are the arguments of a lock kind's own that an acquire carries,
// after those every kind's take: each kind reads its fields, and ignores
// the others.
type KindArgs struct {
	// A Semaphore's: how many permits the acquire takes, and the total it
	// assumes.
	Permits, Total int64
	// An RWMutex read hold's: the owner of the write hold its caller
	// carries, if any (a writer may also read).
	Writer string
	// An Election's: the candidate's value.
	Value string
}

// The capabilities a Backend may have beyond the requests every deployment
// answers. A Node has them all; a RedLock (internal/quorum), whose members
// are independent deployments, only Kinds.

// Kinds is a Backend that runs some lock kinds its own way, or not at all.
type Kinds interface {
	// KindFor returns the kind a lock of kind k runs as here, or nil if k
	// cannot run here.
	KindFor(k *Layout) *Layout
}

// Semaphores is a Backend that keeps a Semaphore's total.
type Semaphores interface {
	// Semaphore runs sem_release.lua in one of its own modes.
	Semaphore(ctx context.Context, k Keys, id string, mode SemMode, total int64) (int64, error)
	// SemTotal reads a Semaphore's total and the permits in use.
	SemTotal(ctx context.Context, k Keys) (SemTotal, error)
}

// Latches is a Backend that keeps CountDownLatches.
type Latches interface {
	// Latch runs latch.lua in mode; LatchCount reads a latch's count.
	Latch(ctx context.Context, k Keys, id string, mode LatchMode, count int64) (int64, error)
	LatchCount(ctx context.Context, k Keys) (int64, error)
}

// Elections is a Backend that keeps an Election's leader record.
type Elections interface {
	// Leader runs leader.lua, read-only: who leads the Election k.
	Leader(ctx context.Context, k Keys) (LeaderState, error)
	// Proclaim runs proclaim.lua: the value of owner's term of leadership
	// of k becomes value, unless a later Proclaim of that term ran first.
	Proclaim(ctx context.Context, k Keys, owner string, term int64, seq uint64, value string) (int64, error)
}

// Admin is a Backend whose locks one Client can read and end whoever holds
// them: Inspect, Locks and ForceRelease (not a RedLock, whose members each
// need a Client of their own).
type Admin interface {
	// Inspect runs inspect.lua, read-only, over keys for the kind named code.
	Inspect(ctx context.Context, keys []string, code string, limit int) (State, error)
	// Scan passes each key that matches the glob match to each, on every
	// server that holds keys, until each returns false.
	Scan(ctx context.Context, match string, each func(key string) bool) error
	// Strings reads the string keys, "" for each that is missing.
	Strings(ctx context.Context, keys []string) ([]string, error)
	// Evict releases owner's hold on k, whose fence is fence (0 if unknown),
	// as its own last release would.
	Evict(ctx context.Context, k Keys, owner string, fence int64, ttl time.Duration) (int64, error)
	// MoveFence makes k's fence at least fence, whoever holds the lock.
	MoveFence(ctx context.Context, k Keys, fence int64, ttl time.Duration) error
}

// Sharded is a Backend whose keys and channels may live on different
// servers (a Cluster), or that can say which server serves them.
type Sharded interface {
	// ShardOf returns the address of the server that serves channel's slot
	// on a Cluster; "" elsewhere.
	ShardOf(ctx context.Context, channel string) (string, error)
	// Group returns the script-call group of key: its hash slot on a
	// Cluster, where one call must not span slots; 0 elsewhere.
	Group(key string) int
	// Failed notes a request that failed; Reload has a Cluster load its
	// slot map again.
	Failed(err error)
	Reload()
}

// Probed is a Backend that can tell whether its servers run the commands
// the layers above need beyond scripts: SPUBLISH, by which a release wakes
// a waiter, and SSUBSCRIBE, by which a waiter listens.
type Probed interface {
	// Missing returns those commands the servers do not run, found by
	// trying them (SPUBLISH on channel; SSUBSCRIBE too if subscribe is set);
	// hidden, if an ACL keeps a server from telling.
	Missing(ctx context.Context, channel string, subscribe bool) (missing []string, hidden bool, err error)
}

// Replicated is a Backend whose writes wait for replicas (WithWait).
type Replicated interface {
	// ReplicaShortfall returns how many replicas each write waits for, and
	// each primary with fewer connected, with how many it has.
	ReplicaShortfall(ctx context.Context) (want int, short map[string]int, err error)
}

// KindOn returns the kind a lock of kind k runs as on b, or nil if it cannot
// run there: b's own (Kinds), or k itself if b has what k needs beyond the
// requests every Backend answers.
func KindOn(b Backend, k *Layout) *Layout {
	if ks, ok := b.(Kinds); ok {
		return ks.KindFor(k)
	}
	var ok bool
	switch k {
	case SemKind:
		_, ok = b.(Semaphores)
	case LatchKind:
		_, ok = b.(Latches)
	case ElectionKind:
		_, ok = b.(Elections)
	case GroupKind:
		_, ok = b.(Groups)
	default:
		ok = true
	}
	if !ok {
		return nil
	}
	return k
}

// Traits are what the layers above a Backend need to know of it.
type Traits struct {
	// What names the deployment in messages ("a RedLock"); "" for a
	// Redis deployment.
	What string
	// CtxAware: a request gives up at its context's deadline by itself.
	CtxAware bool
	// GrantWake: a waiter may take a lock on the grant message that a
	// Release sent it, without asking again (not so if acquisitions must
	// wait for replicas, or if the release only tells).
	GrantWake bool
	// WakeAll: a release wakes every waiter of the lock, in every Client,
	// with "*" on the lock's channel stem (Keys.Channel), where waiters
	// listen, for it cannot know who waits; otherwise each Client listens on
	// a channel of its own.
	WakeAll bool
	// NoScripts: the backend sends no script (dlock.WithoutScripts).
	NoScripts bool
	// Slow is how long a request may take by design beyond its round trip:
	// a WAIT's timeout, a RedLock's per-node timeout.
	Slow time.Duration
}

// Placement is where a channel is subscribed.
type Placement struct {
	At   []Place
	Need int // how many of at must confirm the subscription
	// Apart: at are independent deployments (a RedLock's members), each
	// subscribed on a connection of its own, none waiting for another.
	Apart bool
	// Short, if not nil, says why too few of at can confirm it.
	Short error
}

// Place is where a shard channel is subscribed: the address of its server
// ("" on a single server), and the Redis client that reaches it.
type Place struct {
	Addr   string
	Client rclient.Client
}

// ShardingOf returns b's Sharded capability, or, for a Backend without it,
// one of a deployment whose keys and channels need no routing: no shard
// address, one group, nothing to reload.
func ShardingOf(b Backend) Sharded {
	if s, ok := b.(Sharded); ok {
		return s
	}
	return unsharded{}
}

type unsharded struct{}

func (unsharded) ShardOf(context.Context, string) (string, error) { return "", nil }
func (unsharded) Group(string) int                                { return 0 }
func (unsharded) Failed(error)                                    {}
func (unsharded) Reload()                                         {}
