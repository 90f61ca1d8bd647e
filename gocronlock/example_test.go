package gocronlock_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/gocronlock"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
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
	_, err = s.NewJob(gocron.CronJob("* * * * * *", true), // every second
		gocron.NewTask(func() {
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

// Every instance of the service runs the same scheduler, and fires every
// job; the Locker lets one of them run each tick. Here two instances run
// in one process, as two processes would.
func ExampleNewLocker() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	ran := make(chan string, 1)
	skipped := make(chan error, 1)
	for _, instance := range []string{"a", "b"} {
		c, err := dlock.New(rdb, dlock.WithClientName(instance))
		if err != nil {
			fmt.Println(err)
			return
		}
		defer c.Close()

		// The min hold: shorter than the job's interval (1s), longer than
		// the instances fire a tick apart.
		locker, err := gocronlock.NewLocker(c,
			gocronlock.WithMinHold(500*time.Millisecond),
			gocronlock.WithLogger(slog.Default()))
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
		// A CronJob fires each tick at the same instant in every instance.
		_, err = s.NewJob(gocron.CronJob("* * * * * *", true), // every second
			gocron.NewTask(func() {
				select {
				case ran <- instance:
				default:
				}
			}),
			gocron.WithName("invoice"), // the lock is the dlock Mutex "gocron:invoice"
			gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
				select {
				case skipped <- err:
				default:
				}
			})))
		if err != nil {
			fmt.Println(err)
			return
		}
		s.Start()
	}
	<-ran
	err := <-skipped
	fmt.Println("one instance ran a tick, the other skipped it:", errors.Is(err, dlock.ErrNotAcquired))
	// Output: one instance ran a tick, the other skipped it: true
}

// A DurationJob fires every interval from when its scheduler started, in
// each instance at its own phase; AlignedStart starts it on a multiple of
// its interval instead, so that every instance fires each tick at the same
// instant.
func ExampleAlignedStart() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	locker, err := gocronlock.NewLocker(c, gocronlock.WithMinHold(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Shutdown()

	const every = 5 * time.Minute
	job, err := s.NewJob(gocron.DurationJob(every), gocron.NewTask(func() { /* the work */ }),
		gocron.WithName("invoice"),
		gocronlock.AlignedStart(every)) // at :00, :05, :10... in every instance
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Start()
	next, err := job.NextRun()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("the first run is on a multiple of 5 minutes:", next.Equal(next.Truncate(every)))
	// Output: the first run is on a multiple of 5 minutes: true
}
