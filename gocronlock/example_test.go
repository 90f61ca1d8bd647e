package gocronlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/gocronlock"
	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"
)

// Every instance of the service runs the same scheduler; only the one that
// leads the Election "reports" runs its jobs.
func ExampleNewElector() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	elector, err := gocronlock.NewElector(c.Election("reports"), c.Name())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer elector.Close() // resigns: another instance leads at once

	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan bool, 1)
	_, err = s.NewJob(gocron.DurationJob(100*time.Millisecond), gocron.NewTask(func() {
		// Runs only while this instance leads; the term fences the
		// resource the job writes to.
		if ld := elector.Leadership(); ld != nil {
			select {
			case ran <- ld.Term() > 0:
			default:
			}
		}
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Start()
	fmt.Println("ran as the leader:", <-ran)
	_ = s.Shutdown()
	// Output: ran as the leader: true
}

// Every instance fires every job; the Locker lets one of them run each
// tick. A run that ends early keeps its lock for the min hold, so that an
// instance firing the same tick a little later skips it.
func ExampleNewLocker() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	locker, err := gocronlock.NewLocker(c, gocronlock.WithMinHold(time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close() // after the scheduler's Shutdown, before the Client's Close

	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Shutdown()

	// What gocron does when this instance and another fire the job
	// "invoice" for the same tick:
	ctx := context.Background()
	run, err := locker.Lock(ctx, "invoice")
	fmt.Println("this instance runs it:", err == nil)
	_, err = locker.Lock(ctx, "invoice")
	fmt.Println("the other skips it:", errors.Is(err, dlock.ErrNotAcquired))
	_ = run.Unlock(ctx) // the run ended at once
	_, err = locker.Lock(ctx, "invoice")
	fmt.Println("a later instance skips it too:", errors.Is(err, dlock.ErrNotAcquired))
	// Output:
	// this instance runs it: true
	// the other skips it: true
	// a later instance skips it too: true
}
