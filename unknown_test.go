package dlock_test

// Requests whose outcome is unknown: an acquire that ran in Redis but whose
// reply never arrived, followed by an outage that also fails its undo. What
// it took is freed once Redis is back, well before its TTL, not left to
// expire.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// faultThenDown applies fault to the first request that first matches, and
// then fails every request the proxy reads from then on, as if Redis had
// become unreachable, until restore is called.
func faultThenDown(p *faultproxy.Proxy, first faultproxy.Match, fault faultproxy.Fault, delay time.Duration) (in *faultproxy.Injection, restore func()) {
	in = p.Inject(faultproxy.Rule{Match: first, Fault: fault, Delay: delay, Times: 1})
	down := p.Inject(faultproxy.Rule{Match: func(faultproxy.Command) bool { return in.Hits() > 0 }, Fault: faultproxy.DropRequest})
	return in, down.Remove
}

// TestLostAcquireFreed: an acquire that ran in Redis, whose reply was lost
// during an outage that also failed the release undoing it, is undone once
// Redis is back, well before the lock's TTL: for a Mutex's TryLock, for a
// MultiLock's TryLock (every name freed), and for an acquire whose caller had
// gone when its reply came.
func TestLostAcquireFreed(t *testing.T) {
	t.Parallel()
	redistest.Full(t, "an outage of a second per case")
	ctx := context.Background()
	const ttl = 10 * time.Second
	const outage = time.Second
	// freed checks that each of names, held since start, is free in Redis
	// before half its TTL has run, with nothing of it left past its lease,
	// and can be taken by another Client.
	freed := func(t *testing.T, direct *redis.Client, start time.Time, names ...string) {
		t.Helper()
		other := clientOn(t, direct)
		for _, name := range names {
			key := "dlock:{" + name + "}"
			if !within(time.Until(start.Add(ttl/2)), func() bool { return freedErr(direct, key, ttl) == nil }) {
				s, _ := readLockErr(direct, key)
				t.Errorf("%q still held %v after it was taken, with the outage over for %v: PTTL %v of TTL %v, state %+v: %v",
					name, time.Since(start).Round(time.Millisecond), time.Since(start.Add(outage)).Round(time.Millisecond),
					direct.PTTL(ctx, key).Val(), ttl, s, freedErr(direct, key, ttl))
				continue
			}
			l, err := other.Mutex(name).TryLock(ctx)
			if err != nil {
				t.Errorf("TryLock of %q by another Client after the outage: %v", name, err)
				continue
			}
			if err := l.Unlock(ctx); err != nil {
				t.Error(err)
			}
		}
	}

	t.Run("Mutex", func(t *testing.T) {
		c, p, direct := proxied(t, dlock.WithTTL(ttl))
		lost, restore := faultThenDown(p, script("acquire"), faultproxy.DropReply, 0)
		defer restore()
		start := time.Now()
		_, err := c.Mutex("x").TryLock(ctx)
		checkHit(t, lost)
		if err == nil {
			t.Fatal("TryLock whose reply was lost, with Redis unreachable: no error")
		}
		if !readLock(t, direct, "dlock:{x}").Held() {
			t.Fatal("the lost acquire left nothing in Redis: the fault proves nothing")
		}
		time.Sleep(time.Until(start.Add(outage)))
		restore()
		freed(t, direct, start, "x")
	})

	t.Run("MultiLock", func(t *testing.T) {
		// a is taken; b's reply is lost and Redis goes away, so b's undo
		// and the rollback of a fail too.
		c, p, direct := proxied(t, dlock.WithTTL(ttl))
		lost, restore := faultThenDown(p, faultproxy.And(script("acquire"), faultproxy.HasArg("dlock:{b}")), faultproxy.DropReply, 0)
		defer restore()
		start := time.Now()
		_, err := c.MultiLock([]string{"a", "b", "c"}).TryLock(ctx)
		checkHit(t, lost)
		if err == nil {
			t.Fatal("TryLock of a MultiLock whose reply for b was lost, with Redis unreachable: no error")
		}
		n := 0
		for _, k := range []string{"dlock:{a}", "dlock:{b}"} {
			if readLock(t, direct, k).Held() {
				n++
			}
		}
		if n != 2 {
			t.Fatalf("%d of a and b held in Redis after the failed TryLock, want both: the fault proves nothing", n)
		}
		time.Sleep(time.Until(start.Add(outage)))
		restore()
		freed(t, direct, start, "a", "b", "c")
	})

	t.Run("Close", func(t *testing.T) {
		// Redis is back before the next retry is due: Close makes it at
		// once, and returns once it is done.
		c, p, direct := proxied(t, dlock.WithTTL(ttl))
		lost, restore := faultThenDown(p, script("acquire"), faultproxy.DropReply, 0)
		defer restore()
		if _, err := c.Mutex("x").TryLock(ctx); err == nil {
			t.Fatal("TryLock whose reply was lost, with Redis unreachable: no error")
		}
		checkHit(t, lost)
		if !readLock(t, direct, "dlock:{x}").Held() {
			t.Fatal("the lost acquire left nothing in Redis: the fault proves nothing")
		}
		restore()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := freedErr(direct, "dlock:{x}", ttl); err != nil {
			t.Errorf("after Close: %v", err)
		}
	})

	t.Run("late", func(t *testing.T) {
		// The caller gives up before the acquire's reply comes; the reply
		// says the lock was taken, and the release that undoes it fails.
		c, p, direct := proxied(t, dlock.WithTTL(ttl))
		// The caller waits long enough for the proxy to forward the request
		// also on a loaded machine (a request whose client went before it
		// was forwarded never runs), and gives up well before the reply.
		slow, restore := faultThenDown(p, script("acquire"), faultproxy.DelayReply, 600*time.Millisecond)
		defer restore()
		start := time.Now()
		tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := c.Mutex("x").TryLock(tctx)
		cancel()
		checkHit(t, slow)
		if err == nil {
			t.Fatal("TryLock that gave up before its reply: no error")
		}
		if !within(2*time.Second, func() bool { return readLock(t, direct, "dlock:{x}").Held() }) {
			t.Fatal("the acquire left nothing in Redis: the fault proves nothing")
		}
		time.Sleep(time.Until(start.Add(outage)))
		restore()
		freed(t, direct, start, "x")
	})
}

// TestRedLockErroredPartUndone: a RedLock TryLock that finds another owner
// on a majority undoes its part on a node where its acquire ran but the
// reply came back as an error, not only on the nodes that answered with a
// fence; and an undo that fails is tried again until it succeeds.
func TestRedLockErroredPartUndone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = 10 * time.Second
	setup := func(t *testing.T) ([]*faultproxy.Proxy, []*redis.Client, *dlock.Client) {
		srvs := redistest.StartN(t, 5)
		proxies := make([]*faultproxy.Proxy, len(srvs))
		rdbs := make([]*redis.Client, len(srvs))
		direct := make([]*redis.Client, len(srvs))
		for i, s := range srvs {
			proxies[i] = faultproxy.Start(t, s.Addr)
			rdbs[i] = redis.NewClient(&redis.Options{Addr: proxies[i].Addr()})
			t.Cleanup(func() { _ = rdbs[i].Close() })
			direct[i] = s.Client(t)
		}
		c := redLockOn(t, rdbs, dlock.WithNodeTimeout(2*time.Second), dlock.WithTTL(ttl))
		// Every node knows the scripts, so that each request is one EVALSHA.
		if err := c.Mutex("warm-up").Do(ctx, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		// Another owner holds nodes 1 to 3, a majority; their answers come
		// after node 0's error, so that it counts in the outcome.
		plant(t, direct[1:4], "x", ttl)
		for _, p := range proxies[1:4] {
			p.Inject(faultproxy.Rule{Match: script("red_acquire"), Fault: faultproxy.DelayReply, Delay: 500 * time.Millisecond, Times: 1})
		}
		return proxies, direct, c
	}
	// onlyTheHolder checks that no node keeps a part of the failed TryLock:
	// the lock's hash on each has no field but the real holder's.
	onlyTheHolder := func(t *testing.T, direct []*redis.Client, returned time.Time) {
		t.Helper()
		for i, r := range direct {
			ghost := func() bool {
				for owner := range r.HGetAll(ctx, "dlock:{x}").Val() {
					if owner != "someone:1" {
						return true
					}
				}
				return false
			}
			if !within(time.Until(returned.Add(ttl/4)), func() bool { return !ghost() }) {
				t.Errorf("node %d: holders %v (PTTL %v) %v after the failed TryLock returned (TTL %v)",
					i, r.HGetAll(ctx, "dlock:{x}").Val(), r.PTTL(ctx, "dlock:{x}").Val(), time.Since(returned).Round(time.Millisecond), ttl)
			}
		}
		if d := direct[0].PTTL(ctx, "dlock:{x}").Val(); d != -2 {
			t.Errorf("node 0: PTTL %v, want the key gone", d)
		}
	}
	tryLock := func(t *testing.T, c *dlock.Client) time.Time {
		t.Helper()
		if _, err := c.Mutex("x").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock of a lock another owner holds on 3 of 5 nodes: %v, want ErrNotAcquired", err)
		}
		return time.Now()
	}

	t.Run("reply-error", func(t *testing.T) {
		// Node 0 runs the acquire, loses the reply, and refuses go-redis's
		// retries: its answer is an error. The undo gets through.
		proxies, direct, c := setup(t)
		lost := proxies[0].Inject(faultproxy.Rule{Match: script("red_acquire"), Fault: faultproxy.DropReply, Times: 1})
		proxies[0].Inject(faultproxy.Rule{Match: script("red_acquire"), Fault: faultproxy.DropRequest})
		returned := tryLock(t, c)
		checkHit(t, lost)
		onlyTheHolder(t, direct, returned)
	})

	t.Run("Close", func(t *testing.T) {
		// Node 0 is back before the undo's next try is due: Close makes it
		// at once, and returns once it is done.
		proxies, direct, c := setup(t)
		lost, restore := faultThenDown(proxies[0], script("red_acquire"), faultproxy.DropReply, 0)
		defer restore()
		tryLock(t, c)
		checkHit(t, lost)
		if direct[0].Exists(ctx, "dlock:{x}").Val() != 1 {
			t.Fatal("node 0 holds no part of the failed TryLock: the fault proves nothing")
		}
		restore()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if h := direct[0].HGetAll(ctx, "dlock:{x}").Val(); len(h) != 0 {
			t.Errorf("node 0 after Close: holders %v, want none", h)
		}
	})

	t.Run("node-down", func(t *testing.T) {
		// Node 0 runs the acquire, loses the reply, and is unreachable for a
		// second: its answer is an error and the first undo fails too.
		proxies, direct, c := setup(t)
		lost, restore := faultThenDown(proxies[0], script("red_acquire"), faultproxy.DropReply, 0)
		defer restore()
		start := time.Now()
		returned := tryLock(t, c)
		checkHit(t, lost)
		time.Sleep(time.Until(start.Add(time.Second)))
		restore()
		onlyTheHolder(t, direct, returned)
	})
}
