package dlock_test

// dlock on a real Redis Cluster of three primaries with a replica each, formed
// by internal/redistest. The multi-process hammers run on a Cluster too (their
// "cluster" subtests); these are the Cluster's own tests.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestClusterScripts: every script request of every primitive, in every
// mode, touches keys of one hash slot only, and goes through on a Cluster.
func TestClusterScripts(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	rdb := cl.Client(t)
	var rec scriptRecorder
	rdb.AddHook(&rec)
	c := clientOn(t, rdb, dlock.WithTTL(time.Second))
	exerciseScripts(t, c, clientOn(t, cl.Client(t)))
	ctx := context.Background()
	rec.mu.Lock()
	calls := rec.calls
	rec.mu.Unlock()
	if len(calls) == 0 {
		t.Fatal("no script request recorded")
	}
	for _, call := range calls {
		slots := map[int64]bool{}
		for _, k := range call.keys {
			slots[rdb.ClusterKeySlot(ctx, k).Val()] = true
		}
		if len(slots) != 1 {
			t.Errorf("a script request spans %d slots: %v", len(slots), call.keys)
		}
	}
	t.Logf("%d script requests, each in one slot", len(calls))
}

// shardCounter counts the pipelines and the script calls each primary of a
// Cluster receives.
type shardCounter struct {
	mu    sync.Mutex
	trips map[string]int
	calls map[string]int
}

func (s *shardCounter) hook(addr string) redis.Hook { return shardHook{s, addr} }

type shardHook struct {
	s    *shardCounter
	addr string
}

func (h shardHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h shardHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}
func (h shardHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

// count counts one round trip of cmds, if they are script calls.
func (h shardHook) count(cmds ...redis.Cmder) {
	n := 0
	for _, c := range cmds {
		if c.Name() == "evalsha" || c.Name() == "eval" {
			n++
		}
	}
	if n == 0 {
		return
	}
	h.s.mu.Lock()
	h.s.trips[h.addr]++
	h.s.calls[h.addr] += n
	h.s.mu.Unlock()
}

// TestClusterRenewal: 300 leases over every slot stay held on a Cluster;
// their renewals are one script call per slot, and each primary gets about
// one round trip per 128 of its leases per renewal period.
func TestClusterRenewal(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	rdb := cl.Client(t)
	ctx := context.Background()
	sc := &shardCounter{trips: map[string]int{}, calls: map[string]int{}}
	ttl := 1500 * time.Millisecond // 300 Locks on a loaded machine take a while
	c := clientOn(t, rdb, dlock.WithTTL(ttl))
	const n = 300
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		l, err := c.Mutex("r" + strconv.Itoa(i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	perShard := map[string]int{}
	for i := range n {
		p, err := cl.PrimaryFor(ctx, "dlock:{r"+strconv.Itoa(i)+"}")
		if err != nil {
			t.Fatal(err)
		}
		perShard[p.Addr]++
	}
	// Count from here on, on each primary's own client.
	if err := rdb.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error {
		shard.AddHook(sc.hook(shard.Options().Addr))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	const periods = 6
	time.Sleep(periods * ttl / 3)
	for i, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("lease %d lost on a Cluster: %v", i, err)
		}
	}
	for addr, k := range perShard {
		sc.mu.Lock()
		trips, calls := sc.trips[addr], sc.calls[addr]
		sc.mu.Unlock()
		// About one pass per period, each one round trip per 128 leases,
		// and passes a bit more often while renewals drift apart.
		if want := periods * ((k + 127) / 128) * 3 / 2; trips > want {
			t.Errorf("primary %s: %d round trips for %d leases over %d periods, want at most %d", addr, trips, k, periods, want)
		}
		if calls < periods/2*k {
			t.Errorf("primary %s: %d script calls for %d leases over %d periods: not one per slot", addr, calls, k, periods)
		}
		t.Logf("primary %s: %d leases, %d script calls in %d round trips over %d periods", addr, k, calls, trips, periods)
	}
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// commandCalls returns how many times each node ran cmd (INFO commandstats).
func commandCalls(t *testing.T, cl *redistest.Cluster, cmd string) map[string]int {
	t.Helper()
	ctx := context.Background()
	out := map[string]int{}
	for _, addr := range cl.Addrs() {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		info := rdb.Info(ctx, "commandstats").Val()
		rdb.Close()
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":"); ok {
				var calls int
				fmt.Sscanf(rest, "calls=%d", &calls)
				out[addr] = calls
			}
		}
	}
	return out
}

// waitInLine starts a Lock of name on c that waits for the lock, which its
// holder keeps, and returns once the waiter is registered in Redis (inLine).
// The channel gets the time the waiter got the lock; the waiter unlocks it
// then.
func waitInLine(t *testing.T, c *dlock.Client, rdb redis.UniversalClient, name string, opts ...dlock.Option) <-chan time.Time {
	t.Helper()
	o := inLine(t, rdb, c.Mutex(name, opts...).Lock, "dlock:{"+name+"}:waiters", 1)
	got := make(chan time.Time, 1)
	go func() {
		r := <-o
		if r.err != nil {
			t.Errorf("waiter: %v", r.err)
			close(got)
			return
		}
		at := time.Now()
		r.l.Unlock(context.Background())
		got <- at
	}()
	return got
}

// releaseTo unlocks l and checks that the waiter of got has the lock within
// 500ms: only the release's message wakes it this soon, if its keep-alive and
// what was left of l's lease when it last looked are longer.
func releaseTo(t *testing.T, l *dlock.Lease, got <-chan time.Time) {
	t.Helper()
	released := time.Now()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	select {
	case at, ok := <-got:
		if took := at.Sub(released); ok && took > 500*time.Millisecond {
			t.Errorf("waiter got the lock %v after the release: not woken by it", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter never got the lock")
	}
}

// TestClusterHandOffOnShard: a release that wakes a waiter sends one message,
// on the shard that holds the lock (SPUBLISH), not a broadcast over the
// cluster bus (PUBLISH), and the waiter gets the lock at once.
func TestClusterHandOffOnShard(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	ctx := context.Background()
	holder := clientOn(t, cl.Client(t))
	waiter := clientOn(t, cl.Client(t))
	owner, err := cl.PrimaryFor(ctx, "dlock:{handoff}")
	if err != nil {
		t.Fatal(err)
	}
	// Each Client's first use tries SPUBLISH on its probe channel, whose
	// slot may be anywhere: counted from after it.
	for _, c := range []*dlock.Client{holder, waiter} {
		if err := c.Mutex("first-use").Do(ctx, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	before := commandCalls(t, cl, "spublish")
	for range 5 {
		l, err := holder.Mutex("handoff").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := waitInLine(t, waiter, cl.Client(t), "handoff")
		releaseTo(t, l, got)
	}
	for addr, n := range commandCalls(t, cl, "publish") {
		if n > 0 {
			t.Errorf("node %s ran PUBLISH %d times", addr, n)
		}
	}
	spub := commandCalls(t, cl, "spublish")
	for addr := range spub {
		spub[addr] -= before[addr]
	}
	for addr, n := range spub {
		if addr != owner.Addr && n > 0 {
			t.Errorf("node %s, which does not hold the lock, ran SPUBLISH %d times", addr, n)
		}
	}
	if spub[owner.Addr] < 5 {
		t.Errorf("the lock's primary ran SPUBLISH %d times for 5 hand-offs", spub[owner.Addr])
	}
}

// TestClusterFailoverWakeUps: a waiter subscribed on a primary that fails
// over (the server drops its shard channels) is subscribed again on the new
// primary, and the next release wakes it at once; also when the old
// primary's SUNSUBSCRIBE never reaches the waiter's Client, whose next
// attempt finds the slot moved.
func TestClusterFailoverWakeUps(t *testing.T) {
	t.Parallel()
	for _, lost := range []bool{false, true} {
		t.Run(fmt.Sprintf("sunsubscribe lost %v", lost), func(t *testing.T) {
			t.Parallel()
			var opts []dlock.Option
			if lost {
				opts = append(opts, dlock.WithLostSUnsubscribe())
			}
			failoverWakeUp(t, opts...)
		})
	}
}

func failoverWakeUp(t *testing.T, opts ...dlock.Option) {
	cl := redistest.StartCluster(t, 3, 1)
	ctx := context.Background()
	rdb := cl.Client(t)
	holder := clientOn(t, rdb)
	waiter := clientOn(t, cl.Client(t), opts...)
	// A TTL whose keep-alive (TTL/6) is short: the waiter's next attempt
	// comes within a second and a half of the failover.
	l, err := holder.Mutex("fo", dlock.WithTTL(9*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := waitInLine(t, waiter, rdb, "fo", dlock.WithTTL(9*time.Second))
	primary, err := cl.PrimaryFor(ctx, "dlock:{fo}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Failover(ctx, primary); err != nil {
		t.Fatal(err)
	}
	// The subscription moves with the slot: at once when the old primary's
	// SUNSUBSCRIBE reaches the waiter's Client, else at the waiter's next
	// attempt after its Client's slot map shows the move. The bound is
	// generous: it is the outcome that counts, and with both CPUs busy the
	// Cluster takes a while to agree on the new primary.
	channel := "dlock:{fo}:wake:"
	if !within(40*time.Second, func() bool {
		n, err := cl.PrimaryFor(ctx, channel)
		if err != nil {
			return false
		}
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		defer c.Close()
		chs := c.PubSubShardChannels(ctx, channel+"*").Val()
		return len(chs) == 1
	}) {
		t.Fatal("the waiter's shard channel is not subscribed on the new primary")
	}
	releaseTo(t, l, got)
}

// TestClusterPrimaryKilled: the primary of a lock's shard dies and its
// replica is promoted. A Lock with a deadline returns by its deadline meanwhile,
// never later; the holder, whose lock reached the replica, keeps its lease or
// is told it lost it; the waiter does not hang; and a Client locks the
// shard's names again within seconds.
func TestClusterPrimaryKilled(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	ctx := context.Background()
	rdb := cl.Client(t)
	holder := clientOn(t, rdb, dlock.WithTTL(3*time.Second))
	waiter := clientOn(t, cl.Client(t), dlock.WithTTL(3*time.Second))
	l, err := holder.Mutex("k").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		l, err := waiter.Mutex("k").Lock(wctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		waited <- err
	}()
	if !within(5*time.Second, func() bool { return rdb.ZCard(ctx, "dlock:{k}:waiters").Val() == 1 }) {
		t.Fatal("waiter not registered")
	}
	primary, err := cl.PrimaryFor(ctx, "dlock:{k}")
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the replica has the lock, so that the failover loses nothing.
	replica, err := cl.ReplicaOf(ctx, primary)
	if err != nil {
		t.Fatal(err)
	}
	if !within(5*time.Second, func() bool {
		// A replica answers a plain client about keys of its primary's slots
		// with MOVED; READONLY on the connection lets it read them.
		r := redis.NewClient(&redis.Options{Addr: replica.Addr, PoolSize: 1})
		defer r.Close()
		if r.Do(ctx, "READONLY").Err() != nil {
			return false
		}
		s, err := readLockErr(r, "dlock:{k}")
		return err == nil && s.Held() && s.Owner == l.Owner()
	}) {
		t.Fatal("the replica never got the lock")
	}

	var deadlines atomic.Int64 // Locks that overran their deadline
	stop := make(chan struct{})
	var probes sync.WaitGroup
	probes.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			start := time.Now()
			pl, err := holder.Mutex("probe" + strconv.Itoa(i%3)).Lock(pctx)
			cancel()
			if took := time.Since(start); took > 300*time.Millisecond+500*time.Millisecond {
				deadlines.Add(1)
				t.Logf("a Lock with a 300ms deadline returned after %v: %v", took, err)
			}
			if err == nil {
				pl.Unlock(ctx)
			}
		}
	})
	// A name of the same shard, to lock again after the failover.
	again := ""
	for i := 0; again == ""; i++ {
		n, err := cl.PrimaryFor(ctx, "dlock:{k"+strconv.Itoa(i)+"}")
		if err != nil {
			t.Fatal(err)
		}
		if n.Addr == primary.Addr {
			again = "k" + strconv.Itoa(i)
		}
	}
	killed := time.Now()
	if _, err := cl.KillPrimary(ctx, primary); err != nil {
		t.Fatal(err)
	}
	t.Logf("replica promoted %v after the kill", time.Since(killed))

	// A Client locks the shard's names again within seconds.
	var after time.Duration
	if !within(10*time.Second, func() bool {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		l2, err := holder.Mutex(again).Lock(actx)
		if err != nil {
			return false
		}
		after = time.Since(killed)
		l2.Unlock(ctx)
		return true
	}) {
		t.Fatal("no Lock on the shard succeeded within 10s of its primary's death")
	}
	t.Logf("locked again %v after the kill", after)
	close(stop)
	probes.Wait()
	if n := deadlines.Load(); n > 0 {
		t.Errorf("%d Locks overran their deadline during the failover", n)
	}

	// The holder's lock reached the replica: it keeps its lease, or has been
	// told it lost it; either way the waiter gets the lock.
	if l.Err() == nil {
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("the holder kept its lease, but Unlock: %v", err)
		}
	} else {
		t.Logf("the holder was told: %v", l.Err())
	}
	if err := <-waited; err != nil {
		t.Errorf("waiter across the failover: %v", err)
	}
}

// TestClusterLossyFailoverFences: a holder takes a lock whose primary then
// fails over to a replica that never got the lock (each of
// DLOCK_FAILOVER_ROUNDS rounds, 1 by default). The holder is told it lost the
// lock within a renewal period of the failover, the next holder gets it, and
// its fence is above the lost holder's, though the new primary never saw that
// fence.
func TestClusterLossyFailoverFences(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	ctx := context.Background()
	rdb := cl.Client(t)
	ttl := 3 * time.Second
	c := clientOn(t, rdb, dlock.WithTTL(ttl))
	var last int64
	for round := range failoverRounds(t, 1) {
		name := "lossy" + strconv.Itoa(round%3)
		primary, err := cl.PrimaryFor(ctx, "dlock:{"+name+"}")
		if err != nil {
			t.Fatal(err)
		}
		var l *dlock.Lease
		_, err = cl.LossyFailover(ctx, primary, func() error {
			l, err = c.Mutex(name).Lock(ctx)
			return err
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		failedOver := time.Now()
		if l.Fence() <= last {
			t.Errorf("round %d: fence %d after %d", round, l.Fence(), last)
		}
		// The lock is gone with the write; the next renewal says so.
		if !closedWithin(l.Done(), ttl) {
			t.Fatalf("round %d: the holder of a lock lost in the failover was not told", round)
		}
		if !errors.Is(l.Err(), dlock.ErrLockLost) {
			t.Errorf("round %d: Err %v, want ErrLockLost", round, l.Err())
		}
		var next *dlock.Lease
		if !within(10*time.Second, func() bool {
			actx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			next, err = c.Mutex(name).Lock(actx)
			return err == nil
		}) {
			t.Fatalf("round %d: no Lock after the failover: %v", round, err)
		}
		if next.Fence() <= l.Fence() {
			t.Errorf("round %d: fence %d after the lost %d: the promoted replica went back", round, next.Fence(), l.Fence())
		}
		t.Logf("round %d: lost holder told %v after the failover; fences %d -> %d", round, time.Since(failedOver), l.Fence(), next.Fence())
		last = next.Fence()
		if err := next.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cl.Rejoin(ctx, primary); err != nil {
			t.Fatalf("round %d: rejoin: %v", round, err)
		}
	}
}

// namesOnPrimaries returns one lock name per primary of cl.
func namesOnPrimaries(t *testing.T, cl *redistest.Cluster, stem string) []string {
	t.Helper()
	ctx := context.Background()
	seen := map[string]bool{}
	var names []string
	for i := 0; len(names) < 3; i++ {
		if i > 1000 {
			t.Fatal("no name found on every primary")
		}
		name := stem + strconv.Itoa(i)
		p, err := cl.PrimaryFor(ctx, "dlock:{"+name+"}")
		if err != nil {
			t.Fatal(err)
		}
		if !seen[p.Addr] {
			seen[p.Addr] = true
			names = append(names, name)
		}
	}
	return names
}

// TestClusterMultiLock: a MultiLock over names on three primaries is
// all-or-nothing (a TryLock that meets one held name leaves nothing held on
// any primary), its leases are renewed on each for several TTLs, and Extend
// and Unlock reach every one.
func TestClusterMultiLock(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	ctx := context.Background()
	rdb := cl.Client(t)
	ttl := 500 * time.Millisecond
	c := clientOn(t, rdb, dlock.WithTTL(ttl))
	other := clientOn(t, cl.Client(t))
	names := namesOnPrimaries(t, cl, "m")
	ml := c.MultiLock(names)

	for i := range names {
		blocker, err := other.Mutex(names[i]).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ml.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock with %q held elsewhere: %v, want ErrNotAcquired", names[i], err)
		}
		for _, n := range names {
			if n == names[i] {
				continue
			}
			// Not held, and nothing left past the rolled back lease.
			if err := freedErr(rdb, "dlock:{"+n+"}", ttl); err != nil {
				t.Errorf("TryLock that failed on %q left %q held: %v", names[i], n, err)
			}
		}
		if err := blocker.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	l, err := ml.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * ttl)
	if err := l.Err(); err != nil {
		t.Fatalf("MultiLease over three primaries not renewed: %v", err)
	}
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if len(l.Leases()) != len(names) {
		t.Fatalf("%d leases for the names %v", len(l.Leases()), names)
	}
	for _, sub := range l.Leases() {
		if left := leaseLeft(t, rdb, "dlock:{"+sub.Name()+"}", sub.Owner()); left < 5*time.Second {
			t.Errorf("%q has %v left after Extend(10s)", sub.Name(), left)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := freedErr(rdb, "dlock:{"+n+"}", 10*time.Second); err != nil {
			t.Errorf("%q after Unlock: %v", n, err)
		}
	}
}

// TestRequirepass: a Client works on a Redis and on a Cluster that require a
// password, wake-ups included.
func TestRequirepass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, "--requirepass", "s3cret")
	cl := redistest.StartCluster(t, 3, 0, "--requirepass", "s3cret")
	for name, clients := range map[string][2]redis.UniversalClient{
		"redis":   {srv.Client(t), srv.Client(t)},
		"cluster": {cl.Client(t), cl.Client(t)},
	} {
		t.Run(name, func(t *testing.T) {
			a, b := clientOn(t, clients[0]), clientOn(t, clients[1])
			l, err := a.Mutex("pw").Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				l, err := b.Mutex("pw").Lock(ctx)
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			if !within(5*time.Second, func() bool { return clients[0].ZCard(ctx, "dlock:{pw}:waiters").Val() == 1 }) {
				t.Fatal("waiter not registered")
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("the waiter was not woken") // its keep-alive is 5s
			}
		})
	}
}

// TestClusterSlotMigration: the slot of a held lock with a waiter moves to
// another primary. The holder's renewals follow it (its lease outlives
// several TTLs), its Unlock works there, and the waiter, whose shard channel
// the old owner dropped, is subscribed again on the new one and woken by the
// release.
func TestClusterSlotMigration(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	ctx := context.Background()
	rdb := cl.Client(t)
	ttl := 2 * time.Second // renewed every 667ms; a waiter sees more than 1.3s left
	holder := clientOn(t, rdb, dlock.WithTTL(ttl))
	waiter := clientOn(t, cl.Client(t)) // keep-alive 5s
	l, err := holder.Mutex("mig").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := waitInLine(t, waiter, rdb, "mig")
	from, err := cl.PrimaryFor(ctx, "dlock:{mig}")
	if err != nil {
		t.Fatal(err)
	}
	primaries, err := cl.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	to := primaries[0]
	if to == from {
		to = primaries[1]
	}
	if _, err := cl.MigrateSlot(ctx, "dlock:{mig}", to); err != nil {
		t.Fatal(err)
	}
	// The subscription moves with the slot.
	if !within(5*time.Second, func() bool {
		c := redis.NewClient(&redis.Options{Addr: to.Addr})
		defer c.Close()
		return len(c.PubSubShardChannels(ctx, "dlock:{mig}:wake:*").Val()) == 1
	}) {
		t.Fatal("the waiter's shard channel is not subscribed on the slot's new primary")
	}
	time.Sleep(2 * ttl)
	if err := l.Err(); err != nil {
		t.Fatalf("the holder's lease did not survive its slot's migration: %v", err)
	}
	releaseTo(t, l, got)
}

// TestClusterWaitReplicas: WithWaitReplicas on a Cluster waits on the primary
// that owns each lock: locks on three primaries are granted and renewed while
// their replicas acknowledge, and with one replica paused only the locks of
// its primary are refused.
func TestClusterWaitReplicas(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	ctx := context.Background()
	ttl := 600 * time.Millisecond
	c := clientOn(t, cl.Client(t), dlock.WithTTL(ttl), dlock.WithWaitReplicas(1, 200*time.Millisecond))
	if err := c.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	names := namesOnPrimaries(t, cl, "w")
	l, err := c.MultiLock(names).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * ttl)
	if err := l.Err(); err != nil {
		t.Fatalf("MultiLease over three primaries, replicas acknowledging: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	primary, err := cl.PrimaryFor(ctx, "dlock:{"+names[0]+"}")
	if err != nil {
		t.Fatal(err)
	}
	replica, err := cl.ReplicaOf(ctx, primary)
	if err != nil {
		t.Fatal(err)
	}
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	defer replica.Resume()
	if _, err := c.Mutex(names[0]).TryLock(ctx); !errors.Is(err, dlock.ErrNotReplicated) || !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock on the primary whose replica is paused: %v; want ErrNotAcquired and ErrNotReplicated", err)
	}
	for _, n := range names[1:] {
		l, err := c.Mutex(n).TryLock(ctx)
		if err != nil {
			t.Errorf("TryLock on another primary: %v", err)
			continue
		}
		_ = l.Unlock(ctx)
	}
}
