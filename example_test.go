package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// The examples need a Redis server, so they are compiled but not run.

func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// ctx bounds the wait for the lock; the lock itself is held, and renewed,
	// until fn returns.
	err = c.Mutex("report:daily").Do(ctx, func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost.
		return buildReport(ctx)
	})
	switch {
	case errors.Is(err, dlock.ErrNotAcquired):
		fmt.Println("another process is building the report")
	case err != nil:
		log.Fatal(err)
	}
}

func ExampleMutex_Lock() {
	var c *dlock.Client // from dlock.New
	ctx := context.Background()

	l, err := c.Mutex("inventory:sku-42", dlock.WithTTL(10*time.Second)).Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx) // works even if ctx is cancelled by then

	select {
	case <-l.Done():
		log.Printf("lock lost: %v", l.Err())
	default:
		// still held
	}
}

func ExampleMutex_TryLock() {
	var c *dlock.Client // from dlock.New
	ctx := context.Background()

	l, err := c.Mutex("cron:cleanup").TryLock(ctx)
	if errors.Is(err, dlock.ErrNotAcquired) {
		return // another instance runs it
	}
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	// ... the job ...
}

// A Lease's fence lets the protected resource turn away a holder that lost
// its lease without noticing (a long GC pause, a stopped VM): the resource
// accepts a write only with a fence above every fence it has seen.
func ExampleLease_Fence() {
	var c *dlock.Client     // from dlock.New
	var store *redis.Client // the protected resource
	ctx := context.Background()

	l, err := c.Mutex("account:7").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)

	// KEYS[1]: the account; ARGV[1]: the fence; ARGV[2]: the new balance.
	fencedSet := redis.NewScript(`
if tonumber(ARGV[1]) <= tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'balance', ARGV[2])
return 1`)
	ok, err := fencedSet.Run(ctx, store, []string{"account:7"}, l.Fence(), 100).Int()
	if err != nil {
		log.Fatal(err)
	}
	if ok == 0 {
		log.Print("rejected: a newer holder has written since")
	}
}

// Re-entry: code that holds the lock can call code that takes it again, when
// the context from Do (or Lease.Context) is passed down.
func ExampleLease_Context() {
	var c *dlock.Client // from dlock.New
	ctx := context.Background()
	m := c.Mutex("order:42")

	l, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	lctx, cancel := l.Context(ctx)
	defer cancel()

	inner, err := m.Lock(lctx) // re-enters at once: same owner, same fence
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(inner.Fence() == l.Fence())
	inner.Unlock(ctx) // the lock stays held by l
}

func buildReport(context.Context) error { return nil }

// A FairMutex serves waiters in the order they arrived: here, print jobs from
// many processes come out of the one printer in the order they were sent.
func ExampleFairMutex() {
	var c *dlock.Client // from dlock.New
	ctx := context.Background()

	err := c.FairMutex("printer").Do(ctx, func(ctx context.Context) error {
		return printJob(ctx)
	})
	if err != nil {
		log.Fatal(err)
	}
}

// A Semaphore bounds how many processes do something at once: here, at most
// 10 calls to a rate-limited partner API across the whole fleet. The permits of
// a process that dies come back after the lease's TTL.
func ExampleSemaphore() {
	var c *dlock.Client // from dlock.New
	ctx := context.Background()

	s := c.Semaphore("partner-api", 10, dlock.WithTTL(10*time.Second))
	l, err := s.Acquire(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	callPartner(ctx)
}

func printJob(context.Context) error { return nil }
func callPartner(context.Context)    {}

func ExampleNewRedLock() {
	var nodes []redis.UniversalClient
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379", "10.0.0.5:6379"} {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 500 * time.Millisecond})
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}
	c, err := dlock.NewRedLock(nodes, dlock.WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	l, err := c.Mutex("payout:42").Lock(ctx) // held once a majority holds it
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	fmt.Println("fence for the payment service:", l.Fence())
}
