package dlock_test

// Requests that reach Redis late, and holds Redis loses: a copy of an
// acquire whose reply was lost arrives after its owner's Unlock, Extend,
// Resign or giving up, and changes nothing; an Unlock never says nil for a
// hold that was lost meanwhile; a lock that frees itself goes down the line
// without waiting out a dead waiter's registration; a holder whose hold
// ForceRelease took is told so; a renewal that reaches Redis late undoes no
// newer Extend or Unlock (the newest intent wins, below).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// lateSetup starts a redis-server with a fault proxy in front of it, and a
// Client through the proxy whose Redis client gives a request up after
// 300ms without a reply (and sends it again on another connection). It
// returns the Client, the proxy, and a Client straight to the server.
func lateSetup(t *testing.T, opts ...dlock.Option) (*dlock.Client, *faultproxy.Proxy, *dlock.Client, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	direct := srv.Client(t)
	loadScripts(t, direct)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	return clientOn(t, rdb, opts...), p, clientOn(t, direct), direct
}

// holdFirst holds back the next request that matches m: Redis gets it only
// when the test releases it, after the Client has given up on it and sent
// it again.
func holdFirst(p *faultproxy.Proxy, m faultproxy.Match) *faultproxy.Injection {
	return p.Inject(faultproxy.Rule{Match: m, Fault: faultproxy.HoldRequest, Times: 1})
}

// deliver lets the held request reach Redis, and waits until Redis has run
// it.
func deliver(t *testing.T, in *faultproxy.Injection) {
	t.Helper()
	checkHit(t, in)
	in.Release()
	select {
	case <-in.Delivered():
	case <-time.After(5 * time.Second):
		t.Fatal("the held request never reached Redis")
	}
}

// lateKind is a kind of lock, as the tests of late requests take it: with
// the client that loses a reply, and with another owner that tries it once.
type lateKind struct {
	name, script string
	acquire      func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error)
	try          func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error)
}

var lateKinds = []lateKind{
	{"Mutex/TryLock", "acquire",
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.Mutex("x").TryLock(ctx) },
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.Mutex("x").TryLock(ctx) }},
	{"Mutex/Lock", "acquire",
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.Mutex("x").Lock(ctx) },
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.Mutex("x").TryLock(ctx) }},
	{"FairMutex", "acquire",
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.FairMutex("x").Lock(ctx) },
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.FairMutex("x").TryLock(ctx) }},
	{"RWMutex/Lock", "rw_acquire",
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex("x").Lock(ctx) },
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex("x").TryLock(ctx) }},
	{"RWMutex/RLock", "rw_acquire",
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex("x").RLock(ctx) },
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex("x").TryLock(ctx) }},
	{"Semaphore", "sem_acquire",
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
			return c.Semaphore("x", 1).Acquire(ctx, 1)
		},
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
			return c.Semaphore("x", 1).TryAcquire(ctx, 1)
		}},
}

// TestLateAcquireAfterUnlock: the first copy of an acquire reaches Redis
// after the Client gave up on it, took the lock with a second copy and
// unlocked it. It takes nothing: another owner gets the lock at once.
func TestLateAcquireAfterUnlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, k := range lateKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			c, p, other, _ := lateSetup(t)
			in := holdFirst(p, script(k.script))
			l, err := k.acquire(ctx, c)
			if err != nil {
				t.Fatalf("acquire whose first copy was held back: %v", err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			deliver(t, in)
			o, err := k.try(ctx, other)
			if err != nil {
				t.Fatalf("another owner, after the late copy ran: %v", err)
			}
			_ = o.Unlock(ctx)
		})
	}
}

// TestLateAcquireAfterExtend: the first copy of an acquire reaches Redis
// after the holder shortened its lease with Extend; it does not lengthen it
// again: once the holder is cut off from Redis, another owner gets the lock
// after the shortened lease, well before the TTL.
func TestLateAcquireAfterExtend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl, short = 10 * time.Second, time.Second
	for _, k := range lateKinds {
		if k.name == "Mutex/Lock" || k.name == "RWMutex/RLock" {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			c, p, other, _ := lateSetup(t, dlock.WithTTL(ttl))
			in := holdFirst(p, script(k.script))
			l, err := k.acquire(ctx, c)
			if err != nil {
				t.Fatalf("acquire whose first copy was held back: %v", err)
			}
			if err := l.Extend(ctx, short); err != nil {
				t.Fatalf("Extend: %v", err)
			}
			deliver(t, in)
			p.Refuse(true)
			p.Cut()
			var o *dlock.Lease
			if !within(ttl/2, func() bool {
				o, err = k.try(ctx, other)
				return err == nil
			}) {
				t.Fatalf("another owner could not take the lock for %v after Extend(%v), the late copy and the holder's last request: %v", ttl/2, short, err)
			}
			_ = o.Unlock(ctx)
		})
	}
}

// TestLeaseAfterLostReply: an acquire whose reply was lost is sent again;
// the lease runs from the request that took the lock. If the copy that lost
// its reply took it, the retry finds it taken and the lease ends when what
// was left of it does, not a TTL after the retry; if the lock was held, the
// waiter's take long after that copy gets a whole lease (a lease dated from
// the lost copy would be over before it began: a false loss).
func TestLeaseAfterLostReply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = 600 * time.Millisecond
	// live checks that l, of TTL ttl, is held and stays held, renewed, for
	// two TTLs, and that its Unlock says it was held throughout.
	live := func(t *testing.T, l *dlock.Lease, ttl time.Duration) {
		t.Helper()
		if closedWithin(l.Done(), 2*ttl) {
			t.Fatalf("the lease ended: %v", l.Err())
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	}
	for _, k := range lateKinds {
		t.Run(k.name+"/taken-by-the-lost-copy", func(t *testing.T) {
			t.Parallel()
			// The lease has what the lost copy left of it: a TTL less the
			// 300 ms read timeout. At 2 s its first renewal has over a
			// second, which a loaded machine's pauses stay under.
			const ttl = 2 * time.Second
			c, p, other, _ := lateSetup(t, dlock.WithTTL(ttl))
			in := p.Inject(faultproxy.Rule{Match: script(k.script), Fault: faultproxy.DropReply, Times: 1})
			l, err := k.acquire(ctx, c)
			if err != nil {
				t.Fatalf("acquire whose first reply was lost: %v", err)
			}
			checkHit(t, in)
			if _, err := k.try(ctx, other); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("another owner while the lease is held: %v, want ErrNotAcquired", err)
			}
			live(t, l, ttl)
		})
		if k.name == "Mutex/TryLock" {
			continue
		}
		t.Run(k.name+"/ends-with-the-lost-copy's-hold", func(t *testing.T) {
			// Every copy of the first attempt runs and loses its reply; the
			// waiter tries again after the outage and finds the lock taken
			// by its first copy. Without renewal its lease must end when
			// that hold may end in Redis (the TTL after the first copy ran),
			// not a TTL after the attempt that found it: it has ended by
			// the time another owner can take the lock.
			t.Parallel()
			const ttl = 3 * time.Second
			c, p, other, _ := lateSetup(t, dlock.WithTTL(ttl), dlock.WithoutRenewal())
			warm, err := c.Mutex("warm").TryLock(ctx) // Redis has answered this Client
			if err != nil {
				t.Fatal(err)
			}
			_ = warm.Unlock(ctx)
			in := p.Inject(faultproxy.Rule{Match: script(k.script), Fault: faultproxy.SwallowReply, Times: 4})
			l, err := k.acquire(ctx, c)
			if err != nil {
				t.Fatalf("acquire whose first attempt lost every reply: %v", err)
			}
			if in.Hits() != 4 {
				t.Fatalf("%d copies lost their replies, want 4: the set-up failed", in.Hits())
			}
			for {
				o, err := k.try(ctx, other)
				if err == nil {
					select {
					case <-l.Done():
					default:
						t.Fatalf("another owner took fence %d while the lease of fence %d had not ended", o.Fence(), l.Fence())
					}
					_ = o.Unlock(ctx)
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
		t.Run(k.name+"/waited-past-the-lost-copy", func(t *testing.T) {
			t.Parallel()
			c, p, other, _ := lateSetup(t, dlock.WithTTL(ttl))
			o, err := k.try(ctx, other)
			if err != nil {
				t.Fatal(err)
			}
			in := p.Inject(faultproxy.Rule{Match: script(k.script), Fault: faultproxy.DropReply, Times: 1})
			got := make(chan *dlock.Lease, 1)
			go func() {
				l, err := k.acquire(ctx, c)
				if err != nil {
					t.Errorf("waiter whose first reply was lost: %v", err)
				}
				got <- l
			}()
			checkHit(t, in)
			time.Sleep(3 * ttl) // the lost copy is long past a lease of TTL
			if err := o.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			l := <-got
			if l == nil {
				t.FailNow()
			}
			live(t, l, ttl)
		})
	}
}

// TestLateCampaignAfterResign: the first copy of a Campaign reaches Redis
// after the leader it made resigned: nobody leads, and another candidate
// leads at once.
func TestLateCampaignAfterResign(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, other, _ := lateSetup(t)
	in := holdFirst(p, script("acquire"))
	ld, err := c.Election("e").Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("Campaign whose first copy was held back: %v", err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	deliver(t, in)
	if l, err := other.Election("e").Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("after the late Campaign: leader %+v, %v; want nobody", l, err)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	b, err := other.Election("e").Campaign(cctx, "b")
	if err != nil {
		t.Fatalf("another candidate after the late Campaign: %v", err)
	}
	_ = b.Resign(ctx)
}

// TestLateRegistrationAfterGiveUp: the first copy of a waiter's registration
// reaches Redis after the waiter gave up its Lock: it queues nobody.
func TestLateRegistrationAfterGiveUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A TTL of 3s: a registration lasts 1.5s, sent as "1500".
	c, p, other, direct := lateSetup(t, dlock.WithTTL(3*time.Second))
	h, err := other.Mutex("w").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Unlock(ctx)
	in := holdFirst(p, faultproxy.And(script("acquire"), faultproxy.HasArg("1500")))
	wctx, cancel := context.WithCancel(ctx)
	gave := make(chan error, 1)
	go func() {
		_, err := c.Mutex("w", dlock.WithTTL(3*time.Second)).Lock(wctx)
		gave <- err
	}()
	if !within(5*time.Second, func() bool { return direct.ZCard(ctx, "dlock:{w}:waiters").Val() == 1 }) {
		t.Fatal("the waiter never registered")
	}
	checkHit(t, in)
	cancel()
	if err := <-gave; !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Lock given up: %v", err)
	}
	if !within(5*time.Second, func() bool { return direct.ZCard(ctx, "dlock:{w}:waiters").Val() == 0 }) {
		t.Fatal("the waiter that gave up is still queued")
	}
	deliver(t, in)
	if n := direct.ZCard(ctx, "dlock:{w}:waiters").Val(); n != 0 {
		t.Fatalf("%d waiters queued after the late registration of one that gave up", n)
	}
}

// TestUnlockAfterRedisLostKeys: Redis loses the lock's keys (FLUSHALL here,
// as a restart without persistence or a failover to a replica that missed
// them would), another owner takes the lock, and the old holder unlocks
// before its next renewal: Unlock (Resign) says the hold was lost, whether
// the other owner still holds the lock or has released it too.
func TestUnlockAfterRedisLostKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type kind struct {
		name string
		lock func(c *dlock.Client) (func(context.Context) error, error)
	}
	leaseOf := func(f func(c *dlock.Client) (*dlock.Lease, error)) func(c *dlock.Client) (func(context.Context) error, error) {
		return func(c *dlock.Client) (func(context.Context) error, error) {
			l, err := f(c)
			if err != nil {
				return nil, err
			}
			return l.Unlock, nil
		}
	}
	kinds := []kind{
		{"Mutex", leaseOf(func(c *dlock.Client) (*dlock.Lease, error) { return c.Mutex("k").TryLock(ctx) })},
		{"FairMutex", leaseOf(func(c *dlock.Client) (*dlock.Lease, error) { return c.FairMutex("k").TryLock(ctx) })},
		{"RWMutex", leaseOf(func(c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex("k").TryLock(ctx) })},
		{"Semaphore", leaseOf(func(c *dlock.Client) (*dlock.Lease, error) { return c.Semaphore("k", 1).TryAcquire(ctx, 1) })},
		{"Election", func(c *dlock.Client) (func(context.Context) error, error) {
			ld, err := c.Election("k").Campaign(ctx, "v")
			if err != nil {
				return nil, err
			}
			return ld.Resign, nil
		}},
	}
	for _, k := range kinds {
		for _, released := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/other released %v", k.name, released), func(t *testing.T) {
				t.Parallel()
				c, rdb, _ := newClient(t)
				other := clientOn(t, rdb)
				unlock, err := k.lock(c)
				if err != nil {
					t.Fatal(err)
				}
				if err := rdb.FlushAll(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				otherUnlock, err := k.lock(other)
				if err != nil {
					t.Fatalf("another owner after Redis lost the keys: %v", err)
				}
				if released {
					if err := otherUnlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				err = unlock(ctx)
				if !errors.Is(err, dlock.ErrLockLost) {
					t.Fatalf("Unlock of a hold Redis lost, taken again by another owner: %v; want ErrLockLost", err)
				}
				if !released {
					_ = otherUnlock(ctx)
				}
			})
		}
	}
}

// TestForceReleaseToldToHolder: a holder whose hold ForceRelease took away
// learns of it at its next renewal, and its Err says that ForceRelease
// took it, not that it expired or that another owner holds it (the waiter
// the lock went on to).
func TestForceReleaseToldToHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// held is a hold of one kind: its Done, its Err and its release.
	type held struct {
		done    <-chan struct{}
		err     func() error
		release func(context.Context) error
	}
	lease := func(l *dlock.Lease, err error) (held, error) {
		if err != nil {
			return held{}, err
		}
		return held{l.Done(), l.Err, l.Unlock}, nil
	}
	const ttl = 600 * time.Millisecond
	for _, k := range []struct {
		name string
		kind dlock.Kind
		lock func(ctx context.Context, c *dlock.Client) (held, error)
	}{
		{"Mutex", dlock.KindMutex, func(ctx context.Context, c *dlock.Client) (held, error) {
			return lease(c.Mutex("f", dlock.WithTTL(ttl)).Lock(ctx))
		}},
		{"FairMutex", dlock.KindFairMutex, func(ctx context.Context, c *dlock.Client) (held, error) {
			return lease(c.FairMutex("f", dlock.WithTTL(ttl)).Lock(ctx))
		}},
		{"RWMutex", dlock.KindRWMutex, func(ctx context.Context, c *dlock.Client) (held, error) {
			return lease(c.RWMutex("f", dlock.WithTTL(ttl)).Lock(ctx))
		}},
		{"Semaphore", dlock.KindSemaphore, func(ctx context.Context, c *dlock.Client) (held, error) {
			return lease(c.Semaphore("f", 1, dlock.WithTTL(ttl)).Acquire(ctx, 1))
		}},
		{"Election", dlock.KindElection, func(ctx context.Context, c *dlock.Client) (held, error) {
			ld, err := c.Election("f", dlock.WithTTL(ttl)).Campaign(ctx, "v")
			if err != nil {
				return held{}, err
			}
			return held{ld.Done(), ld.Err, ld.Resign}, nil
		}},
	} {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			c, rdb, _ := newClient(t)
			admin, waiter := clientOn(t, rdb), clientOn(t, rdb)
			h, err := k.lock(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			// Someone waits: the lock goes on to it when it is taken away.
			next := make(chan held, 1)
			go func() {
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				w, err := k.lock(wctx, waiter)
				if err != nil {
					close(next)
					return
				}
				next <- w
			}()
			if !within(5*time.Second, func() bool {
				st, err := admin.Inspect(ctx, k.kind, "f")
				return err == nil && len(st.Waiters) == 1
			}) {
				t.Fatal("the waiter never queued")
			}
			if _, err := admin.ForceRelease(ctx, k.kind, "f"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-h.done:
			case <-time.After(3 * ttl):
				t.Fatal("the evicted holder never learned")
			}
			if err := h.err(); !errors.Is(err, dlock.ErrLockLost) || !strings.Contains(err.Error(), "ForceRelease") {
				t.Errorf("the evicted holder's Err: %v; want ErrLockLost saying ForceRelease took it", err)
			}
			w, ok := <-next
			if !ok {
				t.Fatal("the waiter never got the lock")
			}
			_ = w.release(ctx)
		})
	}
}

// TestDeadHeadWaiterAfterHolderDied: a Mutex's holder dies (its Client cut
// off from Redis) while a dead process's waiter heads the line, its
// registration live for a long while, and a live waiter follows: when the
// holder's lease runs out, the lock goes to the dead waiter for its grant
// lease, then on to the live one, long before the dead registration
// lapses.
func TestDeadHeadWaiterAfterHolderDied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = 600 * time.Millisecond
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	rdb := srv.Client(t)
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = prdb.Close() })
	holder := clientOn(t, prdb)
	live := clientOn(t, rdb)
	if _, err := holder.Mutex("dead", dlock.WithTTL(ttl)).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// The dead waiter, first in line, registered for a minute.
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	lapse := now.UnixMilli() + time.Minute.Milliseconds()
	rdb.ZAdd(ctx, "dlock:{dead}:waiters", redis.Z{Score: 1, Member: "0badc0de:1"})
	rdb.HSet(ctx, "dlock:{dead}:alive", "0badc0de:1", fmt.Sprintf("%d|60", lapse))
	got := lockInBackground(t, live.Mutex("dead", dlock.WithTTL(ttl)))
	p.Refuse(true)
	p.Cut() // the holder can renew no more: it is dead to Redis
	select {
	case <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the live waiter never got the lock")
	}
	at, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if at.UnixMilli() >= lapse {
		t.Fatal("the live waiter got the lock only once the dead waiter's registration had lapsed")
	}
	if n := rdb.ZScore(ctx, "dlock:{dead}:waiters", "0badc0de:1").Err(); !errors.Is(n, redis.Nil) {
		t.Errorf("the dead waiter is still in line: %v; a Mutex's grantee leaves it", n)
	}
}

// TestRedLockLateMemberAcquire: a RedLock member's acquire that reaches it
// late takes nothing there once its owner has ended: after a TryLock that
// failed for want of those members (their parts undone before the late
// copies arrived), and after an Unlock.
func TestRedLockLateMemberAcquire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srvs := redistest.StartN(t, 3)
	proxies := make([]*faultproxy.Proxy, len(srvs))
	rdbs, direct := make([]*redis.Client, len(srvs)), make([]*redis.Client, len(srvs))
	for i, s := range srvs {
		proxies[i] = faultproxy.Start(t, s.Addr)
		rdbs[i] = redis.NewClient(&redis.Options{Addr: proxies[i].Addr(), ReadTimeout: 600 * time.Millisecond})
		t.Cleanup(func() { _ = rdbs[i].Close() })
		direct[i] = s.Client(t)
	}
	c := redLockOn(t, rdbs, dlock.WithNodeTimeout(300*time.Millisecond), dlock.WithTTL(10*time.Second))
	other := redLockOn(t, direct, dlock.WithNodeTimeout(time.Second))
	var err error
	for range 5 { // dial and load the scripts on every member
		if err = c.Mutex("warm-up").Do(ctx, func(context.Context) error { return nil }); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	acquire := faultproxy.ScriptSHA(dlock.ScriptHash("red_acquire"))

	t.Run("after a failed TryLock", func(t *testing.T) {
		// Every copy is held, the member's own resends too: on a loaded
		// machine the per-node timeout may fire after a resend's answer.
		tried := faultproxy.And(acquire, faultproxy.HasArg("dlock:{tried}"))
		held := []*faultproxy.Injection{
			proxies[0].Inject(faultproxy.Rule{Match: tried, Fault: faultproxy.HoldRequest}),
			proxies[1].Inject(faultproxy.Rule{Match: tried, Fault: faultproxy.HoldRequest}),
		}
		if _, err := c.Mutex("tried").TryLock(ctx); err == nil {
			t.Fatal("TryLock with two of three members held back succeeded")
		}
		// The members' clients give up on those requests (their read
		// timeout) and undo what they may have done; the held copies
		// arrive after that.
		time.Sleep(time.Second)
		for _, in := range held {
			deliver(t, in)
		}
		l, err := other.Mutex("tried").TryLock(ctx)
		if err != nil {
			t.Fatalf("another owner after the late member acquires ran: %v (held on %d members)", err, holders(t, direct, "tried"))
		}
		_ = l.Unlock(ctx)
	})

	// A waiter whose first attempt left a member behind (its outcome in
	// doubt) and who then waits past its TTL gets a lease that runs from
	// the attempt that took the majority: the quorum keeps it off that
	// member until its part there is undone, so no earlier copy's take is
	// counted. Its lease must not start out ended.
	t.Run("waiter with a member in doubt", func(t *testing.T) {
		short := redLockOn(t, rdbs, dlock.WithNodeTimeout(300*time.Millisecond), dlock.WithTTL(time.Second))
		holder, err := other.Mutex("waited").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		in := holdFirst(proxies[0], acquire)
		got := make(chan *dlock.Lease, 1)
		go func() {
			l, err := short.Mutex("waited").Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		time.Sleep(1500 * time.Millisecond) // past the waiter's TTL
		deliver(t, in)
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		l := <-got
		if l == nil {
			return
		}
		defer l.Unlock(ctx)
		if err := l.Err(); err != nil {
			t.Fatalf("the waiter's lease, just taken, has ended: %v", err)
		}
		time.Sleep(1500 * time.Millisecond) // renewed past its TTL
		if err := l.Err(); err != nil {
			t.Fatalf("the waiter's lease was not renewed: %v", err)
		}
	})

	t.Run("after Unlock", func(t *testing.T) {
		in := holdFirst(proxies[0], acquire)
		l, err := c.Mutex("unlocked").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		deliver(t, in)
		if n := holders(t, direct, "unlocked"); n != 0 {
			t.Fatalf("held on %d members after the late acquire ran, after Unlock", n)
		}
	})
}

// TestClusterLeaseWhileSlotMigrates: a lease never extended stays held while
// its slot migrates and its keys have moved before the slot is handed over:
// its renewals reach the keys on the importing primary (they name no key
// that is not there), also with WithWaitReplicas, whose pipeline of the
// renewal and WAIT follows the redirection.
func TestClusterLeaseWhileSlotMigrates(t *testing.T) {
	t.Parallel()
	for _, wait := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "WithWaitReplicas"}[wait], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			replicas := 0
			if wait {
				replicas = 1
			}
			cl := redistest.StartCluster(t, 2, replicas)
			rdb := cl.Client(t)
			const ttl = 900 * time.Millisecond // renewed every 300ms
			opts := []dlock.Option{dlock.WithTTL(ttl)}
			if wait {
				opts = append(opts, dlock.WithWaitReplicas(1, 200*time.Millisecond))
			}
			c := clientOn(t, rdb, opts...)
			for _, kind := range []string{"Mutex", "FairMutex", "Election", "RWMutex", "RWMutex.RLock", "Semaphore"} {
				var done <-chan struct{}
				var why func() error
				var release func(context.Context) error
				name := "mig-" + kind
				switch kind {
				case "Mutex":
					l, err := c.Mutex(name).Lock(ctx)
					if err != nil {
						t.Fatal(err)
					}
					done, why, release = l.Done(), l.Err, l.Unlock
				case "FairMutex":
					l, err := c.FairMutex(name).Lock(ctx)
					if err != nil {
						t.Fatal(err)
					}
					done, why, release = l.Done(), l.Err, l.Unlock
				case "Election":
					ld, err := c.Election(name).Campaign(ctx, "v")
					if err != nil {
						t.Fatal(err)
					}
					done, why, release = ld.Done(), ld.Err, ld.Resign
				case "RWMutex":
					l, err := c.RWMutex(name).Lock(ctx)
					if err != nil {
						t.Fatal(err)
					}
					done, why, release = l.Done(), l.Err, l.Unlock
				case "RWMutex.RLock":
					l, err := c.RWMutex(name).RLock(ctx)
					if err != nil {
						t.Fatal(err)
					}
					done, why, release = l.Done(), l.Err, l.Unlock
				case "Semaphore":
					l, err := c.Semaphore(name, 2).Acquire(ctx, 1)
					if err != nil {
						t.Fatal(err)
					}
					done, why, release = l.Done(), l.Err, l.Unlock
				}
				var key string
				switch kind {
				case "Mutex":
					key = "dlock:{mig-Mutex}"
				case "FairMutex":
					key = "dlock:fair:{mig-FairMutex}"
				case "Election":
					key = "dlock:election:{mig-Election}"
				case "RWMutex", "RWMutex.RLock":
					key = "dlock:rw:{" + name + "}:fence"
				case "Semaphore":
					key = "dlock:sem:{" + name + "}:fence"
				}
				from, err := cl.PrimaryFor(ctx, key)
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
				_, err = cl.MigrateSlotMidway(ctx, key, to, func() error {
					// Three renewal periods with the keys on the importing
					// primary and the slot not yet handed over.
					select {
					case <-done:
						return fmt.Errorf("%s: lease lost while its slot migrated: %v", kind, why())
					case <-time.After(3 * ttl):
						return nil
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := why(); err != nil {
					t.Fatalf("%s: lease lost after its slot migrated: %v", kind, err)
				}
				if err := release(ctx); err != nil {
					t.Fatalf("%s: release after the migration: %v", kind, err)
				}
			}
		})
	}
}

// The newest intent wins: a renewal sent before a Lease.Extend, whose reply
// comes late or which Redis runs late (the reply held up, go-redis's retry
// after a read timeout, the body sent after NOSCRIPT), neither lengthens the
// lease in Redis again nor lengthens what the holder counts on; and a
// renewal that Redis runs after the release does not turn a clean Unlock
// into a loss. Each through the fault proxy, against a real server.

// TestRenewalBeforeExtend: a lease of 6 s is renewed after 2 s; that
// renewal R gets no timely answer, is sent again after 1 s and answered;
// then the holder shortens the lease with Extend(1s), and R comes back:
//
//   - "late reply": R's reply arrives while the Extend's is still out (the
//     Extend's reply comes after the shortened lease has run out);
//   - "go-redis retry": R's reply never comes, and go-redis sends R again
//     after its read timeout, after the Extend ran (and once more with the
//     Extend's reply late, so that R's reply comes while it is out);
//   - "EVAL after NOSCRIPT": Redis lost its scripts; R's NOSCRIPT answer
//     comes late, and R's body is sent after the Extend ran.
//
// Whatever the path, Redis frees the lock about 1 s after the Extend, or
// after the holder is cut off from Redis (another owner takes it long before
// the 6 s TTL would have let it), and the lease has ended by the time another
// owner has the lock.
func TestRenewalBeforeExtend(t *testing.T) {
	t.Parallel()
	const (
		ttl   = 6 * time.Second
		short = time.Second
	)
	renewal := faultproxy.And(script("extend"), faultproxy.HasArg("gt"))
	extend := faultproxy.And(script("extend"), faultproxy.HasArg("set"))
	// A lease is carried by a lock hash (Mutex) or by a member of a sorted
	// set of holders (Semaphore, an RWMutex's read hold).
	type kind struct {
		name        string
		lock, other func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error)
	}
	mutex := kind{"Mutex",
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
			return c.Mutex("x", dlock.WithTTL(ttl)).Lock(ctx)
		},
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.Mutex("x").TryLock(ctx) },
	}
	semaphore := kind{"Semaphore",
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
			return c.Semaphore("x", 1, dlock.WithTTL(ttl)).Acquire(ctx, 1)
		},
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
			return c.Semaphore("x", 1).TryAcquire(ctx, 1)
		},
	}
	reader := kind{"RWMutex read",
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
			return c.RWMutex("x", dlock.WithTTL(ttl)).RLock(ctx)
		},
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex("x").TryLock(ctx) },
	}
	for _, tc := range []struct {
		name        string
		kinds       []kind
		readTimeout time.Duration
		// fault makes the first renewal's answer late; flush is set if
		// Redis is to lose its scripts first.
		fault faultproxy.Rule
		flush bool
		// extendFault, if set, holds up the Extend's reply.
		extendFault *faultproxy.Rule
	}{
		{
			name:        "late reply",
			kinds:       []kind{mutex},
			fault:       faultproxy.Rule{Match: renewal, Fault: faultproxy.DelayReply, Delay: 1500 * time.Millisecond, Times: 1},
			extendFault: &faultproxy.Rule{Match: extend, Fault: faultproxy.DelayReply, Delay: 2 * time.Second, Times: 1},
		},
		{
			name:        "go-redis retry",
			kinds:       []kind{mutex, semaphore, reader},
			readTimeout: 1500 * time.Millisecond,
			fault:       faultproxy.Rule{Match: renewal, Fault: faultproxy.SwallowReply, Times: 1},
		},
		{
			// The Extend's reply comes after the shortened lease ran
			// out, shortly before go-redis's read timeout.
			name:        "go-redis retry, Extend's reply late",
			kinds:       []kind{mutex},
			readTimeout: 1500 * time.Millisecond,
			fault:       faultproxy.Rule{Match: renewal, Fault: faultproxy.SwallowReply, Times: 1},
			extendFault: &faultproxy.Rule{Match: extend, Fault: faultproxy.DelayReply, Delay: 1200 * time.Millisecond, Times: 1},
		},
		{
			name:  "EVAL after NOSCRIPT",
			kinds: []kind{mutex, semaphore, reader},
			fault: faultproxy.Rule{Match: faultproxy.And(faultproxy.CommandIs("EVALSHA"), renewal), Fault: faultproxy.DelayReply, Delay: 1500 * time.Millisecond, Times: 1},
			flush: true,
		},
	} {
		for _, k := range tc.kinds {
			t.Run(tc.name+"/"+k.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				srv := redistest.Start(t)
				p := faultproxy.Start(t, srv.Addr)
				direct := srv.Client(t)
				loadScripts(t, direct)
				rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: tc.readTimeout})
				t.Cleanup(func() { rdb.Close() })
				renewed := make(chan struct{}, 1)
				c := clientOn(t, rdb, dlock.WithHooks(dlock.Hooks{
					Extended: func(context.Context, dlock.LockInfo, int64) {
						select {
						case renewed <- struct{}{}:
						default:
						}
					},
				}))
				l, err := k.lock(ctx, c)
				if err != nil {
					t.Fatal(err)
				}
				if tc.flush {
					if err := direct.ScriptFlush(ctx).Err(); err != nil {
						t.Fatal(err)
					}
				}
				in := p.Inject(tc.fault)
				select {
				case <-in.Hit():
				case <-time.After(ttl):
					t.Fatal("no renewal was sent")
				}
				// The renewal sent again, answered.
				select {
				case <-renewed:
				case <-time.After(ttl / 2):
					t.Fatal("the renewal was not sent again")
				}
				if tc.extendFault != nil {
					p.Inject(*tc.extendFault)
				}
				extended := make(chan error, 1)
				go func() { extended <- l.Extend(ctx, short) }()
				if tc.extendFault == nil {
					// The Extend is answered; R reaches Redis again after it.
					// Once it has, the holder is cut off from Redis, so that
					// only what Redis keeps holds the lock.
					if err := <-extended; err != nil {
						t.Fatalf("Extend: %v", err)
					}
					again := p.Inject(faultproxy.Rule{Match: faultproxy.And(renewal, faultproxy.HasArg("6000")), Times: 1})
					select {
					case <-again.Hit():
					case <-time.After(ttl / 2):
						t.Fatal("the first renewal never reached Redis again")
					}
					time.Sleep(50 * time.Millisecond) // for it to run
					p.Refuse(true)
					p.Cut()
					extended <- nil
				}

				// Another owner, straight to Redis, takes the lock once the
				// shortened lease has run out there; by then the lease must
				// have ended. It tries until well before the 6 s TTL, renewed or
				// not, would have let it.
				other := clientOn(t, direct)
				giveUp := time.Now().Add(ttl / 2)
				var o *dlock.Lease
				for o == nil && time.Now().Before(giveUp) {
					if o, err = k.other(ctx, other); err != nil {
						if !errors.Is(err, dlock.ErrNotAcquired) {
							t.Fatal(err)
						}
						o = nil
						time.Sleep(5 * time.Millisecond)
					}
				}
				if o == nil {
					t.Fatalf("another owner could not take the lock for %v after Extend(%v) and the holder's last request", ttl/2, short)
				}
				defer o.Unlock(ctx)
				// Done closes at the local deadline, ahead of Redis's expiry;
				// allow for a late timer.
				if !closedWithin(l.Done(), 100*time.Millisecond) {
					t.Errorf("another owner has the lock (fence %d) while the lease (fence %d) is still held", o.Fence(), l.Fence())
				}
				select {
				case err := <-extended:
					if tc.extendFault != nil && !errors.Is(err, dlock.ErrLockLost) {
						t.Errorf("Extend, whose reply came after the shortened lease ran out: %v, want ErrLockLost", err)
					}
					if tc.extendFault == nil && err != nil {
						t.Errorf("Extend: %v", err)
					}
				case <-time.After(5 * time.Second):
					t.Error("Extend did not return")
				}
				if !errors.Is(l.Err(), dlock.ErrLockLost) {
					t.Errorf("Err = %v, want ErrLockLost", l.Err())
				}
				checkHit(t, in)
				t.Logf("the lease ended with: %v", l.Err())
			})
		}
	}
}

// TestRenewalAfterRelease: a renewal held up on its way reaches Redis after
// the Unlock's release has freed the lock, and its answer ("nobody holds
// it") comes back before the release's: the Unlock still reads as one, with
// no loss reported.
func TestRenewalAfterRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var lost atomic.Int32
	c, p, rdb := proxied(t, dlock.WithHooks(dlock.Hooks{
		Lost: func(context.Context, dlock.LockInfo, int64, error) { lost.Add(1) },
	}))
	const ttl = 3 * time.Second
	l, err := c.Mutex("x", dlock.WithTTL(ttl)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	renewal := p.Inject(faultproxy.Rule{Match: script("extend"), Fault: faultproxy.DelayRequest, Delay: 300 * time.Millisecond, Times: 1})
	select {
	case <-renewal.Hit():
	case <-time.After(ttl):
		t.Fatal("no renewal was sent")
	}
	release := p.Inject(faultproxy.Rule{Match: script("release"), Fault: faultproxy.DelayReply, Delay: 800 * time.Millisecond, Times: 1})
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	checkHit(t, release)
	if err := freedErr(rdb, "dlock:{x}", ttl); err != nil {
		t.Errorf("the lock is still in Redis after Unlock: %v", err)
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err after a clean Unlock = %v, want ErrNotHeld and not ErrLockLost", err)
	}
	if n := lost.Load(); n != 0 {
		t.Errorf("the Lost hook ran %d times for a lease unlocked cleanly", n)
	}
}
