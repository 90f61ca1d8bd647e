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
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestRedisErrors: Redis failures come back wrapped, saying what was being
// done, never as a panic or a false success.
func TestRedisErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("connection refused", func(t *testing.T) {
		srv := redistest.Start(t)
		addr := srv.Addr
		srv.Kill()
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		c := clientOn(t, rdb)
		_, err := c.Mutex("x").Lock(ctx)
		if err == nil || !strings.Contains(err.Error(), `acquire "x"`) || !strings.Contains(err.Error(), "refused") {
			t.Errorf("Lock with Redis down: %v", err)
		}
		if errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("a Redis failure reads as contention: %v", err)
		}
	})

	t.Run("READONLY replica", func(t *testing.T) {
		master := redistest.Start(t)
		replica := redistest.Start(t, "--replicaof", "127.0.0.1", itoa(master.Port))
		c := clientOn(t, replica.Client(t))
		_, err := c.Mutex("x").TryLock(ctx)
		if err == nil || !strings.Contains(err.Error(), "READONLY") || !strings.Contains(err.Error(), `acquire "x"`) {
			t.Errorf("TryLock on a replica: %v", err)
		}
	})

	t.Run("OOM", func(t *testing.T) {
		c, rdb, _ := newClient(t)
		rdb.ConfigSet(ctx, "maxmemory", "1")
		defer rdb.ConfigSet(ctx, "maxmemory", "0")
		_, err := c.Mutex("x").TryLock(ctx)
		if err == nil || !strings.Contains(err.Error(), "OOM") {
			t.Errorf("TryLock with Redis out of memory: %v", err)
		}
		rdb.ConfigSet(ctx, "maxmemory", "0")
		if keys := stateKeys(rdb, "dlock:*"); len(keys) != 0 {
			t.Errorf("a failed acquire left %v", keys)
		}
	})

	t.Run("NOSCRIPT after SCRIPT FLUSH", func(t *testing.T) {
		c, rdb, _ := newClient(t)
		l, err := c.Mutex("x").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rdb.ScriptFlush(ctx)
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock after SCRIPT FLUSH: %v", err)
		}
		rdb.ScriptFlush(ctx)
		l, err = c.Mutex("x").Lock(ctx)
		if err != nil {
			t.Fatalf("Lock after SCRIPT FLUSH: %v", err)
		}
		l.Unlock(ctx)
	})

	t.Run("WRONGTYPE", func(t *testing.T) {
		c, rdb, _ := newClient(t)
		// A string that is no lock state, at the lock's key: the script
		// says so, and writes nothing.
		rdb.Set(ctx, "dlock:{str}", "not a lock", 0)
		_, err := c.Mutex("str").TryLock(ctx)
		if err == nil || !strings.Contains(err.Error(), "holds no lock state") || !strings.Contains(err.Error(), `acquire "str"`) {
			t.Errorf("TryLock over a foreign string key: %v", err)
		}
		if errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("a foreign key reads as contention: %v", err)
		}
		if v := rdb.Get(ctx, "dlock:{str}").Val(); v != "not a lock" {
			t.Errorf("the foreign key changed to %q", v)
		}
		// A key of another type at the lock's key: the error names it, and
		// nothing is written either (TestForeignKey has every kind).
		rdb.LPush(ctx, "dlock:{list}", "x")
		if _, err := c.Mutex("list").TryLock(ctx); err == nil || !strings.Contains(err.Error(), "key dlock:{list} holds a list") {
			t.Errorf("TryLock over a foreign list key: %v", err)
		}
		if v := rdb.LRange(ctx, "dlock:{list}", 0, -1).Val(); len(v) != 1 || v[0] != "x" {
			t.Errorf("the foreign list changed to %q", v)
		}
		if keys := stateKeys(rdb, "dlock:*"); len(keys) != 2 {
			t.Errorf("a failed acquire left keys: %v, want the two foreign keys alone", keys)
		}
		// A waiter's registration, the lock held, meets a foreign queue key.
		l, err := c.Mutex("q").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rdb.Set(ctx, "dlock:{q}:waiters", "not a queue", 0)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := c.Mutex("q").Lock(wctx); err == nil || !strings.Contains(err.Error(), "key dlock:{q}:waiters holds a string") {
			t.Errorf("Lock over a foreign queue key: %v", err)
		}
		if n := rdb.Exists(ctx, "dlock:{q}:alive").Val(); n != 0 {
			t.Error("a failed registration left an entry in the alive hash")
		}
		rdb.Del(ctx, "dlock:{q}:waiters")
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	})
}

// TestRedisRestart: a restart that loses every key makes the holder's lease
// lost (renewal finds it gone), and a waiter whose release message was lost
// with the connection still gets the lock.
func TestRedisRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := clientOn(t, rdb, dlock.WithTTL(300*time.Millisecond))
	ctx := context.Background()
	l, err := c.Mutex("r").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := clientOn(t, srv.Client(t))
	blocker, err := other.Mutex("w", dlock.WithTTL(time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	waiter := clientOn(t, srv.Client(t), dlock.WithTTL(2*time.Second)) // a lease a loaded machine renews in time
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := waiter.Mutex("w").Lock(wctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(l.Done(), 2*time.Second) {
		t.Fatal("lease not lost after Redis lost it")
	}
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Errorf("Err = %v", l.Err())
	}
	if err := <-got; err != nil {
		t.Errorf("waiter across the restart: %v", err)
	}
	_ = blocker.Unlock(ctx) // lost with the restart
}

// TestRenewalBatches: 250 held locks are renewed with one script call per 128
// locks per renewal period, by the Client's one renewal goroutine.
func TestRenewalBatches(t *testing.T) {
	t.Parallel()
	for _, bySlot := range []bool{false, true} {
		t.Run(map[bool]string{false: "one server", true: "by hash slot"}[bySlot], func(t *testing.T) {
			renewalBatches(t, bySlot)
		})
	}
}

// renewalBatches holds 250 locks for 6 renewal periods and counts the
// renewal requests: on one server, one script call (one round trip) per 128
// leases; grouped by hash slot, as on a Cluster, one script call per slot
// (here per lock), pipelined 128 leases at a time: the same round trips.
func renewalBatches(t *testing.T, bySlot bool) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	cmds := countRequests(rdb)
	// Long enough that a loaded machine's pauses lose no lease (a third of
	// it between renewals), short enough for 6 periods in 3 s.
	ttl := 1500 * time.Millisecond
	var mu sync.Mutex
	renewed := map[string]int{}
	c := clientOn(t, rdb, dlock.WithTTL(ttl), dlock.WithHooks(dlock.Hooks{Extended: func(_ context.Context, l dlock.LockInfo, _ int64) {
		mu.Lock()
		renewed[l.Name]++
		mu.Unlock()
	}}))
	if bySlot {
		dlock.GroupBySlot(c)
	}
	ctx := context.Background()
	const n = 250
	leases := make([]*dlock.Lease, n)
	for i := range leases {
		l, err := c.Mutex("b" + itoa(i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	cmds.take()
	const periods = 6
	time.Sleep(periods * ttl / 3)
	trips := int(cmds.roundTrips.Load())
	calls := int(cmds.take())
	// Every lease due within TTL/6 of the first is renewed in the same pass,
	// so about ceil(250/128) = 2 round trips per period.
	if max := periods * 2 * 3 / 2; trips > max {
		t.Errorf("%d round trips for %d locks over %d periods, want at most %d", trips, n, periods, max)
	}
	if bySlot && calls < periods/2*n {
		t.Errorf("%d script calls for %d locks over %d periods grouped by slot, want one per lock and period", calls, n, periods)
	}
	mu.Lock()
	for i := range n {
		if renewed["b"+itoa(i)] < periods/2 {
			t.Errorf("lock b%d renewed %d times in %d periods", i, renewed["b"+itoa(i)], periods)
			break
		}
	}
	mu.Unlock()
	for _, l := range leases {
		if l.Err() != nil {
			t.Fatalf("lease lost: %v", l.Err())
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d script calls in %d round trips for %d locks over %d renewal periods", calls, trips, n, periods)
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestLockHonorsContextWhileRedisStalls: with Redis stopped, a Lock returns
// when its context ends, not when the Redis client's timeouts run out. Where
// dlock waits for the request on the side, the request it left behind, which
// takes the lock once Redis resumes, releases it at once instead of leaving it
// held for a TTL.
func TestLockHonorsContextWhileRedisStalls(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		ctxTimeouts bool // the Redis client honors context deadlines itself
		opts        []dlock.Option
	}{
		{"plain", false, nil},
		{"context-timeouts", true, nil},
		{"autopipeline", false, []dlock.Option{dlock.WithAutoPipeline()}},
		{"autopipeline-context-timeouts", true, []dlock.Option{dlock.WithAutoPipeline()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 3 * time.Second, ContextTimeoutEnabled: tc.ctxTimeouts})
			t.Cleanup(func() { rdb.Close() })
			c := clientOn(t, rdb, tc.opts...)
			ctx := context.Background()
			// Warm up: scripts loaded, connections open.
			if l, err := c.Mutex("warm").Lock(ctx); err != nil {
				t.Fatal(err)
			} else if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
			const deadline = 150 * time.Millisecond
			tctx, cancel := context.WithTimeout(ctx, deadline)
			start := time.Now()
			_, err := c.Mutex("stalled").Lock(tctx)
			took := time.Since(start)
			cancel()
			if err := srv.Resume(); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Lock against a stopped Redis: %v, want ErrNotAcquired and DeadlineExceeded", err)
			}
			if limit := deadline + 250*time.Millisecond; took > limit {
				t.Fatalf("Lock returned %v after its call, %v past its %v deadline", took, took-deadline, deadline)
			}
			t.Logf("Lock gave up after %v: %v", took, err)
			if tc.ctxTimeouts && len(tc.opts) == 0 {
				// go-redis cut the request off; whether Redis still runs it
				// after resuming, and before or after the cleanup release,
				// is up to the order it serves its connections in.
				return
			}
			// The acquire left behind runs once Redis resumes, and its lock
			// is released straight away (the TTL is 30s).
			check := srv.Client(t)
			// The acquire ran: the state is there, with a fence; and it is
			// free again.
			ran := func(s lockState) bool { return s.Exists && s.Fence > 0 }
			gone := false
			for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if s := readLock(t, check, "dlock:{stalled}"); ran(s) && !s.Held() {
					gone = true
					break
				}
			}
			if s := readLock(t, check, "dlock:{stalled}"); !gone && ran(s) {
				t.Fatalf("the acquire left behind ran (fence %d) but its lock is still held: %+v", s.Fence, s)
			} else if !gone {
				t.Fatal("the acquire left behind never ran")
			}
		})
	}
}

// TestWaitRidesOutOutage: a Lock or a latch Wait that is waiting when Redis
// goes away for longer than go-redis's own retries last keeps waiting, and
// gets its lock, or its open latch, once Redis is back. A Lock whose deadline
// comes first returns by it and says why; TryLock, and a Client that never
// reached Redis, fail at once.
func TestWaitRidesOutOutage(t *testing.T) {
	t.Parallel()
	redistest.Full(t, "outages of seconds")
	ctx := context.Background()
	const outage = 1500 * time.Millisecond
	// A Redis client that gives up on a refused connection after about
	// 200ms, well within the outage (go-redis's defaults: 3s).
	quick := func(t *testing.T, srv *redistest.Server) *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DialerRetries: 1, MaxRetries: 1})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	down := func(t *testing.T, srv *redistest.Server) {
		t.Helper()
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(outage)
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("lock", func(t *testing.T) {
		srv := redistest.Start(t)
		holder := clientOn(t, quick(t, srv), dlock.WithTTL(time.Second))
		waiter := clientOn(t, quick(t, srv), dlock.WithTTL(time.Second))
		l, err := holder.Mutex("o").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			l, err := waiter.Mutex("o").Lock(wctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
		check := srv.Client(t)
		if !within(5*time.Second, func() bool { return check.ZCard(ctx, "dlock:{o}:waiters").Val() == 1 }) {
			t.Fatal("waiter not registered")
		}
		down(t, srv)
		// The restart emptied Redis: the holder is told, the waiter gets the
		// lock.
		if !closedWithin(l.Done(), 5*time.Second) {
			t.Fatal("the holder of a lock Redis lost was not told")
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("waiter across a %v outage: %v", outage, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("waiter still waiting 10s after Redis came back")
		}
	})

	t.Run("latch", func(t *testing.T) {
		srv := redistest.Start(t)
		c := clientOn(t, quick(t, srv))
		latch := c.CountDownLatch("o")
		if _, err := latch.TrySetCount(ctx, 1); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			got <- latch.Wait(wctx)
		}()
		time.Sleep(200 * time.Millisecond) // Wait has looked at the count
		down(t, srv)
		// The restart lost the count: the latch is open.
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("Wait across a %v outage: %v", outage, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Wait still waiting 10s after Redis came back")
		}
	})

	t.Run("deadline", func(t *testing.T) {
		srv := redistest.Start(t)
		c := clientOn(t, quick(t, srv))
		if l, err := c.Mutex("warm").Lock(ctx); err != nil {
			t.Fatal(err)
		} else if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		// Long enough for several attempts to be refused on a loaded
		// machine, so that the error can say what Redis said.
		const deadline = 3 * time.Second
		dctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		start := time.Now()
		_, err := c.Mutex("o").Lock(dctx)
		took := time.Since(start)
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) ||
			!strings.Contains(err.Error(), "Redis unavailable for") || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("Lock while Redis is down: %v; want ErrNotAcquired, DeadlineExceeded and what Redis said", err)
		}
		if took < deadline-100*time.Millisecond || took > deadline+500*time.Millisecond {
			t.Errorf("Lock with a %v deadline returned after %v", deadline, took)
		}
		start = time.Now()
		_, err = c.Mutex("o").TryLock(ctx)
		if err == nil || errors.Is(err, dlock.ErrNotAcquired) || time.Since(start) > time.Second {
			t.Errorf("TryLock while Redis is down: %v after %v; want the failure, at once", err, time.Since(start))
		}
	})

	t.Run("never-reached", func(t *testing.T) {
		srv := redistest.Start(t)
		rdb := quick(t, srv)
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		c := clientOn(t, rdb)
		start := time.Now()
		_, err := c.Mutex("o").Lock(ctx)
		if err == nil || errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("Lock on a Client that never reached Redis: %v", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("Lock on a Client that never reached Redis failed after %v, not at once", took)
		}
	})
}
