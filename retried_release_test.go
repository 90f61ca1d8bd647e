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
		name  string
		lost  bool
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
		{"short hold released", false, shortHold(false)},
		{"short hold released, its keys expired", false, shortHold(true)},
		{"FLUSHALL, short hold released", true, func(t *testing.T, srv *redistest.Server, direct *redis.Client, other *dlock.Client, k kind) {
			if err := direct.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			shortHold(false)(t, srv, direct, other, k)
		}},
		{"restart, short hold released", true, func(t *testing.T, srv *redistest.Server, _ *redis.Client, _ *dlock.Client, k kind) {
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
				rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: time.Second})
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
				b.apply(t, srv, direct, clientOn(t, direct), k)
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
