package dlock_test

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
