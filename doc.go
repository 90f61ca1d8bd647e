// Package dlock provides distributed locks on Redis for Go services that run
// as many processes on many machines: a reentrant Mutex with a server-side
// lease, automatic renewal while held, a lost-lease signal, waiting woken by
// pub/sub, and a fencing token on every acquisition; and, on the same engine,
// a FairMutex (strict arrival order), an RWMutex, a Semaphore whose permits
// each have a lease, a CountDownLatch, a MultiLock over several names, and an
// Election of one leader among many replicas, whose term fences.
//
// # Use
//
//	c, err := dlock.New(rdb) // rdb is a go-redis v9 client
//	...
//	defer c.Close()
//	err = c.Mutex("order:42").Do(ctx, func(ctx context.Context) error {
//		// Only one process at a time runs this for order 42. ctx is
//		// cancelled if the lock is lost, and carries the Lease: pass its
//		// fence to the resource, which refuses fences below the highest
//		// it has seen.
//		l, _ := dlock.LeaseFromContext(ctx)
//		return saveOrder(ctx, 42, l.Fence())
//	})
//
// A Mutex is a name and options; each successful Lock returns a Lease, the
// handle that is unlocked, carries the fence and tells of a loss through Done
// and Err, as a context does.
//
// dlock needs Redis 7.0 or later: its wake-ups are shard channels
// (SPUBLISH), and a renewal never shortens a lease (PEXPIRE ... GT).
//
// # Guarantees
//
// While Redis keeps its data (no failover to a replica that missed a write, no
// restart without persistence, no eviction: see below) and clocks run at
// about the same rate:
//
//   - At most one owner holds a lock whose lease has not expired. Acquire,
//     release and extend are each one Lua script, so none of them can interleave
//     with another client's.
//   - A release is owner-checked: it never removes a lock held by another owner.
//   - A holder's lease is renewed while it holds the lock (see Times). If
//     renewal finds another owner, or cannot reach Redis before the lease's
//     local deadline (acquire time + TTL - 1% of TTL - 2ms, measured on the
//     client's monotonic clock from before the request was sent), the lease is
//     lost: Done closes and Err matches ErrLockLost, within one renewal period
//     of the loss being observable.
//   - The client never counts on more of a lease than Redis gives it: every
//     deadline is measured from before the request that set it was sent, a
//     lease's renewals and Lease.Extend calls reach Redis one at a time, and a
//     renewal never shortens a lease, so a request that reaches Redis late
//     cannot undo a newer one.
//   - A holder that crashes or stops renewing leaves the lock free after at
//     most its TTL. A lock given up with Unlock is never renewed again, even
//     when the release cannot reach Redis (the Client then keeps retrying it).
//   - Every acquisition of a name gets a fence greater than all earlier ones.
//
// # Retries
//
// go-redis runs a request again when its reply is lost (MaxRetries, 3 by
// default), so a script may run twice with the same arguments. Every script
// of this package gives the same outcome when it does: an acquire that
// succeeded answers the same hold and fence and counts nothing twice, and a
// latch's CountDown counts once. No call writes a key of its own: a retry
// is told from the lock's own keys (see Keys). A release run again after its
// first run freed the lock finds it free of its owner, and the lock's fence
// (or a Semaphore's hash) still there, at or past the owner's; the Unlock
// succeeds if that answer comes before the lease's local deadline, until
// which the lease cannot have lapsed. After it, or when Redis lost the keys
// (a restart, a failover), the error matches ErrLockLost and says that it
// may be a false alarm. An answer from the run that freed the lock is a
// success whenever it comes. The acquires and
// releases of goroutines that lock at once may share one pipeline (see New);
// go-redis sends a pipeline that failed on the network again whole, which the
// same rule covers.
//
// # Fences and clocks
//
// A fence is the larger of the last fence of the name plus one and the Redis
// server's clock in microseconds (TIME). The last fence is kept only as long
// as the lock (it expires with it), so fences keep rising across expiries,
// across a restart of a Redis without persistence and across a failover to a
// replica that missed writes, as long as the new server's clock is not behind
// the old one's by more than the outage lasted. A Redis host whose clock is
// stepped back can hand out a fence lower than one it handed out before the
// step, once the fence key has expired.
//
// # What a lease cannot do
//
// A lease does not stop a holder that is paused (a GC pause, a stopped VM, a
// slow disk) from carrying on after its lease expired and another process took
// the lock: the paused process cannot notice anything while it is paused, and
// on waking it may already be in the middle of a write. No lock service can
// prevent that. The fence can: pass Lease.Fence to the resource the lock
// protects, and have the resource refuse any write carrying a lower fence than
// one it has already accepted (a conditional UPDATE, a compare in a Lua
// script). Then the stale holder's write is rejected instead of applied.
//
// Redis replicates asynchronously. If the primary fails over before a lock
// reached a replica, the new primary does not know the lock and can grant it
// again. The same is true after a restart of a Redis without persistence. The
// fence still rises in both cases (see Fences and clocks), so a resource that
// checks fences rejects the older holder's writes. WithWaitReplicas narrows
// the first case and does not close it (see Sentinel, replicas and WAIT).
//
// Redis expires keys by its wall clock. A jump of the Redis host's clock can
// expire a lease early or late; the client's clock matters only for the local
// deadline, which is measured on its monotonic clock.
//
// # Eviction
//
// Redis must run with maxmemory-policy noeviction. Under any other policy,
// Redis out of memory evicts keys: a lock's hash, so that a second owner gets
// a lock that is held, or a fence key. The volatile-* policies pick exactly
// such keys, since every key a lock writes expires. Under noeviction, a Redis
// out of memory refuses new locks with an error instead. Client.Check
// reports the policy, and a Client logs a warning on its first use if it can
// read another one.
//
// # Waiting
//
// A Lock that finds the lock held subscribes to its Client's channel for that
// lock (one pub/sub connection per Client and Redis server, shared by all its
// locks), then
// tries again, this time registering itself as a waiter in Redis. When the
// holder of a Mutex or FairMutex releases it while waiters are registered,
// the release grants the lock to the waiter registered longest ago, the
// first live one in line: in the same script it makes that waiter the
// holder, with a new fence and a short grant lease (TTL/10, between 50ms and
// 1s), and tells only that waiter's Client, with the fence. The waiter's Lock
// returns on the message, without another request: the hand-off costs the
// release and one message. Its Client then lengthens the lease to the TTL at
// once, off the next holder's path (if the lock is still held by then). One
// message, one woken goroutine, no race among the others, and no newcomer can
// take the lock meanwhile. Waiters are served in the order they arrived,
// also when a holder dies (the first live waiter takes the lock at the end of
// its lease), and nobody barges in: a newcomer, TryLock included, never
// takes a lock while a live waiter is registered ahead of it, even a free
// one. Each waiter is granted the lock for its own grant lease. A grantee
// that does not take up its grant in time (its process paused past the
// grant lease) loses it: a Mutex passes the lock to the next live waiter and
// the paused one goes to the back when it returns; a FairMutex keeps the
// lock for it while its registration lives. A RedLock keeps no order: each
// member has a queue of its own.
//
// The waiter uses the message only if its fence is above every fence handed
// out before the waiter's last request that found the lock held (that
// request's reply says so): the grant was made after that request reached
// Redis. The message and the reply carry the server's time, so the waiter
// dates the grant from that request's send time plus the server time between
// the two, less 1% for the two clocks' rates (the allowance every lease
// makes), and counts the grant lease from then; if less than half of it is
// left, or the message is older, the waiter tries again instead, which finds
// the lock granted to it and lengthens it, or finds the grant lapsed. This
// dating relies on the Redis host's clock as its key expiries do: a clock
// that steps backwards only makes the waiter count from the request's send
// time; one that steps forward cuts every lease short in Redis anyway (see
// Guarantees). With WithWaitReplicas the
// waiter always confirms the grant with that request, which waits for the
// replicas too. An RWMutex's release grants the lock so to the writer first
// in line; readers it lets in, and the waiters a Semaphore's release finds
// room for, are told, and take their holds with one request each.
//
// A waiter also wakes when the holder's lease would have run out, and at its
// keep-alive, when it tries again and renews its registration. So a lost
// message costs latency (at most a keep-alive), never a hang. A waiter that
// gives up removes its registration, and gives back a grant made to it
// meanwhile, which goes to the next waiter at once; a grantee that died costs
// the grant lease. The pub/sub connection is checked when it has been silent
// for long, and replaced, with every waiter woken, when it does not answer.
//
// # Outages
//
// A request that fails because Redis cannot be reached or is changing hands
// (a refused or broken connection, CLUSTERDOWN, TRYAGAIN, MOVED, LOADING,
// READONLY, MASTERDOWN) fails the call that made it, with one exception: a
// Lock, RLock, Acquire or CountDownLatch.Wait that waits rides it out. It
// tries again after 10ms, then twice as long each time up to 1s, until it
// succeeds or its context ends; with no deadline on the context, for at most
// 30s of failures in a row. A failover of a few seconds therefore delays a
// waiter rather than failing it. The Client must have had an answer from
// Redis before: a wrong address fails at once. When a waiter gives up during
// an outage, its error says how long Redis had been unavailable and what the
// last request met. TryLock, Unlock, Extend and the other calls do not wait:
// they fail with what go-redis returned once its own retries (MaxRetries)
// ran out, and a failed Unlock goes on in the background.
//
// While Redis cannot be reached, go-redis logs each failure to open a
// connection ("redis: connection pool: failed to dial after 5 attempts: ...")
// with its own logger, which serves the whole process and writes to standard
// error unless the program set another with redis.SetLogger. A waiter riding
// out an outage, the renewals and the wake-up connection all ask for
// connections, so these lines appear during an outage; go-redis v9 stops
// dialing after PoolSize failures in a row and then probes quietly once a
// second until Redis answers, so an outage prints at most about PoolSize of
// them per go-redis client. dlock leaves that logger alone, as it belongs to
// the program: to quiet the lines or send them elsewhere (to a slog.Logger,
// say), call redis.SetLogger once in main. Options.DialerRetries sets how
// many dials each line stands for.
//
// # Redis Cluster
//
// New accepts a *redis.ClusterClient. A lock's keys share the hash tag of its
// name, so each lock lives in one slot and no request names keys of two
// slots. Renewals go to each server in pipelines of up to 128 leases, with
// one script call per slot. Wake-ups are shard messages (SPUBLISH), sent only
// on the shard that owns the lock, with one pub/sub connection per primary;
// when a failover or a migration moves a slot, its channels are subscribed
// again on the new primary, and their waiters fall back to their timers
// meanwhile. A request that fails because a server is gone or the cluster is
// changing hands makes go-redis load the slot map again at once, rather than
// at the next MOVED reply or within a minute. A MultiLock takes its names in
// one order and renews them per slot. Replication in a Cluster is as
// asynchronous as anywhere: see What a lease cannot do.
//
// # Sentinel, replicas and WAIT
//
// New accepts Sentinel's client, redis.NewFailoverClient, as it does a plain
// one: go-redis asks the sentinels for the primary and moves to the new one
// after a failover, and a waiting Lock rides the failover out (see Outages).
// A lease whose write had reached the replica that is promoted survives, if
// the failover takes less than its local deadline, and is renewed on the new
// primary. A lease whose write had not is granted again by the new primary;
// its holder learns at its first renewal there (ErrLockLost), and the new
// holder's fence is higher.
//
// Redis replicates asynchronously: a primary answers a write before any
// replica has it. WithWaitReplicas(n, timeout) narrows that window. Every
// write that grants or lengthens a hold is followed, in the same round trip
// and on the same connection, by WAIT n timeout; a grant fewer than n
// replicas acknowledged is undone and refused (ErrNotAcquired and
// ErrNotReplicated), and a renewal they do not acknowledge does not lengthen
// the lease on the client. A primary cut off from its replicas, such as an
// old primary on the wrong side of a partition, therefore grants nothing.
//
// What WAIT does not do: it counts acknowledgements, it is not a vote. A
// replica acknowledges a write it has received, not one it has made
// durable; the failover may promote a replica that did not acknowledge (if
// those that did are gone too); and a replica restarted without persistence
// forgets. Each of these can grant a lock a second time, and only the fence
// protects the resource then. On a Cluster WAIT goes to the lock's primary,
// with the same limits.
//
// # RedLock
//
// NewRedLock makes a Client on N independent Redis primaries (N odd, at
// least 3): a lock is held when a majority of them hold it, so losing a
// minority of the nodes (dead, unreachable, paused) loses no lock and blocks
// no Lock. Only Mutex, and MultiLock built on it, are supported; the other
// primitives return errors matching errors.ErrUnsupported.
//
// An acquire sends the acquire script to every node at once and counts the
// answers as they come: it succeeds when a majority took the lock, fails as
// soon as a majority cannot have, and never waits for a node longer than
// WithNodeTimeout (100ms by default). When fewer than a majority answer in
// time, the error matches ErrNotAcquired and holds a *QuorumError with
// each node's failure; a waiting Lock rides that out as an outage. Then the fence: the largest the
// majority handed out is written to every node's fence key that may hold
// less, and Lock returns it once a majority has it. Every later majority
// shares a node with that one, so every later fence is larger, also after a
// minority of nodes restarted without persistence. The lease counts from
// before the first request, and is valid for the TTL less the time the
// majority took and less the drift allowance; a majority reached too late,
// or a fence not written to a majority, is undone on every node, as is every
// node's part of an acquire that did not reach a majority, including a part
// whose answer comes after the per-node timeout.
//
// A lease is renewed on every node at once and stays valid while a majority
// renews it; when a majority refuses it, or none renews it before the local
// deadline, it is lost (Done, ErrLockLost). A renewal (or Lease.Extend) that
// finds the lock gone on a node where it is free (the node restarted without
// persistence, or the acquire never reached it) takes it there, for the
// same owner, for the renewal's TTL and with the node's fence key raised to
// at least the lease's fence; a node where another owner holds it is left
// alone. So a hold renewed across restarts of nodes, one after the other,
// keeps its majority. Only a lease still held is taken again: Unlock waits
// for a retake in flight and releases after it, so a retake never brings the
// lock back after Unlock. Unlock releases it on every node and succeeds when
// a majority released it. A node that does not answer costs a call at most
// the per-node timeout, and none when a majority answers sooner.
//
// Waiting: each node keeps its own queue of waiters, so a release cannot hand
// the lock to one waiter directly. Each node's release tells the waiter at the
// head of its queue, usually the same one on every node; its Client wakes it
// once, and it acquires by majority. Waiters that split the nodes between
// them (none with a majority) undo their parts and try again after a short
// random pause.
//
// Fences and clocks: a node's fence is its server time in microseconds, or
// one more than its last fence, so fences rise across holders while the nodes'
// clocks agree to within a TTL (a node whose clock runs ahead hands out
// larger fences, which the write-back carries to the others).
//
// The Redlock algorithm's gap, which fences close for the resource: a node
// that restarts without persistence while a lock is held by exactly a
// majority lets a second owner reach a majority before the holder's next
// renewal takes the lock there again. The first holder learns at that
// renewal, but meanwhile two owners hold the lock; the second has the larger
// fence, so a resource that checks fences rejects the first one's writes.
// The remedy is the Redlock delayed restart: keep a node that lost its data
// out of service for one TTL after it went down (start it late, or
// unreachable to clients), by which time every lease it carried has expired
// or been renewed on a majority without it (taken on free nodes where it had
// to be). Redis with appendfsync always keeps the data instead.
//
// Give each node's Redis client short timeouts (ReadTimeout, or
// ContextTimeoutEnabled): a request the Client no longer waits for still
// holds a connection until go-redis gives it up, and Close waits for it.
//
// # Times
//
// Every time a lock keeps is a fraction of its TTL (WithTTL, 30s by default),
// within bounds:
//
//	renewal                   every TTL/3; up to TTL/6 early, to share a request with others
//	local deadline            acquire or renewal sent + TTL - (TTL/100 + 2ms): past it, unrenewed, the lease is lost
//	grant lease               TTL/10, between 50ms and 1s: a lock a release granted to a waiter, until its Client lengthens it
//	waiter keep-alive         TTL/6, between 50ms and 5s; a registration lapses after three
//	unanswered renewal        sent again after TTL/6 (a quarter of what is left of a grant lease), at least 50ms
//	failed renewal, release   tried again every TTL/10, between 10ms and 1s
//	release after a cancel    bounded by TTL, between 1s and 5s
//	opening, Delete records   10s: of a latch's opening and of a Semaphore's Delete (see Keys)
//	wake-up connection        pinged after 30s of silence, replaced after 5s more without an answer
//
// So a dead waiter holds a FairMutex's queue up for at most TTL/2 (its
// registration), and a Mutex's for at most the grant lease plus one
// keep-alive (a grant that lapses passes the lock on; a dead waiter that
// nobody granted it to holds it up for its registration, TTL/2, as in a
// FairMutex). Each waiter is granted the lock for its own grant lease, from
// its own TTL, whoever releases.
//
// # Re-entry
//
// Ownership belongs to a Lease, not to a goroutine or a Client. To take a lock
// again while holding it, as reentrant code paths do, pass a context carrying
// the Lease: the one Do hands to its function, or one from Lease.Context. The
// hold count in Redis goes up, the fence stays the same, and the lock is free
// after every hold is unlocked. A context carrying a Lease that has ended
// re-enters nothing: a Lock with it acquires anew.
//
// # Inspecting and freeing locks
//
// Client.Inspect reads one lock as Redis holds it, in one request that
// writes nothing: holders with their owner ids, hold counts, fences and TTLs,
// waiters in the order they will be served, the last fence. Client.Locks
// finds the locks under the Client's prefix with SCAN. Client.ForceRelease
// takes a lock from holders that keep it (a stuck process whose renewal goes
// on): each hold is released as its holder's release would, so the next
// waiter is granted the lock at once, and the fence moves above the evicted
// holds'. The evicted holder learns at its next renewal, or its Unlock
// says so; until then only a fenced resource stops it. The next waiter is
// granted the lock for its own grant lease, as by any release. The dlock command's ls, inspect, watch and
// release --force are these calls. An owner id starts with its Client's ID.
//
// # Keys
//
// For a lock named N and the default prefix "dlock:", Redis holds:
//
//	dlock:{N}                 hash: owner id -> hold count; expires after the lease's TTL
//	                          (the grant lease, until the grantee's Client lengthens it)
//	dlock:{N}:fence           string: the last fence handed out; expires no sooner than any
//	                          lease it fenced, so that a retried release finds it
//	dlock:{N}:waiters         sorted set: the queue, waiting owner ids scored by arrival
//	dlock:{N}:alive           hash: waiting owner id -> when it lapses unless renewed, and its
//	                          grant lease; queue and alive expire when the last registration
//	                          would; also "evicted:" and an owner id for a hold ForceRelease
//	                          took away, until its lease would have ended
//	dlock:{N}:extends         hash: owner id -> how many Extends of its lease have run, so
//	                          that a renewal or Extend sent before the latest one changes
//	                          nothing, however late it runs; written by Lease.Extend only,
//	                          expires no sooner than the lease and at most its TTL after
//	                          its last renewal
//	dlock:{N}:wake:<id>       shard channel of the Client with that id, in the lock's slot
//
// An idle Mutex name (nobody holds or waits) keeps at most its fence, until
// the last lease it fenced would have ended; a name in use at most the
// lock, its fence, the queue and alive (and extends after a Lease.Extend).
// Keys grow with names, never with calls.
//
// Each Client in use keeps one key of its own, whatever it locks:
// "dlock:client:<id>", its name (WithClientName), which Inspect and the
// dlock command show beside its owner ids. It is written at the Client's
// first acquisition and at most every 20s after, with the renewal rounds
// while it holds and by its attempts while it waits; it expires a minute
// after the last write, and Close removes it.
//
// The other primitives keep their keys in namespaces of their own, so that
// they never collide with a Mutex of the same name: "dlock:fair:{N}..." for a
// FairMutex (the same keys as a Mutex), "dlock:rw:{N}..." for an RWMutex (":readers" is a
// sorted set of read holds scored by when their lease lapses, ":fences" each
// holder's fence, ":writers" the waiting writers alone), "dlock:sem:{N}..." for a Semaphore (":holders", likewise
// for its holders; ":total" the total set with SetPermits; the hash
// "dlock:sem:{N}" also holds the id of the last Delete that removed a total,
// by which a retry of it answers the same, and then lives 10s at least);
// each has its ":extends" hash, as a Mutex has.
// A CountDownLatch is the hash "dlock:latch:{N}" while armed, with no expiry:
// its count, the id of the TrySetCount that armed it and the id of each
// CountDown that counted (at most its count of them), by which a retried call
// counts nothing twice. When it opens, that hash becomes
// "dlock:latch:{N}:opened", with the id of the call that opened it, for 10s,
// so that a call retried after the opening (or after the latch was armed
// again) answers as its first run did; its opening is published on the
// channel "dlock:latch:{N}:zero". No call of either writes a key of its own.
// An Election keeps a FairMutex's keys under "dlock:election:{N}..." for its
// lease and its line (a candidate's entry in ":alive" also holds its value),
// and ":leader", a hash of the leader's owner id, term, start, value and the
// count of its Proclaims, which the grant of the lease writes, which lapses
// with the lease and which goes when nobody is granted it; its changes are
// published on the shard channel "dlock:election:{N}:leader". An idle
// Election name keeps its fence only, as a Mutex's does.
//
// Every key expires within its TTL (or a waiter's registration time, three
// keep-alives) after its last use, the records of a latch's opening and of
// a Semaphore's Delete after 10s, except the state a caller sets on purpose: a
// Semaphore's total set with SetPermits and an armed CountDownLatch, which
// last until Semaphore.Delete or CountDownLatch.Delete (or the count
// reaching zero) remove them. A name used once and abandoned, with its
// holders dead and its waiters gone, therefore leaves nothing behind.
//
// '{', '}' and '%' in N are written as %7B, %7D and %25, so every key of a lock
// shares one hash tag (and one Redis Cluster slot) whatever the name. A name
// and a prefix are each at most MaxNameLen (1024) bytes: a longer one is an
// error before anything reaches Redis, so no key is larger than a few KiB.
package dlock
