// Command quickstart writes a report under a dlock Mutex with the lock's fence,
// and shows what a holder that stops renewing its lease is told. It uses the
// Redis at REDIS_ADDR (default localhost:6379).
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// Report stands for what the lock protects (a row, a file, an API): it
// refuses a write whose fence is below the highest it has accepted.
type Report struct {
	mu    sync.Mutex
	fence int64
}

func (r *Report) Write(fence int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fence < r.fence {
		return fmt.Errorf("write refused: fence %d is below %d", fence, r.fence)
	}
	r.fence = fence
	return nil
}

func main() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "localhost:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := dlock.New(rdb) // one Client per process
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var report Report

	// A holder whose process stalls (a GC pause, a stopped VM) stops renewing
	// its lease. This one is made not to renew, with a TTL of one second.
	first, err := c.Mutex("report", dlock.WithTTL(time.Second), dlock.WithoutRenewal()).Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := report.Write(first.Fence()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("first holder wrote with fence", first.Fence())

	// Do waits for the lock (until ctx ends; here, until the first lease runs
	// out), renews it while fn runs, and gives fn a context that is cancelled
	// if the lock is lost.
	err = c.Mutex("report").Do(ctx, func(ctx context.Context) error {
		l, _ := dlock.LeaseFromContext(ctx)
		fmt.Println("second holder writes with fence", l.Fence())
		return report.Write(l.Fence())
	})
	if err != nil {
		log.Fatal(err)
	}

	// The first holder learns of the loss from its lease; a write it makes
	// anyway is refused.
	<-first.Done()
	fmt.Println("first holder:", first.Err())
	fmt.Println("first holder:", report.Write(first.Fence()))
}
