package dlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestAutoPipeline runs the lock through go-redis's autopipeliner: many
// goroutines of two Clients on shared and distinct locks keep mutual
// exclusion, leases are renewed, and a stopped Redis ends in errors and lost
// leases, not in a hang.
func TestAutoPipeline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	newAP := func() *dlock.Client {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 2 * time.Second})
		t.Cleanup(func() { rdb.Close() })
		// 30s: a release's reply that a loaded machine delays past a short
		// lease's deadline is reported as a possible loss, and a grant (a
		// tenth of the TTL, 1s at most) not lengthened in time is lost,
		// neither of which this test is about.
		return clientOn(t, rdb, dlock.WithAutoPipeline(), dlock.WithTTL(30*time.Second))
	}
	clients := []*dlock.Client{newAP(), newAP()}
	ctx := context.Background()

	t.Run("exclusion", func(t *testing.T) {
		const goroutines, iterations, names = 32, 40, 4
		counters := make([]int, names) // changed only under lock i
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		for g := range goroutines {
			c := clients[g%len(clients)]
			wg.Go(func() {
				for i := range iterations {
					n := (g + i) % names
					err := c.Mutex(fmt.Sprint("shared-", n)).Do(ctx, func(context.Context) error {
						v := counters[n]
						time.Sleep(10 * time.Microsecond)
						counters[n] = v + 1
						return nil
					})
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		total := 0
		for _, v := range counters {
			total += v
		}
		if total != goroutines*iterations {
			t.Fatalf("counters sum to %d, want %d: an update was lost", total, goroutines*iterations)
		}
	})

	t.Run("renewal", func(t *testing.T) {
		ttl := time.Second // renewed every 333ms, through the pipeline
		l, err := clients[0].Mutex("renewed", dlock.WithTTL(ttl)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done():
			t.Fatalf("lease lost while renewed: %v", l.Err())
		case <-time.After(4 * ttl):
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})

}
