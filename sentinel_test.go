package dlock_test

// dlock on a Sentinel-managed primary with two replicas, formed by
// internal/redistest, through go-redis's FailoverClient. The multi-process
// hammers run here too (their "sentinel" subtests); these are the failovers.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// exclusive returns the acquire of an exclusive lock named name of every
// kind, on c.
func exclusive(c *dlock.Client, name string) map[string]func(context.Context) (*dlock.Lease, error) {
	return map[string]func(context.Context) (*dlock.Lease, error){
		"Mutex":     c.Mutex(name).Lock,
		"FairMutex": c.FairMutex(name).Lock,
		"RWMutex":   c.RWMutex(name).Lock,
		"Semaphore": func(ctx context.Context) (*dlock.Lease, error) { return c.Semaphore(name, 1).Acquire(ctx, 1) },
	}
}

// TestSentinelFailover: locks of every kind whose writes reached the
// replicas survive a failover (SENTINEL FAILOVER, then SIGKILL of the
// primary), their holders renewing them on the new primary, while a waiter
// of each, and of a latch, waits through both; each waiter gets its lock when
// it is unlocked, and the latch's when it opens. After each failover an
// existing Client locks again within seconds.
func TestSentinelFailover(t *testing.T) {
	t.Parallel() // most of its time is the sentinels' timers
	s := redistest.StartSentinel(t, 2, 3)
	ctx := context.Background()
	const ttl = 10 * time.Second // longer than a failover takes
	holder := clientOn(t, s.Client(t), dlock.WithTTL(ttl))
	waiter := clientOn(t, s.Client(t), dlock.WithTTL(ttl))
	other := clientOn(t, s.Client(t))

	held := map[string]*dlock.Lease{}
	waited := map[string]<-chan lockOutcome{}
	waits := exclusive(waiter, "x")
	for kind, lock := range exclusive(holder, "x") {
		l, err := lock(ctx)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		held[kind] = l
		waited[kind] = waitFor(waits[kind], time.Minute)
	}
	latch := holder.CountDownLatch("x")
	if ok, err := latch.TrySetCount(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	opened := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		opened <- waiter.CountDownLatch("x").Wait(wctx)
	}()

	for _, f := range []struct {
		name string
		fail func(context.Context) (*redistest.Server, error)
	}{
		{"SENTINEL FAILOVER", s.Failover},
		{"SIGKILL", func(ctx context.Context) (*redistest.Server, error) {
			old, promoted, err := s.KillPrimary(ctx)
			if err == nil {
				err = s.Rejoin(ctx, old)
			}
			return promoted, err
		}},
	} {
		start := time.Now()
		promoted, err := f.fail(ctx)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		failedOver := time.Since(start)
		// An existing Client, on another lock, works again within seconds.
		var again time.Duration
		for try := time.Now(); ; {
			tctx, cancel := context.WithTimeout(ctx, time.Second)
			o, err := other.Mutex("other").TryLock(tctx)
			cancel()
			if err == nil {
				again = time.Since(try)
				_ = o.Unlock(ctx)
				break
			}
			if time.Since(try) > 10*time.Second {
				t.Fatalf("after %s, no Lock for 10s: %v", f.name, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%s: promoted %s after %v; TryLock again %v later", f.name, promoted.Addr, failedOver.Round(time.Millisecond), again.Round(time.Millisecond))
		for kind, l := range held {
			select {
			case <-l.Done():
				t.Fatalf("%s: the lease was lost across %s: %v", kind, f.name, l.Err())
			case o := <-waited[kind]:
				t.Fatalf("%s: the waiter got the lock across %s while it was held: %v, %v", kind, f.name, o.l, o.err)
			default:
			}
		}
		select {
		case err := <-opened:
			t.Fatalf("the latch's Wait returned across %s before it opened: %v", f.name, err)
		default:
		}
	}
	// Renewed on the new primary: still held there after more than a TTL.
	time.Sleep(ttl / 2)
	for kind, l := range held {
		if err := l.Err(); err != nil {
			t.Fatalf("%s: the lease was lost after the failovers: %v", kind, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock after the failovers: %v", kind, err)
		}
		o := <-waited[kind]
		if o.err != nil {
			t.Fatalf("%s: the waiter across two failovers: %v", kind, o.err)
		}
		if o.l.Fence() <= l.Fence() {
			t.Errorf("%s: fence %d after %d", kind, o.l.Fence(), l.Fence())
		}
		_ = o.l.Unlock(ctx)
	}
	if err := latch.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-opened; err != nil {
		t.Errorf("the latch's Wait across two failovers: %v", err)
	}
}

// TestSentinelLossyFailover: in a failover to a replica that missed a lock's
// acquisition (each of DLOCK_FAILOVER_ROUNDS, 1 by default), the holder is told it lost the lock within one renewal
// period of the new primary answering, a waiter gets the lock there, and its
// fence is above every fence before it (server-time fences, DECISIONS §2).
func TestSentinelLossyFailover(t *testing.T) {
	t.Parallel() // most of its time is the sentinels' timers
	s := redistest.StartSentinel(t, 2, 3)
	ctx := context.Background()
	const ttl = 3 * time.Second
	holder := clientOn(t, s.Client(t), dlock.WithTTL(ttl))
	waiter := clientOn(t, s.Client(t), dlock.WithTTL(ttl))
	rdb := s.Client(t)
	var last int64
	var told, settled []time.Duration
	for round := range failoverRounds(t, 1) {
		var l *dlock.Lease
		var waited <-chan lockOutcome
		replicas, err := s.Replicas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var killed time.Time
		var promotion <-chan time.Time
		doneAt := make(chan time.Time, 1)
		old, _, err := s.LossyFailover(ctx, func() error {
			var err error
			if l, err = holder.Mutex("x").TryLock(ctx); err != nil {
				return err
			}
			go func() {
				<-l.Done()
				doneAt <- time.Now()
			}()
			waited = waitFor(waiter.Mutex("x").Lock, 30*time.Second)
			// The waiter is in line before the primary dies.
			for start := time.Now(); rdb.ZCard(ctx, "dlock:{x}:waiters").Val() == 0; {
				if time.Since(start) > 5*time.Second {
					return errors.New("the waiter never registered")
				}
				time.Sleep(time.Millisecond)
			}
			killed = time.Now() // LossyFailover kills the primary right after write returns
			promotion = watchPromotion(replicas)
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		settled = append(settled, time.Since(killed))
		promoted := <-promotion
		if promoted.IsZero() {
			t.Fatalf("round %d: no replica said it was promoted", round)
		}
		if l.Fence() <= last {
			t.Fatalf("round %d: fence %d after %d", round, l.Fence(), last)
		}
		select {
		case at := <-doneAt:
			told = append(told, at.Sub(promoted))
		case <-time.After(ttl):
			t.Fatalf("round %d: the holder was not told within a TTL (%v) of the failover", round, ttl)
		}
		if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("round %d: Err = %v; want ErrLockLost", round, err)
		}
		o := <-waited
		if o.err != nil {
			t.Fatalf("round %d: the waiter: %v", round, o.err)
		}
		if o.l.Fence() <= l.Fence() {
			t.Fatalf("round %d: the waiter's fence %d is not above the lost holder's %d", round, o.l.Fence(), l.Fence())
		}
		last = o.l.Fence()
		if err := o.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Rejoin(ctx, old); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("over %d lossy failovers: the set-up settled around the promoted replica %s after the primary was killed; the holder was told %s after the promotion",
		len(told), spread(settled), spread(told))
}

// TestSentinelRestartFences: across restarts of the primary without
// persistence (DLOCK_FAILOVER_ROUNDS, 3 by default), which empty every replica too, each acquisition's fence is
// above the one before, and the Client goes on without being remade.
func TestSentinelRestartFences(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, 2, 3)
	ctx := context.Background()
	c := clientOn(t, s.Client(t))
	var last int64
	for round := range failoverRounds(t, 3) {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := c.Mutex("f").Lock(lctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if l.Fence() <= last {
			t.Fatalf("round %d: fence %d after %d", round, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RestartPrimaryEmpty(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// failoverRounds is how many rounds a failover test makes:
// DLOCK_FAILOVER_ROUNDS, or def. The suite makes one failover per test (two
// for a test that compares variants); `make failover` makes many.
func failoverRounds(t *testing.T, def int) int {
	v := os.Getenv("DLOCK_FAILOVER_ROUNDS")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("DLOCK_FAILOVER_ROUNDS=%q: want a positive number", v)
	}
	return n
}

// TestSentinelWaitRounds measures what a failover does to a lock with and
// without WithWaitReplicas(1): each round one Client acquires while the
// replicas lag, the primary is killed, a lagging replica is promoted, and
// another Client tries the lock. It counts grants, refusals and double grants
// (both Clients granted within one TTL). `make failover` runs 100 rounds of
// each; the package documentation gives the figures.
func TestSentinelWaitRounds(t *testing.T) {
	t.Parallel() // most of its time is the sentinels' timers
	rounds := failoverRounds(t, 1)
	s := redistest.StartSentinel(t, 2, 3)
	ctx := context.Background()
	const ttl = 10 * time.Second
	second := clientOn(t, s.Client(t), dlock.WithTTL(ttl))
	type tally struct{ grants, refusals, doubles int }
	run := func(first *dlock.Client) tally {
		var n tally
		for round := range rounds {
			name := fmt.Sprintf("w%d", round)
			var l *dlock.Lease
			var granted time.Time
			old, _, err := s.LossyFailover(ctx, func() error {
				var err error
				l, err = first.Mutex(name).TryLock(ctx)
				switch {
				case err == nil:
					granted = time.Now()
					n.grants++
				case errors.Is(err, dlock.ErrNotReplicated):
					n.refusals++
				default:
					return err
				}
				return nil
			})
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			l2 := tryUntilAnswered(t, second.Mutex(name))
			if l2 != nil && l != nil && time.Since(granted) < ttl {
				n.doubles++
			}
			if l2 != nil {
				_ = l2.Unlock(ctx)
			}
			if err := s.Rejoin(ctx, old); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	plain := run(clientOn(t, s.Client(t), dlock.WithTTL(ttl)))
	waited := run(clientOn(t, s.Client(t), dlock.WithTTL(ttl), dlock.WithWaitReplicas(1, 200*time.Millisecond)))
	t.Logf("%d rounds each: without WAIT %d grants, %d refusals, %d double grants; WithWaitReplicas(1, 200ms) %d grants, %d refusals, %d double grants",
		rounds, plain.grants, plain.refusals, plain.doubles, waited.grants, waited.refusals, waited.doubles)
	// The harness makes every failover lose the acquisition's write: without
	// WAIT each grant is given again, with WAIT none is made.
	if plain.grants != rounds || plain.doubles != rounds {
		t.Errorf("without WAIT: %+v; want every round granted twice", plain)
	}
	if waited.refusals != rounds || waited.doubles != 0 {
		t.Errorf("with WAIT: %+v; want every round refused, none granted twice", waited)
	}
}

// tryUntilAnswered makes TryLocks of m until Redis answers, for up to 10s
// (the Client may still be finding the new primary): it returns the Lease,
// or nil if the lock was held.
func tryUntilAnswered(t *testing.T, m *dlock.Mutex) *dlock.Lease {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l, err := m.TryLock(ctx)
		cancel()
		switch {
		case err == nil:
			return l
		case errors.Is(err, dlock.ErrNotAcquired) && !errors.Is(err, context.DeadlineExceeded):
			return nil
		case time.Now().After(deadline):
			t.Fatalf("TryLock after the failover: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// spread describes ds: "min–max, median m".
func spread(ds []time.Duration) string {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return fmt.Sprintf("%v–%v, median %v", r(ds[0]), r(ds[len(ds)-1]), r(ds[len(ds)/2]))
}

// TestSentinelWaitNotConsensus shows the limit of WithWaitReplicas: WAIT
// counts acknowledgements, it is no vote. One replica acknowledges the
// acquire while the other lags; the primary and the replica that
// acknowledged then die, the lagging one is promoted, and another Client is
// granted the same lock.
func TestSentinelWaitNotConsensus(t *testing.T) {
	t.Parallel() // most of its time is the sentinels' timers
	rounds := failoverRounds(t, 1)
	s := redistest.StartSentinel(t, 2, 3)
	ctx := context.Background()
	const ttl = 10 * time.Second
	first := clientOn(t, s.Client(t), dlock.WithTTL(ttl), dlock.WithWaitReplicas(1, 200*time.Millisecond))
	second := clientOn(t, s.Client(t), dlock.WithTTL(ttl))
	doubles := 0
	for round := range rounds {
		name := fmt.Sprintf("n%d", round)
		replicas, err := s.Replicas(ctx)
		if err != nil || len(replicas) != 2 {
			t.Fatalf("replicas: %v, %v", replicas, err)
		}
		var l *dlock.Lease
		var granted time.Time
		// The lagging replica misses the grant; the other acknowledges it
		// and then dies with the primary.
		killed, err := s.LossyFailoverTo(ctx, replicas[1], func() error {
			var err error
			l, err = first.Mutex(name).TryLock(ctx)
			granted = time.Now()
			return err
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if l2 := tryUntilAnswered(t, second.Mutex(name)); l2 != nil {
			if time.Since(granted) < ttl {
				doubles++
			}
			_ = l2.Unlock(ctx)
		}
		_ = l.Unlock(ctx)
		for _, k := range killed {
			if err := s.Rejoin(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d rounds with WithWaitReplicas(1, 200ms), the acknowledging replica lost with the primary: %d double grants", rounds, doubles)
	if doubles != rounds {
		t.Errorf("%d double grants in %d rounds: the set-up did not lose the acknowledged write", doubles, rounds)
	}
}

// watchPromotion asks each of replicas for its role every few milliseconds
// and sends when the first says it is a primary (the zero time if none does
// within 30s).
func watchPromotion(replicas []*redistest.Server) <-chan time.Time {
	ctx := context.Background()
	clients := make([]*redis.Client, len(replicas))
	for i, r := range replicas {
		clients[i] = redis.NewClient(&redis.Options{Addr: r.Addr, ReadTimeout: 20 * time.Millisecond, MaxRetries: -1, PoolSize: 1})
	}
	at := make(chan time.Time, 1)
	go func() {
		defer func() {
			for _, c := range clients {
				_ = c.Close()
			}
		}()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			for _, c := range clients {
				if role, err := c.Do(ctx, "role").Slice(); err == nil && len(role) > 0 && role[0] == "master" {
					at <- time.Now()
					return
				}
			}
		}
		at <- time.Time{}
	}()
	return at
}
