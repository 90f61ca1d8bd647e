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

// TestLockUnlock: a Mutex's Lock writes its state to Redis: held once by
// the lease's owner, with its fence. (What Unlock promises: the lease
// contract.)
func TestLockUnlock(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	l, err := c.Mutex("orders").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if s := readLock(t, rdb, "dlock:{orders}"); !s.Held() || s.Owner != l.Owner() || s.Holds != 1 || s.Fence != l.Fence() {
		t.Fatalf("lock state = %+v, want held once by %s with fence %d", s, l.Owner(), l.Fence())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
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

// TestFreedKeepsFence: a Mutex freed by Unlock keeps its last fence in
// Redis until the released lease would have ended. (Fences rising across
// holders, Clients, expiry, re-entry and lost keys: the lease contract.)
func TestFreedKeepsFence(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	l, err := c.Mutex("f").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := freedErr(rdb, "dlock:{f}", dlock.DefaultTTL); err != nil {
		t.Fatalf("lock not freed: %v", err)
	}
	if s := readLock(t, rdb, "dlock:{f}"); s.Exists && s.Fence != l.Fence() {
		t.Fatalf("freed lock's fence %d, want the last holder's %d", s.Fence, l.Fence())
	}
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
