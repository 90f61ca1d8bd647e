package dlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestRedLockBadInput(t *testing.T) {
	t.Parallel()
	_, rdbs := redLockNodes(t, 3)
	other := redis.NewClient(rdbs[0].Options())
	t.Cleanup(func() { _ = other.Close() })
	u := func(rs ...*redis.Client) []redis.UniversalClient {
		out := make([]redis.UniversalClient, len(rs))
		for i, r := range rs {
			if r != nil {
				out[i] = r
			}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		nodes []redis.UniversalClient
		opts  []dlock.Option
		want  string
	}{
		{"no nodes", nil, nil, "0 nodes"},
		{"one node", u(rdbs[0]), nil, "1 nodes"},
		{"two nodes", u(rdbs[0], rdbs[1]), nil, "2 nodes"},
		{"four nodes", u(rdbs[0], rdbs[1], rdbs[2], other), nil, "4 nodes"},
		{"nil node", u(rdbs[0], nil, rdbs[2]), nil, "node 1 is nil"},
		{"the same client twice", u(rdbs[0], rdbs[1], rdbs[0]), nil, "same client"},
		{"the same server twice", u(rdbs[0], rdbs[1], other), nil, "nodes 0 and 2 are both"},
		{"WithWaitReplicas", u(rdbs...), []dlock.Option{dlock.WithWaitReplicas(1, time.Second)}, "WithWaitReplicas"},
		{"zero node timeout", u(rdbs...), []dlock.Option{dlock.WithNodeTimeout(0)}, "must be positive"},
		{"TTL too small", u(rdbs...), []dlock.Option{dlock.WithTTL(time.Millisecond)}, "at least"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := dlock.NewRedLock(tc.nodes, tc.opts...)
			if err == nil {
				c.Close()
				t.Fatalf("NewRedLock succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
	if _, err := dlock.New(rdbs[0], dlock.WithNodeTimeout(time.Second)); err == nil {
		t.Error("New with WithNodeTimeout succeeded")
	}

	c := redLockOn(t, rdbs)
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"FairMutex.Lock":           func() error { _, err := c.FairMutex("x").Lock(ctx); return err },
		"FairMutex.TryLock":        func() error { _, err := c.FairMutex("x").TryLock(ctx); return err },
		"RWMutex.Lock":             func() error { _, err := c.RWMutex("x").Lock(ctx); return err },
		"RWMutex.RLock":            func() error { _, err := c.RWMutex("x").RLock(ctx); return err },
		"Semaphore.Acquire":        func() error { _, err := c.Semaphore("x", 2).Acquire(ctx, 1); return err },
		"Semaphore.SetPermits":     func() error { return c.Semaphore("x", 2).SetPermits(ctx, 3) },
		"CountDownLatch.SetCount":  func() error { _, err := c.CountDownLatch("x").TrySetCount(ctx, 1); return err },
		"CountDownLatch.Wait":      func() error { return c.CountDownLatch("x").Wait(ctx) },
		"CountDownLatch.CountDown": func() error { return c.CountDownLatch("x").CountDown(ctx) },
	} {
		if err := call(); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s on a RedLock: %v, want an error matching errors.ErrUnsupported", name, err)
		}
	}
	for _, r := range rdbs {
		if keys := r.Keys(ctx, "*").Val(); len(keys) > 0 {
			t.Errorf("unsupported calls wrote %v", keys)
		}
	}
}

// TestRedLockMutex: a RedLock's Lock holds a majority of its five nodes
// (here all five), with the fence on a majority of fence keys; a
// re-entry's Unlock leaves the majority held; Unlock returns once a
// majority has released; Do runs. (What its Lease promises: the lease
// contract.)
func TestRedLockMutex(t *testing.T) {
	t.Parallel()
	_, rdbs := redLockNodes(t, 5)
	c := redLockOn(t, rdbs, dlock.WithTTL(2*time.Second))
	ctx := context.Background()
	m := c.Mutex("job")

	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := holders(t, rdbs, "job"); n < 3 {
		t.Errorf("held on %d nodes after Lock, want a majority", n)
	}
	atFence := 0
	for _, r := range rdbs {
		if f, _ := r.Get(ctx, "dlock:{job}:fence").Int64(); f >= l.Fence() {
			atFence++
		}
	}
	if atFence < 3 {
		t.Errorf("%d nodes have a fence key at least the lease's fence %d, want a majority", atFence, l.Fence())
	}
	lctx, cancel := l.Context(ctx)
	l2, err := m.Lock(lctx)
	if err != nil {
		t.Fatalf("re-enter: %v", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatalf("unlock the re-entry: %v", err)
	}
	cancel()
	if n := holders(t, rdbs, "job"); n < 3 {
		t.Errorf("held on %d nodes after the re-entry's Unlock, want a majority", n)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	// Unlock returns once a majority has released; a member that answers
	// late releases in the background.
	if n := holders(t, rdbs, "job"); n >= 3 {
		t.Errorf("held on %d nodes after Unlock, want a minority at most", n)
	}
	if err := redLockOn(t, rdbs).Mutex("job").Do(ctx, func(ctx context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestRedLockWaiters: eight goroutines of four Clients take turns on one
// lock: every Lock returns, each critical section runs alone, and the waits
// end on wake-ups, not on the holders' TTL running out.
func TestRedLockWaiters(t *testing.T) {
	t.Parallel()
	_, rdbs := redLockNodes(t, 5)
	const ttl = 10 * time.Second
	var clients []*dlock.Client
	for range 4 {
		// Wake-ups are what this test is about, not the per-node timeout: a
		// second, so that a loaded machine's pause is not a lost majority.
		clients = append(clients, redLockOn(t, rdbs, dlock.WithTTL(ttl), dlock.WithNodeTimeout(time.Second)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var inside, overlaps, done int32
	var mu sync.Mutex
	start := time.Now()
	var wg sync.WaitGroup
	var errs []error
	for g := range 8 {
		m := clients[g%len(clients)].Mutex("turns")
		wg.Go(func() {
			for range 10 {
				l, err := m.Lock(ctx)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				mu.Lock()
				inside++
				if inside > 1 {
					overlaps++
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				inside--
				done++
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, the first: %v", len(errs), errs[0])
	}
	if overlaps > 0 {
		t.Errorf("%d critical sections overlapped", overlaps)
	}
	if elapsed := time.Since(start); elapsed > ttl {
		t.Errorf("80 critical sections took %v: waiters waited for TTLs, not wake-ups", elapsed)
	}
	t.Logf("80 critical sections by 8 goroutines of 4 Clients in %v", time.Since(start).Round(time.Millisecond))
}

// TestRedLockNodesDown: with 2 of 5 nodes dead, Lock, renewal and Unlock
// work; with 3 dead, a holder learns its lease is lost, and Lock and TryLock
// fail with ErrNotAcquired within their context.
func TestRedLockNodesDown(t *testing.T) {
	t.Parallel()
	srvs, rdbs := redLockNodes(t, 5)
	const ttl = time.Second
	// The live nodes must answer within the node timeout also on a loaded
	// machine; the holder learns of a loss from its local deadline.
	c := redLockOn(t, rdbs, dlock.WithTTL(ttl), dlock.WithNodeTimeout(300*time.Millisecond))
	other := redLockOn(t, rdbs, dlock.WithTTL(ttl), dlock.WithNodeTimeout(300*time.Millisecond))
	ctx := context.Background()
	for _, s := range srvs[:2] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	l, err := c.Mutex("m").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock with 2 of 5 nodes down: %v", err)
	}
	if closedWithin(l.Done(), 3*ttl) {
		t.Fatalf("lease lost with 2 of 5 nodes down: %v", l.Err())
	}
	if _, err := other.Mutex("m").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock of a held lock with 2 of 5 nodes down: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with 2 of 5 nodes down: %v", err)
	}
	if err := other.Mutex("m").Do(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Do after the Unlock: %v", err)
	}

	l, err = c.Mutex("m").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := srvs[2].Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if !closedWithin(l.Done(), ttl+500*time.Millisecond) {
		t.Fatalf("holder did not learn of the loss of a majority within %v", ttl+500*time.Millisecond)
	}
	t.Logf("holder saw the loss %v after the third node died: %v", time.Since(killed).Round(time.Millisecond), l.Err())
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost", l.Err())
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of the lost lease: %v, want ErrNotHeld", err)
	}
	if _, err := other.Mutex("n").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock with 3 of 5 nodes down: %v, want ErrNotAcquired", err)
	}
	const wait = 500 * time.Millisecond
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := time.Now()
	_, err = other.Mutex("n").Lock(wctx)
	took := time.Since(start)
	var qe *dlock.QuorumError
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.As(err, &qe) || qe.Need != 3 || qe.Nodes != 5 || qe.Answered > 2 {
		t.Errorf("Lock with 3 of 5 nodes down: %v, want ErrNotAcquired and a QuorumError of 5 nodes needing 3", err)
	}
	if took > wait+300*time.Millisecond {
		t.Errorf("Lock with 3 of 5 nodes down returned after %v, its context ended after %v", took, wait)
	}
	t.Logf("Lock with 3 of 5 nodes down: %v after %v", err, took.Round(time.Millisecond))
}

// TestRedLockPausedNodes: with one node, then two, stopped by SIGSTOP (they
// accept connections and answer nothing), Lock and Unlock do not wait for
// the paused nodes' replies, which would take the Redis clients' 3 s read
// timeout, and a waiter is woken by the release, not by the holder's lease
// running out: a node that does not answer costs at most the per-node
// timeout. The bounds tell those causes apart; they are no latency figures.
func TestRedLockPausedNodes(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 5)
	rdbs := make([]*redis.Client, len(srvs))
	for i, s := range srvs {
		rdbs[i] = s.Client(t) // go-redis's default timeouts: 3s to read
	}
	// Far below the 3s read timeout, and above what a loaded machine can
	// pause the nodes that do answer.
	const nodeTimeout = 150 * time.Millisecond
	// A waiter also tries again each keep-alive period, a sixth of the TTL
	// (5 s at most): at 30 s, far longer than a release's wake-up takes.
	const ttl = 30 * time.Second
	const keepAlive = 5 * time.Second
	c := redLockOn(t, rdbs, dlock.WithNodeTimeout(nodeTimeout), dlock.WithTTL(ttl))
	waiter := redLockOn(t, rdbs, dlock.WithNodeTimeout(nodeTimeout), dlock.WithTTL(ttl))
	ctx := context.Background()
	// Half the read timeout: a Lock+Unlock that waited for a paused node's
	// reply takes at least all of it.
	const readTimeout = 3 * time.Second
	const bound = readTimeout / 2
	for paused := 1; paused <= 2; paused++ {
		if err := srvs[paused-1].Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srvs[paused-1].Resume() }) // before the Clients close
		var worst time.Duration
		for range 20 {
			start := time.Now()
			l, err := c.Mutex("p").Lock(ctx)
			if err != nil {
				t.Fatalf("%d paused: Lock: %v", paused, err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("%d paused: Unlock: %v", paused, err)
			}
			worst = max(worst, time.Since(start))
		}
		if worst > bound {
			t.Errorf("%d of 5 nodes paused: slowest Lock+Unlock %v: it waited for a paused node (read timeout %v)", paused, worst, readTimeout)
		}
		l, err := c.Mutex("p").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			wl, err := waiter.Mutex("p").Lock(ctx)
			if err != nil {
				t.Errorf("waiter: %v", err)
				close(got)
				return
			}
			got <- time.Now()
			_ = wl.Unlock(ctx)
		}()
		time.Sleep(300 * time.Millisecond) // the waiter subscribes and registers
		released := time.Now()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		woke, ok := <-got
		if !ok {
			t.FailNow()
		}
		// The holder's lease had most of its TTL left, and the waiter's
		// next try of its own was up to a keep-alive period away: one that
		// took the lock later than half of that was not woken by the release.
		if d := woke.Sub(released); d > keepAlive/2 {
			t.Errorf("%d of 5 nodes paused: the waiter took the lock %v after the release: not woken by it", paused, d)
		}
		t.Logf("%d of 5 nodes paused: slowest Lock+Unlock %v; waiter in %v after the release", paused, worst.Round(time.Millisecond), woke.Sub(released).Round(time.Millisecond))
	}
}

// TestRedLockFirstRequestShort: a new Client's first Lock, answered in time
// by 2 of 5 nodes (3 stopped by SIGSTOP), waits for the others rather than
// failing at once as a Client that reached no node does: the nodes that
// answered show the addresses are right.
func TestRedLockFirstRequestShort(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 5)
	rdbs := make([]*redis.Client, len(srvs))
	for i, s := range srvs {
		rdbs[i] = s.Client(t)
	}
	// The running nodes must answer the first request, which dials, within
	// the node timeout, also on a loaded machine.
	c := redLockOn(t, rdbs, dlock.WithNodeTimeout(400*time.Millisecond))
	for _, s := range srvs[:3] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Resume() })
	}
	const paused = 1200 * time.Millisecond
	go func() {
		time.Sleep(paused)
		for _, s := range srvs[:3] {
			_ = s.Resume()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	l, err := c.Mutex("first").Lock(ctx)
	if err != nil {
		t.Fatalf("first Lock with 3 of 5 nodes stopped for %v: %v", paused, err)
	}
	if took := time.Since(start); took < paused {
		t.Errorf("Lock returned after %v, before the nodes were resumed at %v", took, paused)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// plant makes another owner hold lock name on rdbs, for ttl.
func plant(t *testing.T, rdbs []*redis.Client, name string, ttl time.Duration) {
	t.Helper()
	for _, r := range rdbs {
		if err := r.HSet(context.Background(), "dlock:{"+name+"}", "someone:1", 1).Err(); err != nil {
			t.Fatal(err)
		}
		r.PExpire(context.Background(), "dlock:{"+name+"}", ttl)
	}
}

// unplant removes what plant made.
func unplant(t *testing.T, rdbs []*redis.Client, name string) {
	t.Helper()
	for _, r := range rdbs {
		r.Del(context.Background(), "dlock:{"+name+"}")
	}
}

// TestRedLockFenceAfterRestart: a fence handed out by a majority that
// includes a node whose clock runs ahead (its fence key is set an hour
// ahead, since clocks cannot be stepped here) is written back to the other
// nodes, so that once that node restarts empty, the next fence is still
// above it. Without the write-back, the same run hands out a lower fence.
func TestRedLockFenceAfterRestart(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, opts ...dlock.Option) (f1, f2 int64) {
		srvs, rdbs := redLockNodes(t, 5)
		c := redLockOn(t, rdbs, append([]dlock.Option{dlock.WithTTL(5 * time.Second)}, opts...)...)
		ctx := context.Background()
		ahead := time.Now().Add(time.Hour).UnixMicro()
		rdbs[0].Set(ctx, "dlock:{f}:fence", ahead, 0)
		plant(t, rdbs[3:], "f", 5*time.Second) // the majority is nodes 0, 1 and 2
		l, err := c.Mutex("f").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Node 0's fence: ahead+1, or a little more if an attempt that
		// missed the node timeout on a loaded machine took one before.
		if l.Fence() <= ahead || l.Fence() > ahead+100 {
			t.Fatalf("fence %d, want node 0's, just above %d: the set-up failed", l.Fence(), ahead)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		unplant(t, rdbs[3:], "f")
		if err := srvs[0].Restart(); err != nil { // a minority, without persistence
			t.Fatal(err)
		}
		l2, err := c.Mutex("f").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l2.Unlock(ctx)
		return l.Fence(), l2.Fence()
	}
	f1, f2 := run(t)
	if f2 <= f1 {
		t.Errorf("fence after node 0 restarted empty: %d, not above the one before, %d", f2, f1)
	}
	t.Run("without-write-back-the-check-fails", func(t *testing.T) {
		f1, f2 := run(t, dlock.WithoutFenceRaise())
		if f2 > f1 {
			t.Fatalf("without the write-back the fence still rose (%d after %d): the check above proves nothing", f2, f1)
		}
		t.Logf("caught, as it must be: fence %d after %d", f2, f1)
	})
}

// TestRedLockRestartWhileHeld: a node that restarts empty while a lock is
// held by exactly a majority lets a second owner take a majority at once,
// before the holder's next renewal takes the lock again there (the Redlock
// algorithm's known gap), and the fence lets the resource reject the stale
// holder's write. With the node kept out for one TTL after it died (the
// delayed restart), the holder's renewals meanwhile took the lock on the
// free nodes, and the second owner gets it only after the first unlocked it.
func TestRedLockRestartWhileHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("immediate-restart", func(t *testing.T) {
		srvs, rdbs := redLockNodes(t, 5)
		// a's first renewal, a third of the TTL in, takes the lock on the
		// free nodes 3 and 4: b's TryLock must come before it, also on a
		// loaded machine, where a restart can take seconds.
		const ttl = 20 * time.Second
		a := redLockOn(t, rdbs, dlock.WithTTL(ttl))
		b := redLockOn(t, rdbs, dlock.WithTTL(ttl))
		res := redistest.Start(t).Client(t)
		plant(t, rdbs[3:], "d", ttl) // a's majority is nodes 0, 1 and 2
		la, err := a.Mutex("d").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		unplant(t, rdbs[3:], "d")
		if err := srvs[0].Restart(); err != nil {
			t.Fatal(err)
		}
		lb, err := b.Mutex("d").TryLock(ctx)
		if err != nil {
			t.Fatalf("no double grant after the immediate restart (%v): the set-up failed", err)
		}
		if la.Err() != nil {
			t.Fatalf("a's lease ended before b's began: %v", la.Err())
		}
		t.Logf("double grant: a holds fence %d and still thinks it holds; b took fence %d", la.Fence(), lb.Fence())
		if lb.Fence() <= la.Fence() {
			t.Fatalf("b's fence %d is not above a's %d", lb.Fence(), la.Fence())
		}
		if ok, err := fencedWrite.Run(ctx, res, []string{"resource"}, lb.Fence()).Int(); err != nil || ok != 1 {
			t.Fatalf("b's fenced write: %d, %v", ok, err)
		}
		if ok, err := fencedWrite.Run(ctx, res, []string{"resource"}, la.Fence()).Int(); err != nil || ok != 0 {
			t.Errorf("a's stale fenced write: %d, %v; want it rejected", ok, err)
		}
		if !closedWithin(la.Done(), ttl/3+time.Second) {
			t.Error("a did not learn of its loss at its next renewal")
		}
		_ = lb.Unlock(ctx)
	})
	t.Run("delayed-restart", func(t *testing.T) {
		// While node 0 is out, a's renewals take the lock on nodes 3 and 4,
		// which are free: when node 0 comes back empty, a holds a majority
		// without it, and b cannot take the lock until a unlocks it.
		srvs, rdbs := redLockNodes(t, 5)
		const ttl = 3 * time.Second
		a := redLockOn(t, rdbs, dlock.WithTTL(ttl), dlock.WithNodeTimeout(500*time.Millisecond))
		b := redLockOn(t, rdbs, dlock.WithTTL(ttl), dlock.WithNodeTimeout(500*time.Millisecond))
		plant(t, rdbs[3:], "d", ttl)
		la, err := a.Mutex("d").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		unplant(t, rdbs[3:], "d")
		if err := srvs[0].Kill(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl) // the node stays out for one TTL
		if err := srvs[0].Restart(); err != nil {
			t.Fatal(err)
		}
		lb, err := b.Mutex("d").TryLock(ctx)
		switch {
		case err == nil && la.Err() == nil:
			t.Fatalf("a still holds fence %d while b holds fence %d: a double grant despite the delayed restart", la.Fence(), lb.Fence())
		case err == nil:
			t.Fatalf("a's lease ended while node 0 was out (%v): its renewals did not take the lock on the free nodes", la.Err())
		case !errors.Is(err, dlock.ErrNotAcquired):
			t.Fatalf("b's TryLock: %v, want ErrNotAcquired", err)
		case la.Err() != nil:
			t.Fatalf("a's lease ended: %v", la.Err())
		}
		for i, r := range rdbs[1:] {
			if !r.HExists(ctx, "dlock:{d}", la.Owner()).Val() {
				t.Errorf("node %d does not hold a's lease", i+1)
			}
		}
		if err := la.Unlock(ctx); err != nil {
			t.Fatalf("a's Unlock: %v", err)
		}
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		lb, err = b.Mutex("d").Lock(lctx)
		if err != nil {
			t.Fatalf("b's Lock after a's Unlock: %v", err)
		}
		if lb.Fence() <= la.Fence() {
			t.Errorf("b's fence %d is not above a's %d", lb.Fence(), la.Fence())
		}
		_ = lb.Unlock(ctx)
	})
}

// TestRedLockRetakeAfterRestart: a renewal takes the lock again on a member
// that restarted empty, with a fence there at least the hold's, so that a
// hold renewed across restarts of two of its three members, one after the
// other, still holds on every member; Unlock then frees every one. Without
// the retake the hold is left on one member after the second restart, and
// its next renewal loses it.
func TestRedLockRetakeAfterRestart(t *testing.T) {
	t.Parallel()
	srvs, rdbs := redLockNodes(t, 3)
	const ttl = 1500 * time.Millisecond // renewed every 500 ms
	c := redLockOn(t, rdbs, dlock.WithTTL(ttl), dlock.WithNodeTimeout(500*time.Millisecond))
	ctx := context.Background()
	l, err := c.Mutex("r").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holds := func(r *redis.Client) bool { return r.HExists(ctx, "dlock:{r}", l.Owner()).Val() }
	for i := range 2 {
		// A key of the test's own shows that the member came back empty.
		if err := rdbs[i].Set(ctx, "before-restart", 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := srvs[i].Restart(); err != nil {
			t.Fatal(err)
		}
		if rdbs[i].Exists(ctx, "before-restart").Val() != 0 {
			t.Fatalf("member %d kept its data across the restart", i)
		}
		if !within(10*ttl, func() bool { return holds(rdbs[i]) }) {
			t.Fatalf("member %d, restarted empty, does not hold the lock again after the renewals since (lease: %v)", i, l.Err())
		}
		if f, err := rdbs[i].Get(ctx, "dlock:{r}:fence").Int64(); err != nil || f < l.Fence() {
			t.Errorf("member %d took the lock again with its fence key at %d (%v), below the hold's %d", i, f, err, l.Fence())
		}
		if err := l.Err(); err != nil {
			t.Fatalf("the lease ended after member %d restarted: %v", i, err)
		}
	}
	if n := holders(t, rdbs, "r"); n < 2 {
		t.Errorf("held on %d members after two of them restarted empty, want a majority", n)
	}
	for i, r := range rdbs {
		if !holds(r) {
			t.Errorf("member %d does not hold the lease", i)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if !within(2*time.Second, func() bool { return holders(t, rdbs, "r") == 0 }) {
		t.Errorf("held on %d members after Unlock", holders(t, rdbs, "r"))
	}
}

// TestRedLockRetakeAfterUnlock: a renewal finds the lock gone on a member
// that restarted empty and takes it again there, but the request that takes
// it reaches the member late, while the holder unlocks. Unlock returns nil,
// and the member is free once the late request has run: the retake does not
// bring the lock back after Unlock.
func TestRedLockRetakeAfterUnlock(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 3)
	proxies := make([]*faultproxy.Proxy, len(srvs))
	rdbs := make([]*redis.Client, len(srvs))
	direct := make([]*redis.Client, len(srvs))
	for i, s := range srvs {
		proxies[i] = faultproxy.Start(t, s.Addr)
		rdbs[i] = redis.NewClient(&redis.Options{Addr: proxies[i].Addr(), ReadTimeout: 3 * time.Second})
		t.Cleanup(func() { _ = rdbs[i].Close() })
		direct[i] = s.Client(t)
	}
	const ttl = 6 * time.Second // renewed every 2 s
	c := redLockOn(t, rdbs, dlock.WithTTL(ttl), dlock.WithNodeTimeout(2*time.Second))
	ctx := context.Background()
	l, err := c.Mutex("u").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The retake's acquire on member 0 reaches Redis 300 ms late.
	slow := proxies[0].Inject(faultproxy.Rule{Match: faultproxy.ScriptSHA(dlock.ScriptHash("red_acquire")),
		Fault: faultproxy.DelayRequest, Delay: 300 * time.Millisecond, Times: 1})
	if err := srvs[0].Restart(); err != nil {
		t.Fatal(err)
	}
	var hit time.Time
	select {
	case <-slow.Hit():
		hit = time.Now()
	case <-time.After(5 * ttl):
		t.Fatalf("no renewal took the lock again on member 0, restarted empty (lease: %v)", l.Err())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with a retake in flight: %v", err)
	}
	// The retake's acquire has run on member 0 once its fence key is above
	// the hold's (the retake raised it to the hold's first, and the acquire
	// took the lock, which the release then gave back). Or, if the retake's
	// answer did not come before the node timeout (a loaded machine), the
	// release recorded the owner on the fence key, and the acquire, arriving
	// after it, took nothing: its delay is long over a second after the hit.
	if !within(5*time.Second, func() bool {
		v := direct[0].Get(ctx, "dlock:{u}:fence").Val()
		f, _ := strconv.ParseInt(strings.SplitN(v, "|", 2)[0], 10, 64) // records may follow (lua/lib_common.lua)
		if f > l.Fence() {
			return true
		}
		return strings.Contains(v, l.Owner()+"@") && time.Since(hit) > time.Second
	}) {
		t.Fatalf("the retake's acquire did not run on member 0: fence key %q", direct[0].Get(ctx, "dlock:{u}:fence").Val())
	}
	if !within(2*time.Second, func() bool { return holders(t, direct, "u") == 0 }) {
		for i, r := range direct {
			t.Errorf("member %d after Unlock: %v", i, r.HGetAll(ctx, "dlock:{u}").Val())
		}
	}
}

// TestRedLockFaults: each node behind a fault proxy. A node's acquire reply
// that comes after the per-node timeout is not counted, and its part is
// undone; replies lost and retried by go-redis on a majority of nodes give
// the same outcome as one run: one hold, a release reported as done, nothing
// left behind.
func TestRedLockFaults(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 5)
	proxies := make([]*faultproxy.Proxy, len(srvs))
	rdbs := make([]*redis.Client, len(srvs))
	for i, s := range srvs {
		proxies[i] = faultproxy.Start(t, s.Addr)
		rdbs[i] = redis.NewClient(&redis.Options{Addr: proxies[i].Addr(), ReadTimeout: time.Second})
		t.Cleanup(func() { _ = rdbs[i].Close() })
	}
	direct := make([]*redis.Client, len(srvs))
	for i, s := range srvs {
		direct[i] = s.Client(t)
	}
	// Below the 300ms the faults delay a request or a reply by, and above
	// what a loaded machine takes to dial again after a lost reply.
	c := redLockOn(t, rdbs, dlock.WithNodeTimeout(150*time.Millisecond), dlock.WithTTL(5*time.Second))
	ctx := context.Background()
	// Every node knows the scripts, so that each request is one EVALSHA.
	// A first request dials and loads them, which on a loaded machine can
	// take longer than the node timeout: a few tries.
	var err error
	for range 5 {
		if err = c.Mutex("warm-up").Do(ctx, func(context.Context) error { return nil }); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	acquire := faultproxy.ScriptSHA(dlock.ScriptHash("red_acquire"))
	release := faultproxy.ScriptSHA(dlock.ScriptHash("red_release"))
	raiseFence := faultproxy.ScriptSHA(dlock.ScriptHash("raise_fence"))

	t.Run("late-part-kept", func(t *testing.T) {
		// The majority answers first; node 0's part, late, belongs to the
		// lock all the same: its renewals and release go there too.
		late := proxies[0].Inject(faultproxy.Rule{Match: acquire, Fault: faultproxy.DelayReply, Delay: 300 * time.Millisecond, Times: 1})
		l, err := c.Mutex("late").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if late.Hits() != 1 {
			t.Fatalf("the delay hit %d requests", late.Hits())
		}
		time.Sleep(500 * time.Millisecond)
		if n := holders(t, direct, "late"); n != 5 {
			t.Errorf("held on %d nodes after the late answer, want 5", n)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if !within(2*time.Second, func() bool { return holders(t, direct, "late") == 0 }) {
			t.Errorf("held on %d nodes after Unlock", holders(t, direct, "late"))
		}
	})

	t.Run("release-before-late-acquire", func(t *testing.T) {
		// Node 0's acquire reaches Redis only after the lock was released
		// on the others: the part it takes then must not outlive the lease.
		slow := proxies[0].Inject(faultproxy.Rule{Match: acquire, Fault: faultproxy.DelayRequest, Delay: 300 * time.Millisecond, Times: 1})
		l, err := c.Mutex("overtaken").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if slow.Hits() != 1 {
			t.Fatalf("the delay hit %d requests", slow.Hits())
		}
		time.Sleep(400 * time.Millisecond) // the acquire has run on node 0 by now
		if !within(2*time.Second, func() bool { return direct[0].Exists(ctx, "dlock:{overtaken}").Val() == 0 }) {
			t.Errorf("node 0 holds the lock after its release, for its TTL: %v", direct[0].HGetAll(ctx, "dlock:{overtaken}").Val())
		}
	})

	t.Run("late-part-of-a-failed-acquire-undone", func(t *testing.T) {
		// Another owner holds nodes 1 to 3: the acquire fails, and its parts
		// on node 4 (at once) and node 0 (when its late answer comes) are
		// undone.
		plant(t, direct[1:4], "failed", 5*time.Second)
		late := proxies[0].Inject(faultproxy.Rule{Match: acquire, Fault: faultproxy.DelayReply, Delay: 300 * time.Millisecond, Times: 1})
		if _, err := c.Mutex("failed").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock of a lock held on 3 of 5 nodes: %v", err)
		}
		if late.Hits() != 1 {
			t.Fatalf("the delay hit %d requests", late.Hits())
		}
		if !within(2*time.Second, func() bool { return direct[4].Exists(ctx, "dlock:{failed}").Val() == 0 }) {
			t.Errorf("node 4 still holds the part of the failed acquire")
		}
		if !within(2*time.Second, func() bool { return direct[0].Exists(ctx, "dlock:{failed}").Val() == 0 }) {
			t.Errorf("node 0 still holds the part of the failed acquire that came late")
		}
	})

	t.Run("replies-lost-and-retried", func(t *testing.T) {
		var ins, raises []*faultproxy.Injection
		for _, p := range proxies[:3] {
			ins = append(ins, p.Inject(faultproxy.Rule{Match: acquire, Fault: faultproxy.DropReply, Times: 1}))
			ins = append(ins, p.Inject(faultproxy.Rule{Match: release, Fault: faultproxy.DropReply, Times: 1}))
		}
		// The fence's write-back too: each node's fence is its own clock's,
		// so all but the largest are raised, and their replies are lost
		// once; the retry finds the key raised already.
		for _, p := range proxies {
			raises = append(raises, p.Inject(faultproxy.Rule{Match: raiseFence, Fault: faultproxy.DropReply, Times: 1}))
		}
		l, err := c.Mutex("lost").Lock(ctx)
		if err != nil {
			t.Fatalf("Lock with the replies of 3 of 5 nodes lost once: %v", err)
		}
		for i, r := range direct {
			if h := r.HGetAll(ctx, "dlock:{lost}").Val(); len(h) > 1 {
				t.Errorf("node %d: holders %v", i, h)
			}
		}
		atFence := 0
		for _, r := range direct {
			if f, _ := r.Get(ctx, "dlock:{lost}:fence").Int64(); f >= l.Fence() {
				atFence++
			}
		}
		if atFence < 3 {
			t.Errorf("%d nodes have the fence %d", atFence, l.Fence())
		}
		lostRaises := 0
		for _, in := range raises {
			lostRaises += in.Hits()
		}
		if lostRaises < 3 {
			t.Errorf("the replies of %d fence write-backs were lost, want at least 3", lostRaises)
		}
		if !within(2*time.Second, func() bool {
			for _, r := range direct {
				if f, _ := r.Get(ctx, "dlock:{lost}:fence").Int64(); f < l.Fence() {
					return false
				}
			}
			return true
		}) {
			t.Errorf("a node's fence stayed below %d after the write-back's retries", l.Fence())
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock with the replies of 3 of 5 nodes lost once: %v", err)
		}
		for _, in := range ins {
			if in.Hits() != 1 {
				t.Errorf("a fault hit %d requests, want 1", in.Hits())
			}
		}
		if !within(2*time.Second, func() bool { return holders(t, direct, "lost") == 0 }) {
			t.Errorf("held on %d nodes after Unlock", holders(t, direct, "lost"))
		}
	})
}
