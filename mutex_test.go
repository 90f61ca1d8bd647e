package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// newClient starts a private redis-server and returns a dlock Client on it,
// closed when the test ends, with the raw go-redis client for inspection.
func newClient(t *testing.T, opts ...dlock.Option) (*dlock.Client, *redis.Client, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	return clientOn(t, rdb, opts...), rdb, srv
}

// stateKeys returns the keys matching pattern, but the Clients' records
// (clientRecord).
func stateKeys(rdb *redis.Client, pattern string) []string {
	var keys []string
	for _, k := range rdb.Keys(context.Background(), pattern).Val() {
		if !clientRecord(k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// clientOn returns a dlock Client on rdb, closed when the test ends.
func clientOn(t testing.TB, rdb redis.UniversalClient, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

func TestLockUnlock(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	m := c.Mutex("orders")
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if s := readLock(t, rdb, "dlock:{orders}"); !s.Held() || s.Owner != l.Owner() || s.Holds != 1 || s.Fence != l.Fence() {
		t.Fatalf("lock state = %+v, want held once by %s with fence %d", s, l.Owner(), l.Fence())
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held lock: %v, want ErrNotAcquired", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := freedErr(rdb, "dlock:{orders}", dlock.DefaultTTL); err != nil {
		t.Fatalf("lock not freed by Unlock: %v", err)
	}
	select {
	case <-l.Done():
	case <-time.After(time.Second):
		t.Fatal("Done not closed after Unlock")
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
}

// within waits until cond holds or d passes, and reports whether it held.
func within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cond()
}

func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func TestClosed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held, err := c.Mutex("held").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := clientOn(t, rdb)
	blocker, err := other.Mutex("busy").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() {
		_, err := c.Mutex("busy").Lock(ctx)
		waitErr <- err
	}()
	time.Sleep(100 * time.Millisecond) // let it start waiting

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-waitErr; !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("waiting Lock after Close: %v, want ErrClosed", err)
	}
	if !closedWithin(held.Done(), time.Second) || !errors.Is(held.Err(), dlock.ErrClosed) {
		t.Errorf("held lease after Close: Err %v, want ErrClosed", held.Err())
	}
	if err := freedErr(rdb, "dlock:{held}", dlock.DefaultTTL); err != nil {
		t.Errorf("Close left its lock in Redis: %v", err)
	}
	if _, err := c.Mutex("held").Lock(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Lock after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Mutex("held").TryLock(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryLock after Close: %v, want ErrClosed", err)
	}
	if err := held.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock after Close: %v, want ErrNotHeld", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := blocker.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestKeyLayout: every key of a lock shares one hash tag, whatever bytes the
// name holds, and distinct names never share keys.
func TestKeyLayout(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t, dlock.WithPrefix("app:"))
	ctx := context.Background()
	names := []string{"plain", "a{b}c", "}{", "{", "%7B", "50%", "\x00\xff bytes", "空"}
	seen := map[string]string{}
	for _, name := range names {
		l, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			t.Fatalf("Lock(%q): %v", name, err)
		}
		keys := stateKeys(rdb, "*")
		var tags []string
		for _, k := range keys {
			if !strings.HasPrefix(k, "app:{") {
				t.Errorf("key %q lacks the prefix", k)
			}
			open, end := strings.IndexByte(k, '{'), strings.IndexByte(k, '}')
			if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 || end < open {
				t.Errorf("key %q does not hold exactly one hash tag", k)
				continue
			}
			tags = append(tags, k[open:end+1])
		}
		// One key, the lock's state (its fence in it), held by l.
		if len(keys) != 1 || len(tags) != 1 {
			t.Errorf("name %q: keys %q, want the lock's state alone, with one hash tag", name, keys)
		} else if s := readLock(t, rdb, keys[0]); !s.Held() || s.Owner != l.Owner() {
			t.Errorf("name %q: key %q holds %+v, want the lock held by %s", name, keys[0], s, l.Owner())
		} else if prev, dup := seen[tags[0]]; dup {
			t.Errorf("names %q and %q share the hash tag %s", prev, name, tags[0])
		} else {
			seen[tags[0]] = name
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		rdb.FlushAll(ctx)
	}
}

// TestFence: fences rise strictly across holders, Clients, release (the lock
// key stays, free, with its fence), expiry and the lock key's deletion; a
// re-entry has its hold's fence.
func TestFence(t *testing.T) {
	t.Parallel()
	c1, rdb, _ := newClient(t)
	c2 := clientOn(t, rdb)
	ctx := context.Background()
	var last int64
	next := func(c *dlock.Client, opts ...dlock.Option) *dlock.Lease {
		t.Helper()
		l, err := c.Mutex("f", opts...).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("fence %d after %d", l.Fence(), last)
		}
		last = l.Fence()
		return l
	}
	for i := range 5 {
		l := next([]*dlock.Client{c1, c2}[i%2])
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A lease that expires: the next holder still gets a higher fence.
	l := next(c1, dlock.WithTTL(dlock.MinTTL), dlock.WithoutRenewal())
	if !closedWithin(l.Done(), time.Second) {
		t.Fatal("fixed lease did not end")
	}
	l = next(c2)
	lctx, cancel := l.Context(ctx)
	defer cancel()
	inner, err := c2.Mutex("f").Lock(lctx)
	if err != nil {
		t.Fatal(err)
	}
	if inner.Fence() != l.Fence() {
		t.Errorf("re-entry fence %d, want the hold's %d", inner.Fence(), l.Fence())
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Freed, the lock keeps its last fence until the released lease would
	// have ended.
	if err := freedErr(rdb, "dlock:{f}", dlock.DefaultTTL); err != nil {
		t.Fatalf("lock not freed: %v", err)
	}
	if s := readLock(t, rdb, "dlock:{f}"); s.Exists && s.Fence != l.Fence() {
		t.Fatalf("freed lock's fence %d, want the last holder's %d", s.Fence, l.Fence())
	}
	// Without the key (it expired, or Redis lost it) the next fence is still
	// above the last.
	rdb.Del(ctx, "dlock:{f}")
	next(c1).Unlock(ctx)
}

// TestReleaseNeverFreesAnother: a release by a former holder leaves the
// current holder's lock alone, and tells "another owner" apart from "expired".
func TestReleaseNeverFreesAnother(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		steal func(t *testing.T, l *dlock.Lease)
	}{
		// Another owner holds the lock, its fence left at ours (a later
		// fence would say that the lock went on from our hold: a retried
		// release's answer).
		{"held by another", func(t *testing.T, l *dlock.Lease) {
			if err := writeLock(ctx, rdb, "dlock:{r}", "intruder", l.Fence(), time.Minute); err != nil {
				t.Fatal(err)
			}
		}},
		// An expiry, or a loss, takes the fence with the lock: they are one
		// key.
		{"expired", func(*testing.T, *dlock.Lease) { rdb.Del(ctx, "dlock:{r}") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := c.Mutex("r").Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			tc.steal(t, l)
			err = l.Unlock(ctx)
			if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("Unlock of a taken lock: %v, want ErrNotHeld and ErrLockLost", err)
			}
			// Before the lease's deadline, a lock gone from Redis was lost
			// with its keys, not expired.
			if want := map[bool]string{true: "held by another owner", false: "gone from Redis"}[tc.name == "held by another"]; !strings.Contains(err.Error(), want) {
				t.Errorf("Unlock error %q does not say %q", err, want)
			}
			if s := readLock(t, rdb, "dlock:{r}"); tc.name == "held by another" && (!s.Held() || s.Owner != "intruder" || s.Holds != 1 || s.Fence != l.Fence()) {
				t.Errorf("Unlock changed the other owner's lock: %+v", s)
			}
			// The release writes the free state before it reads what it
			// replaced: it must put back the other owner's expiry with its
			// state, and leave no key where it found none.
			switch p := rdb.PTTL(ctx, "dlock:{r}").Val(); {
			case tc.name == "held by another" && (p <= 50*time.Second || p > time.Minute):
				t.Errorf("the other owner's lock lapses in %v after the Unlock, want its own minute", p)
			case tc.name == "expired" && p != -2:
				t.Errorf("Unlock of an expired lock left its key (PTTL %v)", p)
			}
			if !errors.Is(l.Err(), dlock.ErrLockLost) {
				t.Errorf("Err after the loss: %v", l.Err())
			}
			rdb.Del(ctx, "dlock:{r}")
		})
	}
}

func TestRenewal(t *testing.T) {
	t.Parallel()
	var extended atomic.Int64
	c, rdb, _ := newClient(t, dlock.WithHooks(dlock.Hooks{Extended: func(context.Context, dlock.LockInfo, int64) { extended.Add(1) }}))
	ctx := context.Background()
	ttl := 300 * time.Millisecond
	l, err := c.Mutex("renewed", dlock.WithTTL(ttl)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * ttl)
	if l.Err() != nil {
		t.Fatalf("lease lost while renewed: %v", l.Err())
	}
	left, err := l.TTL(ctx)
	if err != nil || left <= 0 || left > ttl {
		t.Fatalf("TTL = %v, %v; want in (0, %v]", left, err, ttl)
	}
	// Renewed every TTL/3, or up to TTL/6 early: 4 TTLs hold 6 to 24 renewals.
	if n := extended.Load(); n < 6 || n > 24 {
		t.Errorf("%d renewals in 4 TTLs, want about 12", n)
	}
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if left, _ := l.TTL(ctx); left < 9*time.Second {
		t.Errorf("TTL after Extend(10s) = %v", left)
	}
	time.Sleep(ttl) // renewals now keep the extended TTL
	if left, _ := l.TTL(ctx); left < 9*time.Second {
		t.Errorf("TTL after a renewal that followed Extend(10s) = %v", left)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	n := extended.Load()
	time.Sleep(ttl)
	if extended.Load() != n {
		t.Error("renewal went on after Unlock")
	}
	// The lease was last set to 10s: the freed lock lives no longer.
	if err := freedErr(rdb, "dlock:{renewed}", 10*time.Second); err != nil {
		t.Errorf("lock not freed by Unlock: %v", err)
	}
}

// TestLossSeenPromptly: when another owner takes the lock, the holder's Done
// closes within one renewal period, and so does the context derived from it.
func TestLossSeenPromptly(t *testing.T) {
	t.Parallel()
	var lost atomic.Int64
	c, rdb, _ := newClient(t, dlock.WithHooks(dlock.Hooks{Lost: func(context.Context, dlock.LockInfo, int64, error) { lost.Add(1) }}))
	ctx := context.Background()
	ttl := 600 * time.Millisecond
	l, err := c.Mutex("lost", dlock.WithTTL(ttl)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := l.Context(ctx)
	defer cancel()
	taken := time.Now()
	if err := writeLock(ctx, rdb, "dlock:{lost}", "intruder", l.Fence()+1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(l.Done(), ttl/3+200*time.Millisecond) {
		t.Fatal("Done not closed within a renewal period of the takeover")
	}
	t.Logf("loss seen %v after the takeover", time.Since(taken))
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost", l.Err())
	}
	if !closedWithin(lctx.Done(), time.Second) || !errors.Is(context.Cause(lctx), dlock.ErrLockLost) {
		t.Errorf("derived context: cause %v, want ErrLockLost", context.Cause(lctx))
	}
	// Hooks run off the renewer's goroutine: the Lost hook may run a moment
	// after Done closes.
	if !within(time.Second, func() bool { return lost.Load() == 1 }) || lost.Load() != 1 {
		t.Errorf("Lost hook called %d times, want 1", lost.Load())
	}
	if _, err := c.Mutex("lost").Lock(lctx); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("re-entry with a lost lease's context: %v, want ErrNotAcquired and ErrLockLost", err)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after loss: %v, want ErrNotHeld", err)
	}
	if s := readLock(t, rdb, "dlock:{lost}"); !s.Held() || s.Owner != "intruder" || s.Holds != 1 || s.Fence != l.Fence()+1 {
		t.Errorf("the loser changed the new owner's lock: %+v", s)
	}
}

// TestRedisStalled: with Redis stopped, renewal cannot succeed; the lease is
// lost at its local deadline, not later.
func TestRedisStalled(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	var failed atomic.Int64
	c := clientOn(t, rdb, dlock.WithHooks(dlock.Hooks{ExtendFailed: func(context.Context, dlock.LockInfo, int64, error) { failed.Add(1) }}))
	ctx := context.Background()
	ttl := 500 * time.Millisecond
	l, err := c.Mutex("stalled", dlock.WithTTL(ttl)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	gotLoss := closedWithin(l.Done(), ttl+200*time.Millisecond)
	took := time.Since(paused)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if !gotLoss {
		t.Fatalf("lease not lost %v after Redis stopped (TTL %v)", took, ttl)
	}
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Errorf("Err = %v", l.Err())
	}
	t.Logf("lost %v after Redis stopped: %v", took, l.Err())
}

func TestFixedLease(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	ttl := 200 * time.Millisecond
	start := time.Now()
	l, err := c.Mutex("fixed", dlock.WithTTL(ttl), dlock.WithoutRenewal()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !closedWithin(l.Done(), 2*ttl) {
		t.Fatal("fixed lease did not end")
	}
	if took := time.Since(start); took < ttl-drift(ttl) {
		t.Errorf("fixed lease ended after %v, before its TTL %v", took, ttl)
	}
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost", l.Err())
	}
	if !within(time.Second, func() bool { return rdb.Exists(ctx, "dlock:{fixed}").Val() == 0 }) {
		t.Error("fixed lease's key did not expire")
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Unlock after the fixed lease ran out: %v", err)
	}
	// Extend gives a fixed lease more time.
	l, err = c.Mutex("fixed", dlock.WithTTL(ttl), dlock.WithoutRenewal()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if closedWithin(l.Done(), 2*ttl) {
		t.Fatal("extended fixed lease ended early")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// TestMinTTLRenewed: a lease of the smallest TTL is kept alive by renewal for
// many times its TTL.
func TestMinTTLRenewed(t *testing.T) {
	// Not parallel: it runs before the parallel tests start, alone, for
	// what it checks is timing the rest of the suite would disturb.
	c, _, _ := newClient(t)
	ctx := context.Background()
	l, err := c.Mutex("min", dlock.WithTTL(dlock.MinTTL)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if closedWithin(l.Done(), 20*dlock.MinTTL) {
		t.Fatalf("lease of TTL %v lost while renewed: %v", dlock.MinTTL, l.Err())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
