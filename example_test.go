package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// The examples run against the redis-server at REDIS_ADDR (the tests start
// one of their own and set it) and check what they print.

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
	// Output: report built
}

// exampleRedis is the go-redis client the examples share, as the Clients of
// one process may.
var exampleRedis = sync.OnceValue(func() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
})

// exampleClient returns a Client made as the package example makes one: one per
// process, or per part of it that needs its own settings.
func exampleClient(opts ...dlock.Option) *dlock.Client {
	c, err := dlock.New(exampleRedis(), opts...)
	if err != nil {
		log.Fatal(err)
	}
	return c
}

func ExampleMutex_Lock() {
	c := exampleClient() // dlock.New(rdb)
	defer c.Close()
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
		fmt.Println("held")
	}
	// Output: held
}

// Of two instances of a job that run at the same moment, one does the work
// and the other leaves it.
func ExampleMutex_TryLock() {
	a, b := exampleClient(), exampleClient() // in two processes
	defer a.Close()
	defer b.Close()
	ctx := context.Background()

	l, err := a.Mutex("cron:cleanup").TryLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("a: cleaning up")

	_, err = b.Mutex("cron:cleanup").TryLock(ctx)
	if errors.Is(err, dlock.ErrNotAcquired) {
		fmt.Println("b: another instance runs it")
	}
	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// a: cleaning up
	// b: another instance runs it
}

// A Lease's fence lets the protected resource turn away a holder that lost
// its lease without noticing (a long GC pause, a stopped VM): the resource
// accepts a write only with a fence above every fence it has seen. Here the
// first holder stalls, the lock is taken from it (Client.ForceRelease, as
// the people on call would) and given to another process; the stalled
// holder's late write is refused.
func ExampleLease_Fence() {
	c, other := exampleClient(), exampleClient()
	defer c.Close()
	defer other.Close()
	store := exampleRedis() // the protected resource
	ctx := context.Background()

	// KEYS[1]: the account; ARGV[1]: the fence; ARGV[2]: the new balance.
	fencedSet := redis.NewScript(`
if tonumber(ARGV[1]) <= tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'balance', ARGV[2])
return 1`)
	write := func(who string, l *dlock.Lease, balance int) {
		ok, err := fencedSet.Run(ctx, store, []string{"account:7"}, l.Fence(), balance).Int()
		switch {
		case err != nil:
			log.Fatal(err)
		case ok == 0:
			fmt.Println(who + ": rejected, a newer holder has written since")
		default:
			fmt.Println(who + ": written")
		}
	}

	stalled, err := c.Mutex("account:7").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.ForceRelease(ctx, dlock.KindMutex, "account:7"); err != nil {
		log.Fatal(err)
	}
	l, err := other.Mutex("account:7").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	write("new holder", l, 100)
	write("stalled holder", stalled, 50)
	// Output:
	// new holder: written
	// stalled holder: rejected, a newer holder has written since
}

// The function Do runs finds the Lease it runs under in its context, and
// hands the Lease's fence to the resource with each write: here a record
// that refuses a fence below the last one it accepted. Each Do is a new
// acquisition with a higher fence; a holder that stalled past its lease and
// writes late, with the fence of its time, is refused.
func ExampleLeaseFromContext() {
	c := exampleClient()
	defer c.Close()
	store := exampleRedis() // the protected resource
	ctx := context.Background()

	// KEYS[1]: the record; ARGV[1]: the fence; ARGV[2]: the text.
	fencedSet := redis.NewScript(`
if tonumber(ARGV[1]) <= tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'text', ARGV[2])
return 1`)
	write := func(ctx context.Context, fence int64, text string) {
		ok, err := fencedSet.Run(ctx, store, []string{"doc:7"}, fence, text).Int()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s written: %v\n", text, ok == 1)
	}

	var first int64
	for _, text := range []string{"draft", "final"} {
		err := c.Mutex("doc:7").Do(ctx, func(ctx context.Context) error {
			l, ok := dlock.LeaseFromContext(ctx)
			if !ok {
				return errors.New("no lease in Do's context")
			}
			if first == 0 {
				first = l.Fence()
			}
			write(ctx, l.Fence(), text)
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	write(ctx, first, "late draft") // the first holder, woken from a long pause
	// Output:
	// draft written: true
	// final written: true
	// late draft written: false
}

// Re-entry: code that holds the lock can call code that takes it again, when
// the context from Do (or Lease.Context) is passed down.
func ExampleLease_Context() {
	c := exampleClient()
	defer c.Close()
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
	// Output: true
}

func buildReport(context.Context) error {
	fmt.Println("report built")
	return nil
}

// A FairMutex serves waiters in the order they arrived: here, print jobs from
// many processes come out of the one printer in the order they were sent.
func ExampleFairMutex() {
	c := exampleClient()
	defer c.Close()
	ctx := context.Background()

	err := c.FairMutex("printer").Do(ctx, func(ctx context.Context) error {
		return printJob(ctx)
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: printing
}

// A Semaphore bounds how many processes do something at once: here, at most
// 10 calls to a rate-limited partner API across the whole fleet. The permits of
// a process that dies come back after the lease's TTL.
func ExampleSemaphore() {
	c := exampleClient()
	defer c.Close()
	ctx := context.Background()

	s := c.Semaphore("partner-api", 10, dlock.WithTTL(10*time.Second))
	l, err := s.Acquire(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	callPartner(ctx)
	left, err := s.Available(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("permits left:", left)
	// Output: permits left: 9
}

func printJob(context.Context) error { fmt.Println("printing"); return nil }
func callPartner(context.Context)    {}

func ExampleNewRedLock() {
	// Five independent Redis servers: REDLOCK_ADDRS="10.0.0.1:6379,...".
	var nodes []redis.UniversalClient
	for _, addr := range strings.Split(os.Getenv("REDLOCK_ADDRS"), ",") {
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
	pay(l.Fence()) // the payment service refuses fences below the last it saw
	// Output: paid
}

func pay(fence int64) {
	if fence > 0 {
		fmt.Println("paid")
	}
}

// What the people on call see of a held lock, and of one that waits (the
// `dlock inspect` command prints the same).
func ExampleClient_Inspect() {
	c, other := exampleClient(), exampleClient()
	defer c.Close()
	defer other.Close()
	ctx := context.Background()

	l, err := c.Mutex("invoice:9").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	waited := make(chan struct{})
	go func() { // another process waits for the lock
		defer close(waited)
		if wl, err := other.Mutex("invoice:9").Lock(wctx); err == nil {
			wl.Unlock(ctx)
		}
	}()
	st := waitForWaiter(ctx, c, "invoice:9")
	h := st.Holders[0]
	fmt.Println(st.Kind, st.Name, "held by", len(st.Holders), "waited for by", len(st.Waiters))
	fmt.Println("holder is l:", h.Owner == l.Owner(), "client:", h.Client == c.ID(), "fence:", h.Fence == l.Fence())
	fmt.Println("waiter is other:", st.Waiters[0].Client == other.ID())

	cancel()
	<-waited
	l.Unlock(ctx)
	// Output:
	// Mutex invoice:9 held by 1 waited for by 1
	// holder is l: true client: true fence: true
	// waiter is other: true
}

// waitForWaiter inspects the Mutex name until a waiter is queued.
func waitForWaiter(ctx context.Context, c *dlock.Client, name string) *dlock.LockState {
	for {
		st, err := c.Inspect(ctx, dlock.KindMutex, name)
		if err != nil {
			log.Fatal(err)
		}
		if len(st.Waiters) > 0 {
			return st
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Every lock whose name matches a pattern, as `dlock ls` lists them.
func ExampleClient_Locks() {
	c := exampleClient()
	defer c.Close()
	ctx := context.Background()

	l, err := c.Mutex("shipment:1").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	s, err := c.Semaphore("shipment:pickers", 3).Acquire(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Release(ctx)

	for id, err := range c.Locks(ctx, "shipment:*") {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(id.Kind, id.Name)
	}
	// Unordered output:
	// Mutex shipment:1
	// Semaphore shipment:pickers
}

// Freeing a lock whose holder is stuck: the holder learns at its next
// renewal (its Done closes), and the fence moves on so that a resource
// refuses the holder's writes from then on (see Lease.Fence's example).
func ExampleClient_ForceRelease() {
	stuck := exampleClient(dlock.WithTTL(900 * time.Millisecond))
	c := exampleClient()
	defer stuck.Close()
	defer c.Close()
	ctx := context.Background()

	l, err := stuck.Mutex("import:feed").Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	ev, err := c.ForceRelease(ctx, dlock.KindMutex, "import:feed")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("evicted:", len(ev.Evicted), "fence moved past it:", ev.Fence > l.Fence())

	<-l.Done() // at its next renewal, a third of its TTL on
	fmt.Println("holder told:", errors.Is(l.Err(), dlock.ErrLockLost))
	// Output:
	// evicted: 1 fence moved past it: true
	// holder told: true
}
