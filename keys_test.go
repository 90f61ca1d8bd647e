package dlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// keysPerMutexName is what a Mutex name in use may keep in Redis (doc.go,
// "# Keys"): its lock hash, its fence string, its queue and the queue's
// alive hash.
const keysPerMutexName = 4

// TestKeysScaleWithNames: 64 goroutines take and release Mutexes over 1,000
// names, 20,000 times in all; Redis never holds more than 4 keys per name,
// during the run or after it (before any TTL could pass), and no key is a
// per-operation marker. Keys scale with names, never with operations.
func TestKeysScaleWithNames(t *testing.T) {
	t.Parallel()
	redistest.Full(t, "thousands of names")
	const (
		workers = 64
		names   = 1000
		ops     = 20000
		bound   = keysPerMutexName * names
	)
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := clientOn(t, srv.Client(t))

	// DBSIZE every 200 ms on a connection of its own while the goroutines run.
	var peak atomic.Int64
	sample := func() {
		n, err := rdb.DBSize(ctx).Result()
		if err != nil {
			t.Errorf("DBSIZE: %v", err)
			return
		}
		peak.Store(max(peak.Load(), n))
	}
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				sample()
			}
		}
	})

	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= ops {
				name := fmt.Sprintf("k:%d", rand.IntN(names))
				l, err := c.Mutex(name).Lock(ctx)
				if err != nil {
					errs <- fmt.Errorf("Lock %s: %w", name, err)
					return
				}
				if err := l.Unlock(ctx); err != nil {
					errs <- fmt.Errorf("Unlock %s: %w", name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	sampler.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Right after the last release: the default TTL is 30 s, so nothing that
	// these operations wrote has expired yet.
	end, err := rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	peak.Store(max(peak.Load(), end))
	if p := peak.Load(); p > bound {
		t.Errorf("DBSIZE peaked at %d during %d operations over %d names; want at most %d × %d = %d: keys scale with names, never with operations",
			p, ops, names, keysPerMutexName, names, bound)
	}
	if end > bound {
		t.Errorf("%d keys after %d operations over %d names; want at most %d", end, ops, names, bound)
	}
	var markers []string
	iter := rdb.Scan(ctx, 0, "*:done:*", 1000).Iterator()
	for iter.Next(ctx) {
		markers = append(markers, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(markers) > 0 {
		t.Errorf("%d keys match *:done:* after %d operations (one is %q); want none: no operation writes a key of its own", len(markers), ops, markers[0])
	}
}

// TestMaxNameLen: a name of MaxNameLen bytes, all of them escaped in the
// keys, works for every kind of lock, under a prefix of MaxNameLen bytes too;
// one byte more is refused before anything reaches Redis, and a 64 MiB name
// (once accepted, leaving Redis about 160 MB larger until its keys expired)
// costs Redis nothing.
func TestMaxNameLen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	name := strings.Repeat("{", dlock.MaxNameLen) // each '{' is 3 bytes in the keys
	for _, prefix := range []string{dlock.DefaultPrefix, strings.Repeat("p", dlock.MaxNameLen)} {
		c := clientOn(t, rdb, dlock.WithPrefix(prefix))
		locks := map[string]func(string) (func(context.Context) error, error){
			"Mutex":     func(n string) (func(context.Context) error, error) { return unlockOf(c.Mutex(n).Lock(ctx)) },
			"FairMutex": func(n string) (func(context.Context) error, error) { return unlockOf(c.FairMutex(n).TryLock(ctx)) },
			"RWMutex":   func(n string) (func(context.Context) error, error) { return unlockOf(c.RWMutex(n).RLock(ctx)) },
			"Semaphore": func(n string) (func(context.Context) error, error) {
				return unlockOf(c.Semaphore(n, 2).Acquire(ctx, 1))
			},
			"MultiLock": func(n string) (func(context.Context) error, error) {
				l, err := c.MultiLock([]string{n, "other"}).Lock(ctx)
				if err != nil {
					return nil, err
				}
				return l.Unlock, nil
			},
			"CountDownLatch": func(n string) (func(context.Context) error, error) {
				_, err := c.CountDownLatch(n).TrySetCount(ctx, 1)
				return c.CountDownLatch(n).CountDown, err
			},
		}
		for kind, lock := range locks {
			release, err := lock(name)
			if err != nil {
				t.Fatalf("%s of a %d-byte name, prefix of %d bytes: %v", kind, len(name), len(prefix), err)
			}
			if kind == "Mutex" {
				st, err := c.Inspect(ctx, dlock.KindMutex, name)
				if err != nil || st.Name != name || len(st.Holders) != 1 {
					t.Errorf("Inspect of the held %d-byte name: %+v, %v", len(name), st, err)
				}
			}
			if err := release(ctx); err != nil {
				t.Errorf("%s of a %d-byte name: release: %v", kind, len(name), err)
			}
			switch release, err := lock(name + "{"); {
			case err == nil:
				t.Errorf("%s of a %d-byte name succeeded", kind, len(name)+1)
				release(ctx)
			case !strings.Contains(err.Error(), "MaxNameLen"):
				t.Errorf("%s of a %d-byte name: %v; want an error naming MaxNameLen", kind, len(name)+1, err)
			}
		}
	}
	if _, err := dlock.New(rdb, dlock.WithPrefix(strings.Repeat("p", dlock.MaxNameLen+1))); err == nil {
		t.Errorf("New with a prefix of %d bytes succeeded", dlock.MaxNameLen+1)
	}

	before := usedMemory(t, rdb)
	keys := len(allKeys(t, rdb)) // the Clients' records above are written in the background
	c := clientOn(t, rdb)
	huge := strings.Repeat("n", 64<<20)
	switch _, err := c.Mutex(huge).Lock(ctx); {
	case err == nil:
		t.Errorf("Lock of a 64 MiB name succeeded")
	case !strings.Contains(err.Error(), "MaxNameLen"):
		t.Errorf("Lock of a 64 MiB name: %v; want an error naming MaxNameLen", err)
	}
	if n := len(allKeys(t, rdb)); n != keys {
		t.Errorf("Lock of a 64 MiB name: Redis holds %d keys, %d before", n, keys)
	}
	if grew := usedMemory(t, rdb) - before; grew > 1<<20 {
		t.Errorf("Lock of a 64 MiB name: Redis's used_memory grew by %d bytes", grew)
	}
}

// unlockOf returns the Unlock of the Lease of an acquire that succeeded.
func unlockOf(l *dlock.Lease, err error) (func(context.Context) error, error) {
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

// usedMemory returns Redis's used_memory, in bytes.
func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO memory has no used_memory")
	return 0
}
