package dlock_test

// Faults between the client and Redis, injected by a RESP-aware proxy in
// front of a real redis-server: lost replies that go-redis retries, late
// replies, refused connections and a half-open pub/sub connection.

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

// script matches the requests that run the dlock script op.
func script(op string) faultproxy.Match { return faultproxy.ScriptSHA(dlock.ScriptHash(op)) }

// TestRetriedAcquire: an acquire whose reply is lost runs again (go-redis
// retries it); the retry answers the same hold and fence, so TryLock and Lock
// succeed at once, Redis holds exactly one hold, and nothing is left behind
// after Unlock.
func TestRetriedAcquire(t *testing.T) {
	t.Parallel()
	type kind struct {
		name, acquire, prefix string
		state                 bool // its lock is a state string, not a hash and a fence key
		lock                  func(c *dlock.Client, wait bool) (*dlock.Lease, error)
	}
	ctx := context.Background()
	kinds := []kind{
		{"Mutex", "acquire", "dlock:", true, func(c *dlock.Client, wait bool) (*dlock.Lease, error) {
			if wait {
				return c.Mutex("x", dlock.WithTTL(10*time.Second)).Lock(ctx)
			}
			return c.Mutex("x").TryLock(ctx)
		}},
		{"FairMutex", "acquire", "dlock:fair:", true, func(c *dlock.Client, wait bool) (*dlock.Lease, error) {
			if wait {
				return c.FairMutex("x", dlock.WithTTL(10*time.Second)).Lock(ctx)
			}
			return c.FairMutex("x").TryLock(ctx)
		}},
		{"RWMutex", "rw_acquire", "dlock:rw:", false, func(c *dlock.Client, wait bool) (*dlock.Lease, error) {
			if wait {
				return c.RWMutex("x", dlock.WithTTL(10*time.Second)).Lock(ctx)
			}
			return c.RWMutex("x").TryLock(ctx)
		}},
	}
	for _, k := range kinds {
		for _, wait := range []bool{false, true} {
			t.Run(k.name+map[bool]string{false: "/TryLock", true: "/Lock"}[wait], func(t *testing.T) {
				c, p, rdb := proxied(t)
				in := dropOnce(t, p, k.acquire)
				start := time.Now()
				l, err := k.lock(c, wait)
				checkHit(t, in)
				if err != nil {
					t.Fatalf("acquire whose reply was lost: %v", err)
				}
				if took := time.Since(start); took > time.Second {
					t.Errorf("acquire took %v: it waited on its own hold", took)
				}
				lock := k.prefix + "{x}"
				if k.state {
					// One holder, the lease's, with one hold and its fence.
					s := readLock(t, rdb, lock)
					if !s.Held() || s.Owner != l.Owner() || s.Holds != 1 {
						t.Errorf("lock state %+v, want held by %s alone, once", s, l.Owner())
					}
					if s.Fence != l.Fence() {
						t.Errorf("fence %d, Redis's last fence %d", l.Fence(), s.Fence)
					}
					if err := l.Unlock(ctx); err != nil {
						t.Fatalf("Unlock: %v", err)
					}
					// Free, and nothing left past the lease.
					lease := map[bool]time.Duration{false: dlock.DefaultTTL, true: 10 * time.Second}[wait]
					if err := freedErr(rdb, lock, lease); err != nil {
						t.Errorf("after Unlock: %v", err)
					}
					return
				}
				if h := rdb.HGetAll(ctx, lock).Val(); len(h) != 1 {
					t.Errorf("lock hash %v, want one holder", h)
				} else {
					for _, n := range h {
						if n != "1" {
							t.Errorf("hold count %s in Redis, want 1", n)
						}
					}
				}
				if f := rdb.Get(ctx, lock+":fence").Val(); f != strconv.FormatInt(l.Fence(), 10) {
					t.Errorf("fence %d, Redis's last fence %s", l.Fence(), f)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatalf("Unlock: %v", err)
				}
				if n := rdb.Exists(ctx, lock).Val(); n != 0 {
					t.Errorf("lock still held after Unlock")
				}
			})
		}
	}

	t.Run("RWMutex/RLock", func(t *testing.T) {
		c, p, rdb := proxied(t)
		in := dropOnce(t, p, "rw_acquire")
		l, err := c.RWMutex("x").TryRLock(ctx)
		checkHit(t, in)
		if err != nil {
			t.Fatalf("TryRLock whose reply was lost: %v", err)
		}
		readers := rdb.ZRange(ctx, "dlock:rw:{x}:readers", 0, -1).Val()
		if len(readers) != 1 {
			t.Fatalf("read holds in Redis: %v, want 1", readers)
		}
		if f := rdb.HGet(ctx, "dlock:rw:{x}:fences", readers[0]).Val(); f != strconv.FormatInt(l.Fence(), 10) {
			t.Errorf("fence %d, Redis holds %q for the reader", l.Fence(), f)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		if n := rdb.Exists(ctx, "dlock:rw:{x}:readers").Val(); n != 0 {
			t.Error("read hold left after Unlock")
		}
	})
}

// TestRetriedSemaphoreAcquire: a Semaphore acquisition whose reply is lost
// counts its permits once: while held, the others are available; after
// Release, all of them are, for good.
func TestRetriedSemaphoreAcquire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, _ := proxied(t)
	s := c.Semaphore("s", 3)
	in := dropOnce(t, p, "sem_acquire")
	l, err := s.TryAcquire(ctx, 2)
	checkHit(t, in)
	if err != nil {
		t.Fatalf("TryAcquire whose reply was lost: %v", err)
	}
	if n, err := s.Available(ctx); err != nil || n != 1 {
		t.Errorf("Available while 2 of 3 are held: %d, %v; want 1", n, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if n, err := s.Available(ctx); err != nil || n != 3 {
		t.Errorf("Available after Release: %d, %v; want 3", n, err)
	}
	l, err = s.TryAcquire(ctx, 3)
	if err != nil {
		t.Fatalf("TryAcquire of every permit after Release: %v", err)
	}
	l.Release(ctx)
}

// TestRetriedRelease: a release whose reply is lost runs again; the retry
// recognises, from the lock's own keys, that the lock went on from this hold,
// and Unlock, answered before the lease's deadline, reports success, for
// every kind.
func TestRetriedRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name, release string
		lock          func(c *dlock.Client) (*dlock.Lease, error)
	}{
		{"Mutex", "release", func(c *dlock.Client) (*dlock.Lease, error) { return c.Mutex("x").Lock(ctx) }},
		{"FairMutex", "release", func(c *dlock.Client) (*dlock.Lease, error) { return c.FairMutex("x").Lock(ctx) }},
		{"RWMutex/write", "rw_release", func(c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex("x").Lock(ctx) }},
		{"RWMutex/read", "rw_release", func(c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex("x").RLock(ctx) }},
		{"Semaphore", "sem_release", func(c *dlock.Client) (*dlock.Lease, error) { return c.Semaphore("x", 2).Acquire(ctx, 1) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, p, rdb := proxied(t)
			l, err := tc.lock(c)
			if err != nil {
				t.Fatal(err)
			}
			in := dropOnce(t, p, tc.release)
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("Unlock whose reply was lost: %v", err)
			}
			checkHit(t, in)
			if !errors.Is(l.Err(), dlock.ErrNotHeld) || errors.Is(l.Err(), dlock.ErrLockLost) {
				t.Errorf("after Unlock: Err %v, want unlocked", l.Err())
			}
			if keys := stateKeys(rdb, "dlock:*"); len(keys) > 2 {
				t.Errorf("keys left: %v", keys)
			}
		})
	}
}

// TestRetriedReentry: re-entry and the partial release whose replies are lost
// leave Redis's hold count exact.
func TestRetriedReentry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, rdb := proxied(t)
	m := c.Mutex("x")
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := l.Context(ctx)
	defer cancel()
	in := dropOnce(t, p, "acquire")
	inner, err := m.Lock(lctx)
	checkHit(t, in)
	if err != nil {
		t.Fatalf("re-entry whose reply was lost: %v", err)
	}
	if inner.Fence() != l.Fence() {
		t.Errorf("re-entry's fence %d, want the hold's %d", inner.Fence(), l.Fence())
	}
	// count returns the lease's hold count in Redis, -1 if it holds
	// nothing there.
	count := func() int {
		if s := readLock(t, rdb, "dlock:{x}"); s.Held() && s.Owner == l.Owner() {
			return s.Holds
		}
		return -1
	}
	if n := count(); n != 2 {
		t.Errorf("hold count %d after one re-entry, want 2", n)
	}
	in = dropOnce(t, p, "release")
	if err := inner.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the re-entry: %v", err)
	}
	checkHit(t, in)
	if n := count(); n != 1 {
		t.Errorf("hold count %d after the re-entry's Unlock, want 1", n)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := freedErr(rdb, "dlock:{x}", dlock.DefaultTTL); err != nil {
		t.Errorf("after the last Unlock: %v", err)
	}
}

// TestRetriedRenewal: renewals whose replies are lost keep the lease.
func TestRetriedRenewal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, rdb := proxied(t)
	in := p.Inject(faultproxy.Rule{Match: script("extend"), Fault: faultproxy.DropReply, Times: 3})
	l, err := c.Mutex("x", dlock.WithTTL(900*time.Millisecond)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if in.Hits() != 3 {
		t.Fatalf("%d renewals lost, want 3", in.Hits())
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost: %v", err)
	}
	if left := leaseLeft(t, rdb, "dlock:{x}", l.Owner()); left <= 0 {
		t.Errorf("lease left in Redis: %v (state %+v)", left, readLock(t, rdb, "dlock:{x}"))
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRetriedLatch: a TrySetCount, CountDown or Delete whose reply is lost
// runs again (go-redis retries it); the retry counts nothing twice and
// answers as the first run did, the CountDown that opened the latch
// included.
func TestRetriedLatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, _ := proxied(t)
	l := c.CountDownLatch("x")
	count := func(want int64) {
		t.Helper()
		if n, err := l.Count(ctx); err != nil || n != want {
			t.Fatalf("count %d, %v; want %d", n, err, want)
		}
	}
	in := dropOnce(t, p, "latch")
	if ok, err := l.TrySetCount(ctx, 3); err != nil || !ok {
		t.Fatalf("TrySetCount whose reply was lost: %v, %v; want it set", ok, err)
	}
	checkHit(t, in)
	count(3)
	for want := int64(2); want >= 0; want-- {
		in = dropOnce(t, p, "latch")
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
		checkHit(t, in)
		count(want)
	}
	if err := l.Wait(ctx); err != nil {
		t.Fatalf("Wait after the last CountDown: %v", err)
	}
	if ok, err := l.TrySetCount(ctx, 2); err != nil || !ok {
		t.Fatalf("TrySetCount of the open latch: %v, %v", ok, err)
	}
	for _, want := range []bool{true, false} {
		in = dropOnce(t, p, "latch")
		if ok, err := l.Delete(ctx); err != nil || ok != want {
			t.Fatalf("Delete whose reply was lost: %v, %v; want %v", ok, err, want)
		}
		checkHit(t, in)
		count(0)
	}
}

// retryLate loses the reply to the next run of op and holds its retry back
// for a second before Redis gets it. held is closed once the retry is held,
// so that the test can change the latch or semaphore meanwhile; check fails
// the test if either fault did not apply.
func retryLate(t *testing.T, p *faultproxy.Proxy, op string) (held <-chan struct{}, check func()) {
	t.Helper()
	drop := dropOnce(t, p, op)
	late := p.Inject(faultproxy.Rule{Match: script(op), Fault: faultproxy.DelayRequest, Delay: time.Second, Times: 1})
	return late.Hit(), func() {
		t.Helper()
		checkHit(t, drop)
		checkHit(t, late)
	}
}

// TestRetriedLatchLate: the retry of a latch call that runs after others
// changed the latch still counts nothing twice and answers as the first run
// did: a CountDown after the latch opened and was armed again, a TrySetCount
// after the latch it armed opened, a Delete after the latch was armed again.
func TestRetriedLatchLate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		set       int64                                       // the count armed first, by the other Client
		call      func(l *dlock.CountDownLatch) (bool, error) // the call whose retry runs late
		meanwhile func(l *dlock.CountDownLatch) error         // the other Client's calls before the retry
		want      bool                                        // what call answers
		count     int64                                       // the count after the retry
	}{
		{"CountDown", 2, func(l *dlock.CountDownLatch) (bool, error) { return true, l.CountDown(ctx) },
			func(l *dlock.CountDownLatch) error {
				err := l.CountDown(ctx) // opens it: the late CountDown's first run counted
				_, err2 := l.TrySetCount(ctx, 2)
				return errors.Join(err, err2)
			}, true, 2},
		{"TrySetCount", 0, func(l *dlock.CountDownLatch) (bool, error) { return l.TrySetCount(ctx, 1) },
			func(l *dlock.CountDownLatch) error { return l.CountDown(ctx) }, true, 0},
		{"Delete", 1, func(l *dlock.CountDownLatch) (bool, error) { return l.Delete(ctx) },
			func(l *dlock.CountDownLatch) error {
				ok, err := l.TrySetCount(ctx, 3)
				if err == nil && !ok {
					err = errors.New("TrySetCount after the Delete did not set the count")
				}
				return err
			}, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, p, direct := proxied(t)
			other := clientOn(t, direct).CountDownLatch("x")
			if tc.set > 0 {
				if _, err := other.TrySetCount(ctx, tc.set); err != nil {
					t.Fatal(err)
				}
			}
			held, check := retryLate(t, p, "latch")
			type answer struct {
				ok  bool
				err error
			}
			got := make(chan answer, 1)
			go func() {
				ok, err := tc.call(c.CountDownLatch("x"))
				got <- answer{ok, err}
			}()
			select {
			case <-held:
			case <-time.After(5 * time.Second):
				t.Fatal("the retry was never held")
			}
			if err := tc.meanwhile(other); err != nil {
				t.Fatal(err)
			}
			a := <-got
			check()
			if a.err != nil || a.ok != tc.want {
				t.Fatalf("%s whose retry ran late: %v, %v; want %v", tc.name, a.ok, a.err, tc.want)
			}
			if n, err := other.Count(ctx); err != nil || n != tc.count {
				t.Fatalf("count after the late retry: %d, %v; want %d", n, err, tc.count)
			}
		})
	}
}

// TestRetriedSemaphoreDelete: a Semaphore's Delete whose reply is lost
// reports the total it removed, also when its retry runs after another
// Client set a new total, which stays.
func TestRetriedSemaphoreDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, rdb := proxied(t)
	s := c.Semaphore("s", 1)
	if err := s.SetPermits(ctx, 4); err != nil {
		t.Fatal(err)
	}
	in := dropOnce(t, p, "sem_release")
	if ok, err := s.Delete(ctx); err != nil || !ok {
		t.Errorf("Delete whose reply was lost: %v, %v; want the total removed", ok, err)
	}
	checkHit(t, in)
	if rdb.Exists(ctx, "dlock:sem:{s}:total").Val() != 0 {
		t.Error("total left after Delete")
	}

	if err := s.SetPermits(ctx, 4); err != nil {
		t.Fatal(err)
	}
	held, check := retryLate(t, p, "sem_release")
	got := make(chan error, 1)
	go func() {
		ok, err := s.Delete(ctx)
		if err == nil && !ok {
			err = errors.New("no total removed")
		}
		got <- err
	}()
	<-held
	if err := clientOn(t, rdb).Semaphore("s", 1).SetPermits(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Errorf("Delete whose retry ran after a new total was set: %v", err)
	}
	check()
	if n, err := rdb.Get(ctx, "dlock:sem:{s}:total").Int64(); err != nil || n != 7 {
		t.Errorf("total after the late retry: %d, %v; want the new total, 7", n, err)
	}
}

// TestFenceAcrossRestart: a Redis restarted without persistence forgets the
// last fence, and still hands out higher ones.
func TestFenceAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	c := clientOn(t, srv.Client(t))
	kinds := []func() (*dlock.Lease, error){
		func() (*dlock.Lease, error) { return c.Mutex("x").Lock(ctx) },
		func() (*dlock.Lease, error) { return c.FairMutex("x").Lock(ctx) },
		func() (*dlock.Lease, error) { return c.RWMutex("x").RLock(ctx) },
		func() (*dlock.Lease, error) { return c.Semaphore("x", 1).Acquire(ctx, 1) },
	}
	last := make([]int64, len(kinds))
	for round := range 3 {
		for i, lock := range kinds {
			l, err := lock()
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if l.Fence() <= last[i] {
				t.Errorf("round %d, kind %d: fence %d after %d before the restart", round, i, l.Fence(), last[i])
			}
			last[i] = l.Fence()
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	}
}

// failRelease makes every attempt of the next Unlock's release fail before it
// reaches Redis: go-redis's first run and its three retries.
func failRelease(p *faultproxy.Proxy, op string) *faultproxy.Injection {
	return p.Inject(faultproxy.Rule{Match: script(op), Fault: faultproxy.DropRequest, Times: 4})
}

// TestFailedUnlock: an Unlock that cannot reach Redis stops the renewal at
// once, ends the lease, and is retried in the background, so the lock is free
// soon after Redis is back: in a deferred Unlock, in Do, and in a MultiLock's
// rollback.
func TestFailedUnlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ttl := 3 * time.Second
	// renewedAfter counts the renewals sent from now on.
	renewedAfter := func(p *faultproxy.Proxy) *faultproxy.Injection {
		return p.Inject(faultproxy.Rule{Match: script("extend"), Fault: faultproxy.Pass})
	}
	// freedSoon waits for name's lock to be free in Redis, well within its
	// TTL: the background release, not the expiry, freed it (and left
	// nothing that outlives the lease).
	freedSoon := func(t *testing.T, rdb *redis.Client, name string) {
		t.Helper()
		key := "dlock:{" + name + "}"
		if !within(ttl/2, func() bool { return freedErr(rdb, key, ttl) == nil }) {
			t.Errorf("%q still held %v after the failed Unlock (TTL %v): %v", name, ttl/2, ttl, freedErr(rdb, key, ttl))
		}
	}

	t.Run("Unlock", func(t *testing.T) {
		c, p, rdb := proxied(t, dlock.WithTTL(ttl))
		l, err := c.Mutex("x").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		in := failRelease(p, "release")
		renewals := renewedAfter(p)
		err = l.Unlock(ctx)
		checkHit(t, in)
		if err == nil || !strings.Contains(err.Error(), `release "x"`) {
			t.Fatalf("Unlock with Redis unreachable: %v, want the Redis error", err)
		}
		if !errors.Is(l.Err(), dlock.ErrNotHeld) {
			t.Errorf("after a failed Unlock: Err %v, want unlocked", l.Err())
		}
		freedSoon(t, rdb, "x")
		time.Sleep(ttl / 2)
		if n := renewals.Hits(); n != 0 {
			t.Errorf("%d renewals after Unlock", n)
		}
		if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("second Unlock: %v, want ErrNotHeld", err)
		}
	})

	t.Run("Do", func(t *testing.T) {
		c, p, rdb := proxied(t, dlock.WithTTL(ttl))
		var in *faultproxy.Injection
		err := c.Mutex("x").Do(ctx, func(context.Context) error {
			in = failRelease(p, "release")
			return nil
		})
		checkHit(t, in)
		if err == nil {
			t.Fatal("Do with Redis unreachable at Unlock: no error")
		}
		renewals := renewedAfter(p)
		freedSoon(t, rdb, "x")
		time.Sleep(ttl / 2)
		if n := renewals.Hits(); n != 0 {
			t.Errorf("%d renewals after Do returned", n)
		}
	})

	t.Run("MultiLock rollback", func(t *testing.T) {
		c, p, rdb := proxied(t, dlock.WithTTL(ttl))
		other := clientOn(t, rdb)
		held, err := other.Mutex("b").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Unlock(ctx)
		in := failRelease(p, "release")
		renewals := renewedAfter(p)
		_, err = c.MultiLock([]string{"a", "b"}).TryLock(ctx)
		checkHit(t, in)
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock of a MultiLock with b held: %v", err)
		}
		freedSoon(t, rdb, "a")
		time.Sleep(ttl / 2)
		if n := renewals.Hits(); n != 0 {
			t.Errorf("%d renewals after the rollback", n)
		}
	})

	t.Run("Close waits for the background release", func(t *testing.T) {
		c, p, rdb := proxied(t, dlock.WithTTL(ttl))
		l, err := c.Mutex("x").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		in := p.Inject(faultproxy.Rule{Match: script("release"), Fault: faultproxy.DropRequest, Times: 4})
		if err := l.Unlock(ctx); err == nil {
			t.Fatal("Unlock with Redis unreachable: no error")
		}
		checkHit(t, in)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := freedErr(rdb, "dlock:{x}", ttl); err != nil {
			t.Errorf("after Close: %v", err)
		}
	})
}

// TestExtendRacingRenewal: Lease.Extend whose reply comes late, while a
// renewal with the old TTL is due, and two Extends at once: whatever order
// Redis runs them in and their replies come back in, the client never counts
// on more than Redis holds, so no other owner gets the lock while the lease
// looks held.
func TestExtendRacingRenewal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// noSecondHolder has another Client try the lock until deadline; if it
	// gets it, l must have ended by then.
	noSecondHolder := func(t *testing.T, rdb *redis.Client, l *dlock.Lease, d time.Duration) (taken bool) {
		t.Helper()
		other := clientOn(t, rdb)
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			if o, err := other.Mutex("x").TryLock(ctx); err == nil {
				defer o.Unlock(ctx)
				// Done closes at the local deadline, which lies ahead of
				// Redis's expiry; allow for a late timer goroutine.
				if !closedWithin(l.Done(), 100*time.Millisecond) {
					t.Errorf("another owner took the lock (fence %d) while the lease (fence %d) was still held", o.Fence(), l.Fence())
				}
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}

	t.Run("Extend and renewal", func(t *testing.T) {
		c, p, rdb := proxied(t)
		ttl := time.Second
		l, err := c.Mutex("x", dlock.WithTTL(ttl)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The renewal is due at TTL/3; Extend's reply is held past it.
		time.Sleep(ttl/3 - 50*time.Millisecond)
		in := p.Inject(faultproxy.Rule{Match: faultproxy.And(script("extend"), faultproxy.HasArg("10000")), Fault: faultproxy.DelayReply, Delay: 200 * time.Millisecond, Times: 1})
		if err := l.Extend(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		checkHit(t, in)
		if left := leaseLeft(t, rdb, "dlock:{x}", l.Owner()); left < 5*time.Second {
			t.Errorf("Redis holds the lock for %v after Extend(10s)", left)
		}
		if noSecondHolder(t, rdb, l, 2*time.Second) {
			t.Error("the lease extended to 10s was lost within 2s")
		}
		if err := l.Err(); err != nil {
			t.Errorf("lease: %v", err)
		}
	})

	t.Run("two Extends", func(t *testing.T) {
		c, p, rdb := proxied(t)
		l, err := c.Mutex("x", dlock.WithTTL(10*time.Second), dlock.WithoutRenewal()).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		in := p.Inject(faultproxy.Rule{Match: faultproxy.And(script("extend"), faultproxy.HasArg("10000")), Fault: faultproxy.DelayReply, Delay: 300 * time.Millisecond, Times: 1})
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := l.Extend(ctx, 10*time.Second); err != nil {
				t.Errorf("Extend(10s): %v", err)
			}
		})
		time.Sleep(50 * time.Millisecond)
		wg.Go(func() {
			if err := l.Extend(ctx, 300*time.Millisecond); err != nil {
				t.Errorf("Extend(300ms): %v", err)
			}
		})
		wg.Wait()
		checkHit(t, in)
		if !noSecondHolder(t, rdb, l, 2*time.Second) {
			t.Error("nobody got the lock after the lease was shortened to 300ms")
		}
	})
}

// TestCloseLeavesNoWaiter: Close wakes every waiting Lock, which leaves its
// lock's queue in Redis before Close returns.
func TestCloseLeavesNoWaiter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	holder := clientOn(t, srv.Client(t))
	type queue struct{ name, waiters, alive string }
	queues := []queue{
		{"Mutex", "dlock:{m}:waiters", ""},
		{"FairMutex", "dlock:fair:{f}:waiters", "dlock:fair:{f}:alive"},
		{"RWMutex", "dlock:rw:{r}:waiters", "dlock:rw:{r}:alive"},
		{"Semaphore", "dlock:sem:{s}:waiters", "dlock:sem:{s}:alive"},
	}
	for _, l := range []func() (*dlock.Lease, error){
		func() (*dlock.Lease, error) { return holder.Mutex("m").Lock(ctx) },
		func() (*dlock.Lease, error) { return holder.FairMutex("f").Lock(ctx) },
		func() (*dlock.Lease, error) { return holder.RWMutex("r").Lock(ctx) },
		func() (*dlock.Lease, error) { return holder.Semaphore("s", 1).Acquire(ctx, 1) },
	} {
		if _, err := l(); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 5 {
		waiter, err := dlock.New(srv.Client(t))
		if err != nil {
			t.Fatal(err)
		}
		waits := []func() (*dlock.Lease, error){
			func() (*dlock.Lease, error) { return waiter.Mutex("m").Lock(ctx) },
			func() (*dlock.Lease, error) { return waiter.FairMutex("f").Lock(ctx) },
			func() (*dlock.Lease, error) { return waiter.RWMutex("r").RLock(ctx) },
			func() (*dlock.Lease, error) { return waiter.Semaphore("s", 1).Acquire(ctx, 1) },
		}
		var wg sync.WaitGroup
		for _, w := range waits {
			wg.Go(func() {
				if _, err := w(); !errors.Is(err, dlock.ErrClosed) {
					t.Errorf("waiting Lock at Close: %v, want ErrClosed", err)
				}
			})
		}
		for _, q := range queues {
			if !within(5*time.Second, func() bool { return rdb.ZCard(ctx, q.waiters).Val() == 1 }) {
				t.Fatalf("round %d: %s waiter not registered", round, q.name)
			}
		}
		if err := waiter.Close(); err != nil {
			t.Fatal(err)
		}
		for _, q := range queues {
			if n := rdb.ZCard(ctx, q.waiters).Val(); n != 0 {
				t.Errorf("round %d: %s: %d waiters left in the queue after Close", round, q.name, n)
			}
			if q.alive != "" && rdb.HLen(ctx, q.alive).Val() != 0 {
				t.Errorf("round %d: %s: waiter's lapse time left after Close", round, q.name)
			}
		}
		wg.Wait()
	}
}

// TestSemaphoreTooLarge: a request for more permits than the total holds
// nobody up; TryAcquire says why it failed; a fresh semaphore's Available is
// its total.
func TestSemaphoreTooLarge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, _ := newClient(t)
	s := c.Semaphore("s", 2)
	if n, err := s.Available(ctx); err != nil || n != 2 {
		t.Errorf("Available of a fresh semaphore of 2: %d, %v", n, err)
	}
	if _, err := s.TryAcquire(ctx, 3); !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "more than the semaphore's total") {
		t.Errorf("TryAcquire(3) of 2: %v, want an error saying 3 is more than the total", err)
	}
	big := make(chan error, 1)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		l, err := s.Acquire(bctx, 3)
		if err == nil {
			l.Release(ctx)
		}
		big <- err
	}()
	if !within(5*time.Second, func() bool { return rdb.ZCard(ctx, "dlock:sem:{s}:waiters").Val() == 1 }) {
		t.Fatal("Acquire(3) of 2 did not queue")
	}
	l1, err := s.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatalf("TryAcquire(1) behind a waiting Acquire(3) of 2: %v", err)
	}
	actx, acancel := context.WithTimeout(ctx, time.Second)
	defer acancel()
	l2, err := s.Acquire(actx, 1)
	if err != nil {
		t.Fatalf("Acquire(1) behind a waiting Acquire(3) of 2: %v", err)
	}
	l1.Release(ctx)
	l2.Release(ctx)
	// Raising the total lets the large request in.
	if err := s.SetPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-big:
		if err != nil {
			t.Errorf("Acquire(3) after the total was raised to 3: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("Acquire(3) not served after the total was raised to 3")
	}
	if ok, err := s.Delete(ctx); err != nil || !ok {
		t.Errorf("Delete: %v, %v", ok, err)
	}
}

// TestSemaphoreLargeNotStarved: a request for every permit, behind a stream
// of small ones that keep the semaphore busy, is served once the permits
// held when it arrived come back: the small ones after it wait behind it.
func TestSemaphoreLargeNotStarved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _, _ := newClient(t)
	s := c.Semaphore("s", 2)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := s.Acquire(ctx, 1)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(20 * time.Millisecond)
				l.Release(ctx)
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	l, err := s.Acquire(actx, 2)
	if err != nil {
		t.Errorf("Acquire(2) of 2 among a stream of Acquire(1): %v", err)
	} else {
		t.Logf("Acquire(2) served after %v", time.Since(start))
		l.Release(ctx)
	}
	close(stop)
	wg.Wait()
}

// TestReentryOfEndedLease: a context that carries a lease that has ended
// (here through context.WithoutCancel, which keeps its values) re-enters
// nothing: Lock takes the free lock anew.
func TestReentryOfEndedLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _, _ := newClient(t)
	m := c.Mutex("x")
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := l.Context(ctx)
	defer cancel()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := m.Lock(context.WithoutCancel(lctx))
	if err != nil {
		t.Fatalf("Lock of a free lock with a context carrying an ended lease: %v", err)
	}
	if l2.Fence() <= l.Fence() {
		t.Errorf("fence %d after %d", l2.Fence(), l.Fence())
	}
	l2.Unlock(ctx)
}

// TestGateEvictedWhileJoined: a waiter that joins a channel while the
// notifier is letting go of it stays subscribed, and is woken by the release.
func TestGateEvictedWhileJoined(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A wait on "a" makes its gate; when it ends, the gate is let go at once
	// (no idle gates kept), and the hook has a second waiter join "a" right
	// then.
	var once sync.Once
	second := make(chan *dlock.Lease, 1)
	joined := make(chan struct{})
	var c *dlock.Client
	hook := dlock.WithUnsubscribeHook(func() {
		once.Do(func() {
			go func() {
				l, err := c.Mutex("a").Lock(ctx)
				if err != nil {
					t.Errorf("second waiter: %v", err)
				}
				second <- l
			}()
			// Give the second waiter time to make its gate and send its
			// SUBSCRIBE, if nothing holds it back.
			time.Sleep(100 * time.Millisecond)
			close(joined)
		})
	})
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	holder := clientOn(t, srv.Client(t))
	c = clientOn(t, srv.Client(t), dlock.WithMaxIdleGates(0), hook)

	l, err := holder.Mutex("a").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		// Long enough to subscribe, and so make its gate, on a loaded
		// machine (with 200ms, a CI run gave up before it had).
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := c.Mutex("a").Lock(wctx)
		first <- err
	}()
	if err := <-first; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first waiter: %v", err)
	}
	select {
	case <-joined:
	case <-time.After(5 * time.Second):
		t.Fatal("the notifier never let go of the idle channel")
	}
	channel := "dlock:{a}:wake:"
	if !within(2*time.Second, func() bool {
		for _, ch := range dlock.ReadyChannels(c) {
			if strings.HasPrefix(ch, channel) {
				return true
			}
		}
		return false
	}) {
		t.Fatal("second waiter never subscribed")
	}
	time.Sleep(50 * time.Millisecond)
	for _, ch := range dlock.ReadyChannels(c) {
		if n := rdb.PubSubShardNumSub(ctx, ch).Val()[ch]; n == 0 {
			t.Errorf("the Client believes it is subscribed to %s; Redis has no subscriber", ch)
		}
	}
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l2 := <-second:
		if took := time.Since(released); took > time.Second {
			t.Errorf("second waiter got the lock %v after the release: not woken by it", took)
		}
		if l2 != nil {
			l2.Unlock(ctx)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second waiter never got the lock")
	}
}

// TestHalfOpenWakeUpConnection: a pub/sub connection that stops answering
// without closing (a half-open connection) is found by the health check and
// replaced, so the next release still wakes its waiter at once.
func TestHalfOpenWakeUpConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, rdb := proxied(t, dlock.WithNotifierTimes(200*time.Millisecond, 200*time.Millisecond))
	holder := clientOn(t, rdb)
	l, err := holder.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		l, err := c.Mutex("x").Lock(ctx)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- time.Now()
		l.Unlock(ctx)
	}()
	if !within(5*time.Second, func() bool { return rdb.ZCard(ctx, "dlock:{x}:waiters").Val() == 1 }) {
		t.Fatal("waiter not registered")
	}
	accepted := p.Accepted()
	if n := p.BlackholePubSub(); n != 1 {
		t.Fatalf("%d pub/sub connections, want 1", n)
	}
	if !within(3*time.Second, func() bool { return p.Accepted() > accepted }) {
		t.Fatal("the silent wake-up connection was not replaced")
	}
	time.Sleep(100 * time.Millisecond) // the new connection subscribes
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		// The holder's lease is 30s and the waiter's keep-alive 5s: only the
		// message wakes it this soon.
		if took := at.Sub(released); took > time.Second {
			t.Errorf("waiter got the lock %v after the release", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter never got the lock")
	}
}

// TestSlowHookDelaysNoRenewal: an Extended hook that takes a second delays no
// renewal: leases of 600ms stay held.
func TestSlowHookDelaysNoRenewal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var slow sync.Once
	c, _, _ := newClient(t, dlock.WithHooks(dlock.Hooks{Extended: func(context.Context, dlock.LockInfo, int64) {
		slow.Do(func() { time.Sleep(time.Second) })
	}}))
	ls := make([]*dlock.Lease, 3)
	for i := range ls {
		l, err := c.Mutex("x"+strconv.Itoa(i), dlock.WithTTL(600*time.Millisecond)).Lock(ctx) // shorter than the hook's second
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	time.Sleep(1500 * time.Millisecond)
	for i, l := range ls {
		if err := l.Err(); err != nil {
			t.Errorf("lease %d behind a slow hook: %v", i, err)
		}
		l.Unlock(ctx)
	}
}

// TestRenewalStalledLearnsLoss: a holder whose lock is gone from Redis
// (deleted here, as a restart without persistence loses it) learns so from
// the renewal after, even when that renewal's reply never comes: the renewal
// is sent again after half a renewal period instead of waiting for go-redis's
// read timeout, so the loss is known about half a period later, well before
// the lease's deadline.
func TestRenewalStalledLearnsLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = time.Second
	renewed := make(chan struct{}, 1)
	c, p, rdb := proxied(t, dlock.WithTTL(ttl), dlock.WithHooks(dlock.Hooks{Extended: func(context.Context, dlock.LockInfo, int64) {
		select {
		case renewed <- struct{}{}:
		default:
		}
	}}))
	l, err := c.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	select {
	case <-renewed:
	case <-time.After(2 * ttl):
		t.Fatal("not renewed")
	}
	last := time.Now()
	in := p.Inject(faultproxy.Rule{Match: script("extend"), Fault: faultproxy.SwallowReply, Times: 1})
	if err := rdb.Del(ctx, "dlock:{x}").Err(); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(l.Done(), 2*ttl) {
		t.Fatal("the holder never learned that its lock was gone")
	}
	took := time.Since(last)
	checkHit(t, in)
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost", l.Err())
	}
	// Renewal after a third of the TTL, sent again a sixth later: about
	// half the TTL. The lease's deadline is at 99%.
	if took > 800*time.Millisecond {
		t.Errorf("the holder learned %v after its last renewal, at its lease's deadline, not from the renewal sent again", took)
	}
	t.Logf("learned %v after the last renewal: %v", took.Round(time.Millisecond), l.Err())
}

// TestRenewalLateReply: a renewal whose reply comes late (after the
// renewal was sent again, and after that one's reply) changes nothing: the
// lease stays held, in the Client and in Redis, through more periods.
func TestRenewalLateReply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = time.Second
	c, p, rdb := proxied(t, dlock.WithTTL(ttl))
	l, err := c.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in := p.Inject(faultproxy.Rule{Match: script("extend"), Fault: faultproxy.DelayReply, Delay: 600 * time.Millisecond, Times: 2})
	time.Sleep(3 * ttl)
	if in.Hits() == 0 {
		t.Fatal("no renewal delayed")
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost after late renewal replies: %v", err)
	}
	if left := leaseLeft(t, rdb, "dlock:{x}", l.Owner()); left <= 0 {
		t.Errorf("lease left in Redis: %v (state %+v)", left, readLock(t, rdb, "dlock:{x}"))
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRenewalStalledCall: a renewal call that never gets its reply (its
// connection stops answering, and go-redis waits for it for its 3 s read
// timeout, longer than the leases last) costs no lease: after half a renewal
// period its leases are renewed again on another connection, and the other
// pipelines of the same pass are renewed on time.
func TestRenewalStalledCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = time.Second
	c, p, rdb := proxied(t, dlock.WithTTL(ttl))
	const n = 150 // two pipelines of renewals: 128 and 22 leases
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		l, err := c.Mutex("s" + strconv.Itoa(i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	in := p.Inject(faultproxy.Rule{Match: script("extend"), Fault: faultproxy.SwallowReply, Times: 1})
	time.Sleep(3 * ttl)
	checkHit(t, in)
	for i, l := range leases {
		if err := l.Err(); err != nil {
			t.Errorf("lease s%d lost behind a stalled renewal call: %v", i, err)
			continue
		}
		if holderOf(t, rdb, "dlock:{s"+strconv.Itoa(i)+"}") != l.Owner() {
			t.Errorf("lease s%d held by the Client but gone from Redis", i)
		}
	}
	for _, l := range leases {
		_ = l.Unlock(ctx)
	}
}
