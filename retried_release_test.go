package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestRetriedReleaseAfterLockMovedOn: a release's reply is lost; before the
// Client sends it again, another owner takes the lock with a TTL shorter
// than the lease that was released, and releases it (its keys then expire,
// or stay, free of the first lease's trace). The retry finds nothing of the
// first copy in the lock's keys; Redis kept its data meanwhile and the lease
// could not have expired yet, so Unlock says nil. When Redis lost its data
// instead (FLUSHALL, a restart), the first copy may never have run and
// Unlock says the hold may be lost.
func TestRetriedReleaseAfterLockMovedOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type kind struct {
		name, script string
		state        string // the lock's state key, for the kinds that keep one
		lock         func(c *dlock.Client, ttl time.Duration) (func(context.Context) error, error)
	}
	leaseOf := func(f func(c *dlock.Client, o dlock.Option) (*dlock.Lease, error)) func(*dlock.Client, time.Duration) (func(context.Context) error, error) {
		return func(c *dlock.Client, ttl time.Duration) (func(context.Context) error, error) {
			l, err := f(c, dlock.WithTTL(ttl))
			if err != nil {
				return nil, err
			}
			return l.Unlock, nil
		}
	}
	kinds := []kind{
		{"Mutex", "release", "dlock:{k}", leaseOf(func(c *dlock.Client, o dlock.Option) (*dlock.Lease, error) { return c.Mutex("k", o).TryLock(ctx) })},
		{"FairMutex", "release", "dlock:fair:{k}", leaseOf(func(c *dlock.Client, o dlock.Option) (*dlock.Lease, error) { return c.FairMutex("k", o).TryLock(ctx) })},
		{"RWMutex", "rw_release", "", leaseOf(func(c *dlock.Client, o dlock.Option) (*dlock.Lease, error) { return c.RWMutex("k", o).TryLock(ctx) })},
		{"Semaphore", "sem_release", "", leaseOf(func(c *dlock.Client, o dlock.Option) (*dlock.Lease, error) {
			return c.Semaphore("k", 1, o).TryAcquire(ctx, 1)
		})},
		{"Election", "release", "dlock:election:{k}", func(c *dlock.Client, ttl time.Duration) (func(context.Context) error, error) {
			ld, err := c.Election("k", dlock.WithTTL(ttl)).Campaign(ctx, "v")
			if err != nil {
				return nil, err
			}
			return ld.Resign, nil
		}},
	}
	// The ways the lock moves on between the release's first copy and its
	// retry: another owner's short hold, its keys left to expire or not;
	// Redis losing its data (then the first copy may not have run: the
	// hold is reported lost).
	type between struct {
		name string
		lost bool
		// pause: the proxy forwards nothing while apply runs, so the
		// release is sent again once it is done, not while the server
		// restarts; and the Client sends it up to 10 more times, for
		// every connection of the Redis client's pool that led to the
		// server that went fails a copy (a few such copies, and Unlock
		// gives up on Redis).
		pause bool
		apply func(t *testing.T, srv *redistest.Server, direct *redis.Client, other *dlock.Client, k kind)
	}
	shortHold := func(expire bool) func(*testing.T, *redistest.Server, *redis.Client, *dlock.Client, kind) {
		return func(t *testing.T, _ *redistest.Server, direct *redis.Client, other *dlock.Client, k kind) {
			var unlock func(context.Context) error
			var err error
			if !within(3*time.Second, func() bool {
				unlock, err = k.lock(other, dlock.MinTTL)
				return err == nil
			}) {
				t.Fatalf("another owner after the first copy freed the lock: %v", err)
			}
			if err := unlock(ctx); err != nil {
				t.Fatalf("the other owner's release: %v", err)
			}
			if !expire {
				return
			}
			if k.state == "" {
				// (Its fence key lives as long as the first lease would
				// have: wait out the short one.)
				time.Sleep(3 * dlock.MinTTL)
				return
			}
			if !within(3*time.Second, func() bool { return direct.Exists(ctx, k.state).Val() == 0 }) {
				t.Fatalf("the short hold's state %s never expired", k.state)
			}
		}
	}
	betweens := []between{
		{"short hold released", false, false, shortHold(false)},
		{"short hold released, its keys expired", false, false, shortHold(true)},
		{"FLUSHALL, short hold released", true, false, func(t *testing.T, srv *redistest.Server, direct *redis.Client, other *dlock.Client, k kind) {
			if err := direct.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			shortHold(false)(t, srv, direct, other, k)
		}},
		{"restart, short hold released", true, true, func(t *testing.T, srv *redistest.Server, _ *redis.Client, _ *dlock.Client, k kind) {
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			direct := srv.Client(t)
			loadScripts(t, direct)
			shortHold(false)(t, srv, direct, clientOn(t, direct), k)
		}},
	}
	for _, k := range kinds {
		for _, b := range betweens {
			t.Run(fmt.Sprintf("%s/%s", k.name, b.name), func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t)
				p := faultproxy.Start(t, srv.Addr)
				direct := srv.Client(t)
				loadScripts(t, direct)
				// The release is sent again once its reply is given up on:
				// after the read timeout, or, for a restart, when the proxy
				// resumes and finds the server's end of the connection gone.
				o := &redis.Options{Addr: p.Addr(), ReadTimeout: time.Second}
				if b.pause {
					o.ReadTimeout, o.MaxRetries, o.MinRetryBackoff, o.MaxRetryBackoff = 30*time.Second, 10, 20*time.Millisecond, 200*time.Millisecond
				}
				rdb := redis.NewClient(o)
				t.Cleanup(func() { _ = rdb.Close() })
				c := clientOn(t, rdb)
				// The Client has read what Redis says of its data before
				// the hold begins (at its first use, or Check).
				if err := c.Check(ctx); err != nil {
					t.Fatal(err)
				}
				unlock, err := k.lock(c, 30*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				in := p.Inject(faultproxy.Rule{Match: script(k.script), Fault: faultproxy.SwallowReply, Times: 1})
				done := make(chan error, 1)
				go func() { done <- unlock(ctx) }()
				select {
				case <-in.Hit():
				case <-time.After(5 * time.Second):
					t.Fatal("the release never reached the proxy")
				}
				// The first copy ran and freed the lock; its reply is held
				// until the Client has given up on it.
				if b.pause {
					p.Pause()
				}
				b.apply(t, srv, direct, clientOn(t, direct), k)
				if b.pause {
					p.Resume()
				}
				err = <-done
				switch {
				case b.lost && !errors.Is(err, dlock.ErrLockLost):
					t.Errorf("Unlock retried after Redis lost its data: %v, want an error matching ErrLockLost", err)
				case !b.lost && err != nil:
					t.Errorf("Unlock retried after the lock moved on, Redis keeping its data: %v, want nil", err)
				}
			})
		}
	}
}

// TestReleaseWindow: no key is written for a release, so a retry of one whose
// reply was lost is recognised from the lock's own keys (its fence has not
// gone), and when the answer came tells the rest: before the lease's local
// deadline the lease cannot have expired, so the release freed the lock
// (success); after it, or when Redis lost the keys in between, Unlock
// cannot tell and says the lease may be lost.
func TestReleaseWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// setup starts a server behind a fault proxy and a Client whose
	// go-redis sends a request again readTimeout after its reply failed to
	// come, and keeps trying for a few seconds while Redis cannot be
	// reached.
	setup := func(t *testing.T, readTimeout time.Duration) (*redistest.Server, *faultproxy.Proxy, *dlock.Client, *redis.Client) {
		srv := redistest.Start(t)
		p := faultproxy.Start(t, srv.Addr)
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: readTimeout,
			MaxRetries: 10, MinRetryBackoff: 100 * time.Millisecond, MaxRetryBackoff: 500 * time.Millisecond})
		t.Cleanup(func() { rdb.Close() })
		direct := srv.Client(t)
		loadScripts(t, direct)
		return srv, p, clientOn(t, rdb), direct
	}

	swallow := func(p *faultproxy.Proxy) *faultproxy.Injection {
		return p.Inject(faultproxy.Rule{Match: script("release"), Fault: faultproxy.SwallowReply, Times: 1})
	}

	t.Run("lost reply, retry before the deadline", func(t *testing.T) {
		t.Parallel()
		_, p, c, rdb := setup(t, 300*time.Millisecond)
		l, err := c.Mutex("x", dlock.WithTTL(10*time.Second)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		in := swallow(p)
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock whose first reply was lost, retried before the deadline: %v", err)
		}
		checkHit(t, in)
		if errors.Is(l.Err(), dlock.ErrLockLost) {
			t.Errorf("lease Err %v, want unlocked", l.Err())
		}
		// Free, keeping the released lease's fence, and for no longer
		// than that lease.
		if err := freedErr(rdb, "dlock:{x}", 10*time.Second); err != nil {
			t.Error(err)
		}
		if s := readLock(t, rdb, "dlock:{x}"); s.Fence != l.Fence() {
			t.Errorf("lock state %+v after the release, want the fence %d kept", s, l.Fence())
		}
		if keys := stateKeys(rdb, "dlock:*"); len(keys) != 1 {
			t.Errorf("keys after the release: %v, want the lock's state alone", keys)
		}
	})

	t.Run("lost reply, retry after the deadline", func(t *testing.T) {
		t.Parallel()
		// The lease's TTL is 1s and its retry comes 2.5s after the release:
		// past the local deadline. A waiter is granted the lock meanwhile and
		// keeps it, so the fence stays: the answer is "free of this owner,
		// fence passed", which after the deadline cannot tell a release from
		// an expiry.
		_, p, c, rdb := setup(t, 2500*time.Millisecond)
		l, err := c.Mutex("x", dlock.WithTTL(time.Second)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		other := clientOn(t, rdb)
		next := inLine(t, rdb, other.Mutex("x", dlock.WithTTL(10*time.Second)).Lock, "dlock:{x}:waiters", 1)
		in := swallow(p)
		err = l.Unlock(ctx)
		checkHit(t, in)
		if !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("Unlock answered after the deadline: %v, want an error matching ErrLockLost", err)
		}
		if !errors.Is(l.Err(), dlock.ErrLockLost) {
			t.Errorf("lease Err %v, want ErrLockLost", l.Err())
		}
		o := <-next
		if o.err != nil {
			t.Fatalf("waiter: %v", o.err)
		}
		if err := o.l.Unlock(ctx); err != nil {
			t.Errorf("waiter's Unlock: %v", err)
		}
	})

	t.Run("restart between the release and its retry", func(t *testing.T) {
		t.Parallel()
		srv, p, c, rdb := setup(t, 5*time.Second)
		l, err := c.Mutex("x", dlock.WithTTL(10*time.Second)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		in := swallow(p)
		done := make(chan error, 1)
		go func() { done <- l.Unlock(ctx) }()
		if !within(5*time.Second, func() bool {
			s, err := readLockErr(rdb, "dlock:{x}")
			return in.Hits() > 0 && err == nil && s.Exists && !s.Held()
		}) {
			t.Fatal("the release never ran")
		}
		// The release ran and freed the lock; its reply is gone. Redis
		// restarts empty before go-redis sends it again.
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("Unlock retried on a server that lost the lock's keys: %v, want an error matching ErrLockLost", err)
		}
	})
}
