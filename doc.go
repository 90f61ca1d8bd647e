// Package dlock provides distributed locks on Redis for Go services that run
// as many processes on many machines: a reentrant Mutex with a lease in
// Redis, renewed while held, a lost-lease signal, waiting woken by pub/sub
// and a fencing token on every acquisition; and, on the same engine, a
// FairMutex, an RWMutex, a Semaphore, a CountDownLatch, a MultiLock over
// several names, an Election of one leader, a Group that runs a function once
// for the callers of a key across processes, and RedLock over independent
// Redis primaries (NewRedLock).
//
// # Use
//
// Make one Client per process from a go-redis v9 client (plain, Sentinel or
// Cluster); every primitive is a name and options on it:
//
//	c, err := dlock.New(rdb)
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//
//	l, err := c.Mutex("order:42").Lock(ctx) // ctx bounds the wait, not the lease
//	if err != nil {
//		return err
//	}
//	defer l.Unlock(ctx)
//	return orders.Save(ctx, order, l.Fence()) // the store refuses fences below the highest it saw
//
// Each successful acquisition returns a Lease: the handle that is unlocked,
// carries the fence, and tells of a loss through Done, Err and Context, as a
// context does. Do runs a function under the lock with a context that is
// cancelled if the lock is lost (see Example); examples/quickstart in the
// repository is a complete program. dlock needs Redis 7.0 or later, or
// Valkey 8.
//
// # Words
//
// A lock is a kind and a name (Mutex "order:42"), held in Redis keys under
// that name. Each acquisition has an owner id, unique across Clients. The
// words below mean one thing each, in this documentation and in the code:
//
//	Lease        the handle an acquisition returns: Unlock, Fence, Extend, and Done and Err that tell of a loss
//	hold         what one owner has of a lock: its first acquisition and its re-entries, each with a Lease
//	             of its own; the last of them to Unlock releases the lock
//	term         a hold's life: from the acquisition to its end by Unlock, loss or local deadline; the
//	             Client renews it every TTL/3 (see Times)
//	Leadership   an Election's term as leader; a MultiLease, a MultiLock's Leases taken together
//	grant        a release's hand-over of the lock to the waiter next in line, with a new fence and a short
//	             grant lease, until the waiter's Client takes it up
//	registration a waiter's place in line in Redis, kept alive by its Client; it lapses after three missed keep-alives
//	fence        the number each acquisition gets, larger than every earlier one of that name
//	ended        a term that is over: unlocked, lost (ErrLockLost), or past its local deadline unrenewed
//
// # Guarantees
//
// While Redis keeps its data (no failover to a replica that missed a write,
// no restart without persistence, no eviction) and clocks run at about the
// same rate, at most one owner holds a lock whose lease has not expired; a
// release never removes another owner's lock; a holder that crashes leaves
// the lock free after at most its TTL; a holder whose lease is lost is told
// (Done closes, Err matches ErrLockLost) within one renewal period of the
// loss being observable, or at its local deadline if Redis cannot be
// reached; and every acquisition of a name gets a larger fence than every
// earlier one. Every script gives the same outcome when go-redis runs it
// twice, and no late reply or retry undoes a newer request.
//
// A lease cannot stop a paused holder (a GC pause, a stopped VM) from acting
// after its lease ran out and another process took the lock. The fence can:
// pass Lease.Fence to the resource the lock protects, and have it refuse a
// write whose fence is below the highest it has accepted. The same fence
// protects the resource when a Redis failover or restart grants a lock twice.
//
// A fence is the larger of the name's last fence plus one and the Redis
// server's clock in microseconds, so fences keep rising across a restart
// without persistence and a failover, as long as the new server's clock is
// not behind the old one's by more than the outage lasted; the [guarantees]
// page states every promise, every fault, and the clock assumptions.
//
// # Waiting
//
// A waiting Lock sleeps until a release grants it the lock, with a new fence
// and a short grant lease, and tells only its Client; it returns on that
// message. Waiters are served in arrival order, also when a holder dies, and
// nobody barges in: a newcomer, TryLock included, never takes a lock while a
// live waiter is registered ahead of it. A waiter paused past its grant goes
// to the back of a Mutex's line and keeps its place in a FairMutex's. A lost
// message costs latency, never a hang. A wait that gives up on its context
// returns an error matching both ErrNotAcquired and ctx.Err().
//
// # Outages
//
// A Lock, RLock, Acquire or CountDownLatch.Wait that waits rides out a Redis
// that cannot be reached or is changing hands (retrying from 10ms, doubling
// up to 1s, until its context ends, or for 30s of failures with no
// deadline), once any request of its Client, Check included, has had Redis's
// answer: a wrong address fails at once. If it gives up, its error says how
// long Redis had been unavailable and what the last failed request met.
// TryLock, Unlock, Extend and the other calls fail with what go-redis
// returned; a failed Unlock goes on in the background.
//
// # Eviction
//
// Redis must run with maxmemory-policy noeviction: any other policy may
// evict a held lock or a fence key. Client.Check reports the policy, and a
// Client logs a warning on first use if it reads another one.
//
// # Sentinel, replicas and WAIT
//
// Replication is asynchronous, in Sentinel and Cluster alike: a failover to
// a replica that missed a lock grants it again, and only the fence then
// protects the resource. WithWaitReplicas(n, timeout) follows every write
// that grants or lengthens a hold with WAIT and refuses a grant too few
// replicas acknowledged (ErrNotAcquired and ErrNotReplicated); it narrows
// the window and is not consensus. See the [deployments] page.
//
// # RedLock
//
// NewRedLock makes a Client on N independent primaries (N odd, at least 3):
// a lock is held when a majority holds it, so a minority of nodes down,
// paused or unreachable loses no lock. Only Mutex and MultiLock are
// supported. The largest fence of the majority is written back to every
// node before Lock returns; a renewal takes the lock again on a node that
// restarted empty. A node restarted empty while a lock is held by exactly a
// majority can grant it a second time before that renewal: keep such a node
// out for one TTL. Waiters keep no order across nodes. See the [deployments]
// page.
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
//	opening, Delete records   10s: of a latch's opening and of a Semaphore's SetPermits and Delete (see Keys)
//	request deadline          10s after an acquire was sent, in the server's time: a copy that reaches Redis later changes nothing
//	wake-up connection        pinged after 30s of silence, replaced after 5s more without an answer
//
// So a dead waiter holds a FairMutex's line up for at most TTL/2 (its
// registration; 150 ms under a 300 ms TTL), and a Mutex's for at most the grant lease plus one
// keep-alive.
//
// # Keys
//
// A lock named N lives under the prefix ("dlock:" by default, WithPrefix) in
// keys that share the hash tag {N}, so one Cluster slot: "dlock:{N}", one
// string that holds the holder, its hold count and the last fence, and
// while anyone waits "dlock:{N}:waiters" and "dlock:{N}:alive". Other kinds
// use their own namespaces ("dlock:fair:", "dlock:rw:", "dlock:sem:",
// "dlock:latch:", "dlock:election:", "dlock:group:", whose lock for key K of
// the Group G is named G/K). Keys grow with names, never with
// calls, and every key expires within its TTL (a waiter's: its
// registration) after its last use, except the state a caller sets on
// purpose. A Mutex name in use keeps at most three keys (the lock, the
// queue and alive). An idle name
// (nobody holds or waits) keeps, per kind:
//
//	Mutex, FairMutex, Election  at most its lock, free, with its last fence, until the last lease it fenced would have ended (or a record it keeps, of an acquire in doubt, lapses: 10s at most)
//	Group key                   its lock likewise, and its latest result (":result") for the runner's TTL or
//	                            WithResultTTL, whichever is longer
//	RWMutex                     at most its fence, likewise
//	Semaphore                   its fence likewise; its hash for 10s after a SetPermits or a Delete;
//	                            and its total (":total", no expiry) while one is set with SetPermits
//	CountDownLatch              nothing, but ":opened" for 10s after it opened; armed, its hash,
//	                            with no expiry, until it reaches zero or Delete removes it
//	Mutex, WithoutScripts       its fence stream (":fence", empty) until the TTL after its last
//	                            acquisition; the lock is deleted by its release
//
// Each Client in use also keeps one key, "dlock:client:<id>", its name
// (WithClientName), which expires a minute after its last write and which
// Close removes. A name and a prefix are each at most MaxNameLen bytes. The
// [guarantees] page gives every key and what it holds. A key that holds
// what dlock did not write there (another program's, under the same prefix)
// fails the calls that meet it, before they write anything, with an error
// that names the key and advises a prefix of dlock's own (WithPrefix).
//
// # More
//
// The repository's docs hold the rest: [choosing] a lock, the [guarantees]
// and failure model, [deployments], [operations] (the dlock command, metrics
// and settings), and [migrating] from redsync, bsm/redislock or Redisson.
//
// [guarantees]: https://github.com/dlock-go/dlock/blob/main/docs/failure-model.md
// [deployments]: https://github.com/dlock-go/dlock/blob/main/docs/deployments.md
// [choosing]: https://github.com/dlock-go/dlock/blob/main/docs/choosing.md
// [operations]: https://github.com/dlock-go/dlock/blob/main/docs/operations.md
// [migrating]: https://github.com/dlock-go/dlock/blob/main/docs/migrating.md
package dlock
