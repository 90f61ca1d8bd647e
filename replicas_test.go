package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// replicated starts a primary with n replicas, in sync, and returns them.
func replicated(t *testing.T, n int) (*redistest.Server, []*redistest.Server) {
	t.Helper()
	primary := redistest.Start(t)
	rs := make([]*redistest.Server, n)
	for i := range rs {
		rs[i] = redistest.Start(t, "--replicaof", "127.0.0.1", itoa(primary.Port), "--repl-ping-replica-period", "1", "--repl-diskless-sync-delay", "0")
	}
	ctx := context.Background()
	rdb := primary.Client(t)
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Do(ctx, "wait", n, 100).Val() != int64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("%d replicas did not come in sync within 10s", n)
		}
	}
	return primary, rs
}

// caughtUp waits until every replica of primary has acknowledged all it
// wrote, so that a WAIT on any connection is satisfied until more is written.
func caughtUp(t *testing.T, primary *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	rdb := primary.Client(t)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		info := rdb.Info(ctx, "replication").Val()
		offset, acked := "", ""
		for line := range strings.SplitSeq(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
				offset = v
			}
			if v, ok := strings.CutPrefix(line, "slave0:"); ok {
				for field := range strings.SplitSeq(v, ",") {
					if o, ok := strings.CutPrefix(field, "offset="); ok {
						acked = o
					}
				}
			}
		}
		if offset != "" && offset == acked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not acknowledge offset %s within 10s (at %s)", offset, acked)
		}
	}
}

// pause stops r (SIGSTOP) until the test ends or the returned function is
// called.
func pause(t *testing.T, r *redistest.Server) (resume func()) {
	t.Helper()
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			if err := r.Resume(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(resume)
	return resume
}

// notReplicated fails the test unless err is an acquire refused for want of
// acknowledgements.
func notReplicated(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, dlock.ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1 replicas acknowledged") {
		t.Errorf("%s with its replica paused: %v; want ErrNotAcquired and ErrNotReplicated", what, err)
	}
}

// TestWaitReplicas: with WithWaitReplicas, a hold exists on the replicas
// when it is granted; one they do not acknowledge is refused and undone, and
// a lease whose renewals they do not acknowledge is lost.
func TestWaitReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("granted holds are on the replicas", func(t *testing.T) {
		t.Parallel()
		primary, rs := replicated(t, 2)
		c := clientOn(t, primary.Client(t), dlock.WithWaitReplicas(2, time.Second))
		if err := c.Check(ctx); err != nil {
			t.Fatalf("Check: %v", err)
		}
		views := []*redis.Client{rs[0].Client(t), rs[1].Client(t)}
		for i := range 20 {
			l, err := c.Mutex("m").Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for j, v := range views {
				// WAIT counted the replica's acknowledgement of the offset it
				// has applied, so the hold is readable there already.
				if s, err := readLockErr(v, "dlock:{m}"); err != nil || !s.Held() || s.Owner != l.Owner() {
					t.Fatalf("round %d: the lock is not on replica %d when Lock returns", i, j)
				}
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("refused and undone", func(t *testing.T) {
		t.Parallel()
		primary, rs := replicated(t, 1)
		rdb := primary.Client(t)
		c := clientOn(t, rdb, dlock.WithWaitReplicas(1, time.Second))
		plain := clientOn(t, rdb)
		pause(t, rs[0])
		tries := []struct {
			what string
			try  func(context.Context) (func(context.Context) error, error)
		}{
			{"Mutex.TryLock", leaseOf(c.Mutex("a").TryLock)},
			{"Mutex.Lock", leaseOf(c.Mutex("a").Lock)},
			{"FairMutex.Lock", leaseOf(c.FairMutex("a").Lock)},
			{"RWMutex.RLock", leaseOf(c.RWMutex("a").RLock)},
			{"RWMutex.Lock", leaseOf(c.RWMutex("a").Lock)},
			{"Semaphore.Acquire", leaseOf(func(ctx context.Context) (*dlock.Lease, error) { return c.Semaphore("a", 1).Acquire(ctx, 1) })},
			{"MultiLock.Lock", func(ctx context.Context) (func(context.Context) error, error) {
				l, err := c.MultiLock([]string{"a", "b"}).Lock(ctx)
				if err != nil {
					return nil, err
				}
				return l.Unlock, nil
			}},
		}
		for _, tr := range tries {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			unlock, err := tr.try(cctx)
			cancel()
			if err == nil {
				t.Errorf("%s succeeded with its replica paused", tr.what)
				_ = unlock(ctx)
				continue
			}
			notReplicated(t, tr.what, err)
		}
		// Undone: a Client without WAIT takes each of them at once.
		for _, m := range []func(context.Context) (*dlock.Lease, error){
			plain.Mutex("a").TryLock, plain.FairMutex("a").TryLock, plain.RWMutex("a").TryLock, plain.Mutex("b").TryLock,
			func(ctx context.Context) (*dlock.Lease, error) { return plain.Semaphore("a", 1).TryAcquire(ctx, 1) },
		} {
			l, err := m(ctx)
			if err != nil {
				t.Fatalf("after the refused acquires: %v", err)
			}
			_ = l.Unlock(ctx)
		}
	})

	t.Run("renewal not acknowledged: the lease is lost", func(t *testing.T) {
		t.Parallel()
		primary, rs := replicated(t, 1)
		// A healthy replica acknowledges within the WAIT's timeout also on
		// a loaded machine.
		c := clientOn(t, primary.Client(t), dlock.WithWaitReplicas(1, 250*time.Millisecond))
		const ttl = 1500 * time.Millisecond
		l, err := c.Mutex("r", dlock.WithTTL(ttl)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done():
			t.Fatalf("lost with its replica healthy: %v", l.Err())
		case <-time.After(2 * ttl):
		}
		pause(t, rs[0])
		select {
		case <-l.Done():
		case <-time.After(10 * ttl):
			t.Fatal("the lease survived renewals its replica never acknowledged")
		}
		if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) || !errors.Is(err, dlock.ErrNotReplicated) {
			t.Errorf("Err = %v; want ErrLockLost and ErrNotReplicated", err)
		}
	})

	t.Run("Extend and re-entry", func(t *testing.T) {
		t.Parallel()
		primary, rs := replicated(t, 1)
		rdb := primary.Client(t)
		c := clientOn(t, rdb, dlock.WithWaitReplicas(1, time.Second))
		m := c.Mutex("e", dlock.WithTTL(5*time.Second))
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		resume := pause(t, rs[0])
		if err := l.Extend(ctx, 10*time.Second); !errors.Is(err, dlock.ErrNotReplicated) {
			t.Errorf("Extend with the replica paused: %v; want ErrNotReplicated", err)
		}
		lctx, cancel := l.Context(ctx)
		_, err = m.Lock(lctx)
		cancel()
		notReplicated(t, "re-entering Lock", err)
		resume()
		// The refused re-entry gave its hold back: one Unlock frees the lock.
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := freedErr(rdb, "dlock:{e}", 10*time.Second); err != nil {
			t.Errorf("the lock is not free after its only hold was unlocked: %v", err)
		}
	})

	t.Run("lost reply", func(t *testing.T) {
		t.Parallel()
		primary, _ := replicated(t, 1)
		p := faultproxy.Start(t, primary.Addr)
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		c := clientOn(t, rdb, dlock.WithWaitReplicas(1, time.Second))
		loadScripts(t, rdb)
		in := dropOnce(t, p, "acquire")
		l, err := c.Mutex("x").TryLock(ctx)
		checkHit(t, in)
		if err != nil {
			t.Fatalf("TryLock whose reply was lost: %v", err)
		}
		in = dropOnce(t, p, "extend")
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Errorf("Extend whose reply was lost: %v", err)
		}
		checkHit(t, in)
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
		if err := freedErr(primary.Client(t), "dlock:{x}", 5*time.Second); err != nil {
			t.Errorf("the lock outlived its only Unlock: %v", err)
		}
	})

	t.Run("lost reply, replica paused", func(t *testing.T) {
		t.Parallel()
		// The retried acquire finds its grant made and changes nothing
		// else; its WAIT must still cover the grant's first run. Redis 7.0
		// sets a connection's write offset after every command, so there
		// the retry's WAIT covers it anyway; later servers set it only after
		// a command that wrote, which is why the scripts touch the hold's
		// expiry on that path.
		primary, rs := replicated(t, 1)
		p := faultproxy.Start(t, primary.Addr)
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		c := clientOn(t, rdb, dlock.WithWaitReplicas(1, time.Second))
		loadScripts(t, rdb)
		caughtUp(t, primary)
		pause(t, rs[0])
		for _, tc := range []struct {
			what string
			try  func(context.Context) (func(context.Context) error, error)
		}{
			{"Mutex", leaseOf(c.Mutex("a").TryLock)},
			{"FairMutex", leaseOf(c.FairMutex("a").TryLock)},
			{"RWMutex.RLock", leaseOf(c.RWMutex("a").TryRLock)},
			{"RWMutex.Lock", leaseOf(c.RWMutex("b").TryLock)},
			{"Semaphore", leaseOf(func(ctx context.Context) (*dlock.Lease, error) { return c.Semaphore("a", 1).TryAcquire(ctx, 1) })},
		} {
			in := p.Inject(faultproxy.Rule{Match: faultproxy.CommandIs("EVALSHA"), Fault: faultproxy.DropReply, Times: 1})
			unlock, err := tc.try(ctx)
			checkHit(t, in)
			if err == nil {
				t.Errorf("%s: granted with its replica paused, after a lost reply", tc.what)
				_ = unlock(ctx)
				continue
			}
			notReplicated(t, tc.what, err)
		}
	})

	t.Run("Check counts the replicas", func(t *testing.T) {
		t.Parallel()
		primary, _ := replicated(t, 1)
		c := clientOn(t, primary.Client(t), dlock.WithWaitReplicas(2, time.Second))
		if err := c.Check(ctx); err == nil || !strings.Contains(err.Error(), "has 1 connected") {
			t.Errorf("Check with 1 of 2 replicas: %v", err)
		}
	})
}

// leaseOf adapts an acquire that returns a Lease.
func leaseOf(acquire func(context.Context) (*dlock.Lease, error)) func(context.Context) (func(context.Context) error, error) {
	return func(ctx context.Context) (func(context.Context) error, error) {
		l, err := acquire(ctx)
		if err != nil {
			return nil, err
		}
		return l.Unlock, nil
	}
}

// TestWaitReplicasOptions: WithWaitReplicas's bad settings are New's clear
// errors.
func TestWaitReplicasOptions(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	for _, tc := range []struct {
		rdb  redis.UniversalClient
		n    int
		d    time.Duration
		want string
	}{
		{rdb, -1, time.Second, "must not be negative"},
		{rdb, 1, 0, "must be positive"},
		{rdb, 1, 3 * time.Second, "at most half the Redis client's ReadTimeout (5s)"},
		{ring, 1, time.Second, "*redis.Ring"},
	} {
		c, err := dlock.New(tc.rdb, dlock.WithWaitReplicas(tc.n, tc.d))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with WithWaitReplicas(%d, %v) on a %T: %v; want an error saying %q", tc.n, tc.d, tc.rdb, err, tc.want)
		}
		if c != nil {
			_ = c.Close()
		}
	}
	c, err := dlock.New(rdb, dlock.WithWaitReplicas(0, 0))
	if err != nil {
		t.Fatalf("WithWaitReplicas(0, 0), WAIT off: %v", err)
	}
	_ = c.Close()
	if _, err := dlock.New(rdb); err != nil {
		t.Fatal(err)
	}
	m := clientOn(t, rdb).Mutex("x", dlock.WithWaitReplicas(1, time.Second))
	if _, err := m.TryLock(context.Background()); err == nil || !strings.Contains(err.Error(), "applies to a Client only") {
		t.Errorf("WithWaitReplicas on a Mutex: %v", err)
	}
}
