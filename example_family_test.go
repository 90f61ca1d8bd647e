package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// A writer rebuilds a cache, then reads it back without letting another
// writer in between: it takes a read hold under its write hold (RLock with
// the write lease's context), then unlocks the write lease. Readers that were
// waiting get in as soon as the write lease goes; a writer waits for the
// read hold.
func ExampleRWMutex() {
	c, other := exampleClient(), exampleClient() // other: another process
	defer c.Close()
	defer other.Close()
	ctx := context.Background()
	rw := c.RWMutex("cache:prices")

	w, err := rw.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	wctx, cancel := w.Context(ctx)
	defer cancel()
	fmt.Println("rebuilt the cache")

	r, err := rw.RLock(wctx) // a read hold of its own, at once
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := other.RWMutex("cache:prices").TryLock(ctx); errors.Is(err, dlock.ErrNotAcquired) {
		fmt.Println("another writer waits for the reader")
	}
	if or, err := other.RWMutex("cache:prices").TryRLock(ctx); err == nil {
		fmt.Println("another reader reads beside it")
		or.Unlock(ctx)
	}
	fmt.Println("read back the cache")
	if err := r.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// rebuilt the cache
	// another writer waits for the reader
	// another reader reads beside it
	// read back the cache
}

// A deploy step waits until three workers, in other processes, have drained
// their queues. Whoever arms the latch first sets the count; the others find
// it armed.
func ExampleCountDownLatch() {
	c := exampleClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	latch := c.CountDownLatch("deploy:drained")

	armed, err := latch.TrySetCount(ctx, 3)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("armed:", armed)

	var wg sync.WaitGroup
	for range 3 { // the workers, each in its own process
		wg.Go(func() {
			w := exampleClient()
			defer w.Close()
			// drain the queue, then:
			if err := w.CountDownLatch("deploy:drained").CountDown(ctx); err != nil {
				log.Print(err)
			}
		})
	}
	if err := latch.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	wg.Wait()
	n, err := latch.Count(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("drained; count:", n)
	// Output:
	// armed: true
	// drained; count: 0
}

// A transfer between two accounts holds both accounts' locks, taken all or
// nothing and always in the same order, so two transfers in opposite
// directions cannot deadlock.
func ExampleMultiLock() {
	c := exampleClient()
	defer c.Close()
	ctx := context.Background()

	var wg sync.WaitGroup
	for _, names := range [][]string{{"account:a", "account:b"}, {"account:b", "account:a"}} {
		wg.Go(func() {
			err := c.MultiLock(names).Do(ctx, func(ctx context.Context) error {
				return nil // move the money
			})
			if err != nil {
				log.Print(err)
			}
		})
	}
	wg.Wait()

	l, err := c.MultiLock([]string{"account:b", "account:a"}).Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holds", l.Names(), "with", len(l.Fences()), "fences")
	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: holds [account:a account:b] with 2 fences
}

// A Semaphore as a concurrency limit across a fleet: of 5 jobs started at
// once, at most 2 run at any moment, wherever they run. Acquire waits in line
// for a permit.
func ExampleSemaphore_Acquire() {
	c := exampleClient()
	defer c.Close()
	ctx := context.Background()
	s := c.Semaphore("transcoder", 2)

	var (
		mu           sync.Mutex
		running, top int
		wg           sync.WaitGroup
	)
	for range 5 {
		wg.Go(func() {
			l, err := s.Acquire(ctx, 1)
			if err != nil {
				log.Print(err)
				return
			}
			defer l.Release(ctx)
			mu.Lock()
			running++
			top = max(top, running)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond) // transcode
			mu.Lock()
			running--
			mu.Unlock()
		})
	}
	wg.Wait()
	fmt.Println("more than 2 at once:", top > 2)
	// Output: more than 2 at once: false
}
