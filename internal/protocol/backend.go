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

	"github.com/redis/go-redis/v9"
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

// Backend is where a Client's locks are held: every request the layers above
// make, one method each, with typed arguments and replies. A plain, Sentinel
// or Cluster deployment is a Node; WithWait wraps a Node in a WaitNode; a
// RedLock is quorum.New of member Backends. What differs between them,
// the layers above ask through Traits and KindFor, never by the Backend's
// type.
type Backend interface {
	// Acquire runs k's acquire script once; if the lock is held and
	// register is above zero, owner is registered as a waiter for that long
	// (a Semaphore's register may be SemWhy).
	// extra are the kind's own arguments, after the four every acquire
	// script takes.
	Acquire(ctx context.Context, k Keys, owner string, ttl, register time.Duration, extra ...any) (AcquireResult, error)
	// Reenter adds a hold of owner, which then has count holds.
	Reenter(ctx context.Context, k Keys, owner string, ttl time.Duration, count int, extra ...any) (AcquireResult, error)
	// Release runs k's release script and returns its result code. The
	// owner's fence lets a retry of a release that freed the lock answer
	// CodeAfter, read from the lock's own keys.
	Release(ctx context.Context, k Keys, a ReleaseArgs) (Released, error)
	// Extend runs extend.lua once over items; extendAll runs it once per
	// call, all in one round trip per server, and writes rec there too if
	// it is not nil and the backend can (rec.Sent).
	Extend(ctx context.Context, items []ExtendItem) ([]int64, error)
	ExtendAll(ctx context.Context, calls [][]ExtendItem, rec *Record) ([][]int64, []error)
	// TTL tells whether owner holds its lease on k and how long it has left.
	TTL(ctx context.Context, k Keys, owner string) (left time.Duration, code int64, err error)
	// RaiseFence makes owner's fence on k at least fence.
	RaiseFence(ctx context.Context, k Keys, owner string, fence int64, ttl time.Duration) (int64, error)

	// Latch runs latch.lua in mode; latchCount reads a latch's count.
	Latch(ctx context.Context, k Keys, id string, mode LatchMode, count int64) (int64, error)
	LatchCount(ctx context.Context, k Keys) (int64, error)
	// Semaphore runs sem_release.lua in one of its own modes.
	Semaphore(ctx context.Context, k Keys, id string, mode SemMode, total int64) (int64, error)
	// SemTotal reads a Semaphore's total and the permits in use.
	SemTotal(ctx context.Context, k Keys) (SemTotal, error)

	// Announce keeps value at the string key for ttl (a Client's record:
	// its name); a ttl of 0 removes the key.
	Announce(ctx context.Context, key, value string, ttl time.Duration) error
	// Strings reads the string keys, "" for each that is missing.
	Strings(ctx context.Context, keys []string) ([]string, error)
	// Leader runs leader.lua, read-only: who leads the Election k.
	Leader(ctx context.Context, k Keys) (LeaderState, error)
	// Proclaim runs proclaim.lua: the value of owner's term of leadership
	// of k becomes value, unless a later Proclaim of that term ran first.
	Proclaim(ctx context.Context, k Keys, owner string, term int64, seq uint64, value string) (int64, error)

	// Inspect runs inspect.lua, read-only, over keys for the kind named code.
	Inspect(ctx context.Context, keys []string, code string, limit int) (State, error)
	// Scan passes each key that matches the glob match to each, on every
	// server that holds keys, until each returns false.
	Scan(ctx context.Context, match string, each func(key string) bool) error
	// Evict releases owner's hold on k, whose fence is fence (0 if unknown),
	// as its own last release would.
	Evict(ctx context.Context, k Keys, owner string, fence int64, ttl time.Duration) (int64, error)
	// MoveFence makes k's fence at least fence, whoever holds the lock.
	MoveFence(ctx context.Context, k Keys, fence int64, ttl time.Duration) error

	// Places returns where channel is to be subscribed.
	Places(ctx context.Context, channel string) (Placement, error)
	// ShardOf returns the address of the server that serves channel's slot
	// on a Cluster; "" elsewhere.
	ShardOf(ctx context.Context, channel string) (string, error)
	// Group returns the script-call group of key: its hash slot on a
	// Cluster, where one call must not span slots; 0 elsewhere.
	Group(key string) int
	// Failed notes a request that failed; reload has a Cluster load its slot
	// map again.
	Failed(err error)
	Reload()

	// EvictionPolicy reads Redis's maxmemory-policy; known is false if
	// Redis will not tell.
	EvictionPolicy(ctx context.Context) (policy string, known bool, err error)
	// ReplicaShortfall returns how many replicas each write waits for, and
	// each primary with fewer connected, with how many it has; want is 0,
	// and nothing is asked, without WAIT.
	ReplicaShortfall(ctx context.Context) (want int, short map[string]int, err error)

	// Settle waits for the goroutines that requests started and that outlive
	// their callers.
	Settle()

	// Traits tells what the layers above may count on.
	Traits() Traits
	// KindFor returns the kind a lock of kind k runs as here, or nil if k
	// cannot run here.
	KindFor(k *Layout) *Layout
}

// Traits are what the layers above a Backend need to know of it.
type Traits struct {
	// CtxAware: a request gives up at its context's deadline by itself.
	CtxAware bool
	// GrantWake: a waiter may take a lock on the grant message that a
	// Release sent it, without asking again (not so if acquisitions must
	// wait for replicas, or if the release only tells).
	GrantWake bool
	// Admin: Inspect, Locks and ForceRelease can run here (not on a
	// RedLock, whose members each need a Client of their own).
	Admin bool
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
	Addr string
	RDB  redis.UniversalClient
}
