package dlock_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// TestForeignKey puts a key of another type than dlock keeps there at a key
// of a lock of every kind, and calls what meets it: each call fails with an
// error that names the key, says dlock did not write it and advises
// WithPrefix (not Redis's bare WRONGTYPE), that is no contention
// (ErrNotAcquired), and changes nothing in Redis.
func TestForeignKey(t *testing.T) {
	t.Parallel()
	// A minute's TTL: no renewal changes a lock's keys during a case.
	c, rdb, _ := newClient(t, dlock.WithTTL(time.Minute))
	ctx := context.Background()
	put := map[string]func(key string) error{
		"string": func(key string) error { return rdb.Set(ctx, key, "another program's", 0).Err() },
		"hash":   func(key string) error { return rdb.HSet(ctx, key, "field", "value").Err() },
		"list":   func(key string) error { return rdb.LPush(ctx, key, "item").Err() },
		"set":    func(key string) error { return rdb.SAdd(ctx, key, "member").Err() },
		"zset":   func(key string) error { return rdb.ZAdd(ctx, key, redis.Z{Score: 1, Member: "member"}).Err() },
	}
	lock := func(l interface {
		TryLock(context.Context) (*dlock.Lease, error)
	}) func(context.Context) error {
		return func(ctx context.Context) error { _, err := l.TryLock(ctx); return err }
	}
	for _, tc := range []struct {
		name  string // the lock's name, its case's own
		key   string // the foreign key
		typ   string // its type
		setup func(ctx context.Context) error
		op    func(ctx context.Context) error
	}{
		{name: "m1", key: "dlock:{m1}", typ: "hash", op: lock(c.Mutex("m1"))},
		{name: "m2", key: "dlock:{m2}", typ: "list", op: lock(c.Mutex("m2"))},
		{
			// A waiter's registration, the lock held, meets a foreign queue.
			name: "m3", key: "dlock:{m3}:waiters", typ: "string",
			setup: func(ctx context.Context) error { _, err := c.Mutex("m3").Lock(ctx); return err },
			op:    func(ctx context.Context) error { _, err := c.Mutex("m3").Lock(ctx); return err },
		},
		{name: "f", key: "dlock:fair:{f}", typ: "set", op: lock(c.FairMutex("f"))},
		{name: "rw1", key: "dlock:rw:{rw1}", typ: "string", op: lock(c.RWMutex("rw1"))},
		{name: "rw2", key: "dlock:rw:{rw2}:readers", typ: "list", op: func(ctx context.Context) error {
			_, err := c.RWMutex("rw2").TryRLock(ctx)
			return err
		}},
		{name: "s1", key: "dlock:sem:{s1}", typ: "string", op: func(ctx context.Context) error {
			_, err := c.Semaphore("s1", 2).TryAcquire(ctx, 1)
			return err
		}},
		{name: "s2", key: "dlock:sem:{s2}:total", typ: "list", op: func(ctx context.Context) error {
			_, err := c.Semaphore("s2", 2).Available(ctx)
			return err
		}},
		{name: "s3", key: "dlock:sem:{s3}:total", typ: "hash", op: func(ctx context.Context) error {
			return c.Semaphore("s3", 2).SetPermits(ctx, 3)
		}},
		{name: "e1", key: "dlock:election:{e1}", typ: "hash", op: func(ctx context.Context) error {
			_, err := c.Election("e1").Campaign(ctx, "v")
			return err
		}},
		{name: "e2", key: "dlock:election:{e2}:leader", typ: "list", op: func(ctx context.Context) error {
			_, err := c.Election("e2").Leader(ctx)
			return err
		}},
		{name: "l1", key: "dlock:latch:{l1}", typ: "list", op: func(ctx context.Context) error {
			_, err := c.CountDownLatch("l1").TrySetCount(ctx, 2)
			return err
		}},
		{name: "l2", key: "dlock:latch:{l2}", typ: "zset", op: func(ctx context.Context) error {
			_, err := c.CountDownLatch("l2").Count(ctx)
			return err
		}},
		{name: "mb", key: "dlock:{mb}", typ: "hash", op: func(ctx context.Context) error {
			_, err := c.MultiLock([]string{"ma", "mb"}).TryLock(ctx)
			return err
		}},
		{name: "i1", key: "dlock:{i1}", typ: "hash", op: inspect(c, dlock.KindMutex, "i1")},
		{name: "i2", key: "dlock:rw:{i2}", typ: "string", op: inspect(c, dlock.KindRWMutex, "i2")},
		{name: "i3", key: "dlock:sem:{i3}", typ: "list", op: inspect(c, dlock.KindSemaphore, "i3")},
		{name: "i4", key: "dlock:latch:{i4}", typ: "list", op: inspect(c, dlock.KindCountDownLatch, "i4")},
		{name: "i5", key: "dlock:election:{i5}", typ: "zset", op: inspect(c, dlock.KindElection, "i5")},
	} {
		t.Run(tc.name+"/"+tc.typ, func(t *testing.T) {
			if tc.setup != nil {
				if err := tc.setup(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := put[tc.typ](tc.key); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, rdb, tc.name)
			octx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			err := tc.op(octx)
			switch {
			case err == nil:
				t.Fatalf("no error over a %s at %s", tc.typ, tc.key)
			case errors.Is(err, dlock.ErrNotAcquired):
				t.Errorf("a foreign key reads as contention: %v", err)
			case !strings.Contains(err.Error(), "key "+tc.key+" holds a "+tc.typ+", which dlock did not write"),
				!strings.Contains(err.Error(), "(give dlock its own with WithPrefix)"),
				strings.Contains(err.Error(), "WRONGTYPE"):
				t.Errorf("over a %s at %s: %v\nwant the key named, what it holds, and WithPrefix", tc.typ, tc.key, err)
			}
			if after := snapshot(t, rdb, tc.name); !maps.Equal(before, after) {
				t.Errorf("the failed call changed Redis: keys %v before, %v after", slicesOf(before), slicesOf(after))
			}
		})
	}
}

// inspect returns a call of Inspect of kind's lock name.
func inspect(c *dlock.Client, kind dlock.Kind, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.Inspect(ctx, kind, name)
		return err
	}
}

// snapshot returns every key of the locks called name, of any kind, with
// its value (DUMP).
func snapshot(t *testing.T, rdb *redis.Client, name string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, key := range rdb.Keys(ctx, "dlock:*{"+name+"}*").Val() {
		v, err := rdb.Dump(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		out[key] = v
	}
	return out
}

// slicesOf returns the keys of m.
func slicesOf(m map[string]string) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
