package dlock_test

// Long queues: what an acquire and a release cost Redis must not grow with
// the number of waiters behind them.

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// redisCommands returns how many commands the server has run, those inside
// scripts included, INFO and the script calls' own entries left out.
func redisCommands(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for line := range strings.SplitSeq(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || name == "info" || name == "evalsha" || name == "eval" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		c, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		n += c
	}
	return n
}

// queueKinds are the waiting kinds, each with how to hold it and how a
// newcomer tries it; its name is the kind redistest.Queue fills a queue of.
var queueKinds = []struct {
	name string
	// wakesAll: the release lets every waiter in (readers behind a
	// writer), so its cost is counted per waiter let in.
	wakesAll bool
	hold     func(c *dlock.Client) (*dlock.Lease, error)
	try      func(c *dlock.Client) error
}{
	{"Mutex", false,
		func(c *dlock.Client) (*dlock.Lease, error) { return c.Mutex("q").Lock(context.Background()) },
		func(c *dlock.Client) error { _, err := c.Mutex("q").TryLock(context.Background()); return err }},
	{"FairMutex", false,
		func(c *dlock.Client) (*dlock.Lease, error) { return c.FairMutex("q").Lock(context.Background()) },
		func(c *dlock.Client) error { _, err := c.FairMutex("q").TryLock(context.Background()); return err }},
	{"Semaphore", false,
		func(c *dlock.Client) (*dlock.Lease, error) {
			return c.Semaphore("q", 1).Acquire(context.Background(), 1)
		},
		func(c *dlock.Client) error {
			_, err := c.Semaphore("q", 1).TryAcquire(context.Background(), 1)
			return err
		}},
	{"RWMutex writers", false,
		func(c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex("q").Lock(context.Background()) },
		func(c *dlock.Client) error { _, err := c.RWMutex("q").TryLock(context.Background()); return err }},
	{"RWMutex readers", true,
		func(c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex("q").Lock(context.Background()) },
		func(c *dlock.Client) error { _, err := c.RWMutex("q").TryRLock(context.Background()); return err }},
}

// TestLongQueues: with 10,000 waiters queued, a newcomer's attempt and the
// holder's release make Redis run at most twice the commands they make with
// 10 waiters, for every kind that queues; a release that lets every waiter
// in (a writer's, with readers waiting) at most twice as many per waiter.
func TestLongQueues(t *testing.T) {
	t.Parallel()
	for _, kind := range queueKinds {
		t.Run(kind.name, func(t *testing.T) {
			cost := func(n int) (try, release int64) {
				srv := redistest.Start(t)
				rdb := srv.Client(t)
				c := clientOn(t, srv.Client(t))
				l, err := kind.hold(c)
				if err != nil {
					t.Fatal(err)
				}
				now, err := rdb.Time(context.Background()).Result()
				if err != nil {
					t.Fatal(err)
				}
				if err := redistest.Queue(context.Background(), rdb, kind.name, "q", n, now); err != nil {
					t.Fatal(err)
				}
				before := redisCommands(t, rdb)
				if err := kind.try(c); err == nil {
					t.Fatal("a newcomer took the lock from the queue")
				}
				mid := redisCommands(t, rdb)
				if err := l.Unlock(context.Background()); err != nil {
					t.Fatal(err)
				}
				return mid - before, redisCommands(t, rdb) - mid
			}
			try10, rel10 := cost(10)
			tryN, relN := cost(10000)
			t.Logf("Redis commands with 10 and 10,000 waiters: newcomer's attempt %d, %d; release %d, %d", try10, tryN, rel10, relN)
			if kind.wakesAll {
				rel10 *= 10000 / 10 // the same cost per waiter let in
			}
			if tryN > 2*try10 || relN > 2*rel10 {
				t.Errorf("a long queue costs more than twice a short one: attempt %d vs %d, release %d vs %d commands", tryN, try10, relN, rel10)
			}
		})
	}
}
