package dlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
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
