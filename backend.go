package dlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// backend is where a Client's locks are held: every request the floors above
// make, one method each, with typed arguments and replies. A plain, Sentinel
// or Cluster deployment is a node (protocol.go); WithWaitReplicas wraps a
// node in a waitNode (wait.go); a RedLock is a quorum of member backends
// (quorum.go). What differs between them, the floors above ask through
// traits and kindFor, never by the backend's type.
type backend interface {
	// acquire runs k's acquire script once; if the lock is held and
	// register is above zero, owner is registered as a waiter for that long.
	// extra are the kind's own arguments, after the four every acquire
	// script takes.
	acquire(ctx context.Context, k keys, owner string, ttl, register time.Duration, extra ...any) (acquireResult, error)
	// reenter adds a hold of owner, which then has count holds.
	reenter(ctx context.Context, k keys, owner string, ttl time.Duration, count int, extra ...any) (acquireResult, error)
	// release runs k's release script once and returns a result code.
	release(ctx context.Context, k keys, owner string, mode releaseMode, ttl time.Duration, count int) (int64, error)
	// extend runs extend.lua once over items; extendAll runs it once per
	// call, all in one round trip per server.
	extend(ctx context.Context, items []extendItem) ([]int64, error)
	extendAll(ctx context.Context, calls [][]extendItem) ([][]int64, []error)
	// ttl tells whether owner holds its lease on k and how long it has left.
	ttl(ctx context.Context, k keys, owner string) (left time.Duration, code int64, err error)
	// raiseFence makes owner's fence on k at least fence.
	raiseFence(ctx context.Context, k keys, owner string, fence int64, ttl time.Duration) (int64, error)

	// latch runs latch.lua in mode; latchCount reads a latch's count.
	latch(ctx context.Context, k keys, id string, mode latchMode, count int64) (int64, error)
	latchCount(ctx context.Context, k keys) (int64, error)
	// semaphore runs sem_release.lua in one of its own modes.
	semaphore(ctx context.Context, k keys, id string, mode semMode, total int64) (int64, error)

	// inspect runs inspect.lua, read-only, over keys for the kind named code.
	inspect(ctx context.Context, keys []string, code string, limit int) ([]any, error)
	// scan passes each key that matches the glob match to each, on every
	// server that holds keys, until each returns false.
	scan(ctx context.Context, match string, each func(key string) bool) error
	// evict releases owner's hold on k as its own last release would, with
	// the marker of the administrative call marker.
	evict(ctx context.Context, k keys, owner, marker string, ttl time.Duration) (int64, error)
	// moveFence makes k's fence at least fence, whoever holds the lock.
	moveFence(ctx context.Context, k keys, fence int64, ttl time.Duration) error

	// places returns where channel is to be subscribed.
	places(ctx context.Context, channel string) (placement, error)
	// shardOf returns the address of the server that serves channel's slot
	// on a Cluster; "" elsewhere.
	shardOf(ctx context.Context, channel string) (string, error)
	// group returns the script-call group of key: its hash slot on a
	// Cluster, where one call must not span slots; 0 elsewhere.
	group(key string) int
	// failed notes a request that failed; reload has a Cluster load its slot
	// map again.
	failed(err error)
	reload()

	// evictionPolicy reads Redis's maxmemory-policy; known is false if
	// Redis will not tell.
	evictionPolicy(ctx context.Context) (policy string, known bool, err error)
	// replicaShortfall returns how many replicas each write waits for, and
	// each primary with fewer connected, with how many it has; want is 0,
	// and nothing is asked, without WAIT.
	replicaShortfall(ctx context.Context) (want int, short map[string]int, err error)

	// settle waits for the goroutines that requests started and that outlive
	// their callers.
	settle()

	// traits tells what the floors above may count on.
	traits() traits
	// kindFor returns the kind a lock of kind k runs as here, or nil if k
	// cannot run here.
	kindFor(k *kind) *kind
}

// traits are what the floors above a backend need to know of it.
type traits struct {
	// ctxAware: a request gives up at its context's deadline by itself.
	ctxAware bool
	// grantWake: a waiter may take a lock on the grant message that a
	// release sent it, without asking again (not so if acquisitions must
	// wait for replicas, or if the release only tells).
	grantWake bool
	// admin: Inspect, Locks and ForceRelease can run here (not on a
	// RedLock, whose members each need a Client of their own).
	admin bool
	// slow is how long a request may take by design beyond its round trip:
	// a WAIT's timeout, a RedLock's per-node timeout.
	slow time.Duration
}

// placement is where a channel is subscribed.
type placement struct {
	at   []place
	need int // how many of at must confirm the subscription
	// apart: at are independent deployments (a RedLock's members), each
	// subscribed on a connection of its own, none waiting for another.
	apart bool
	// short, if not nil, says why too few of at can confirm it.
	short error
}

// place is where a shard channel is subscribed: the address of its server
// ("" on a single server), and the Redis client that reaches it.
type place struct {
	addr string
	rdb  redis.UniversalClient
}
