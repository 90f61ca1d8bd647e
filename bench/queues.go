package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// ---------- long queues ----------

// queueResult is what a newcomer's attempt and the holder's release cost
// Redis with a short and a long queue behind the holder.
type queueResult struct {
	Kind       string  `json:"kind"`
	Short      int     `json:"short"` // waiters in the short queue
	Long       int     `json:"long"`
	CmdsShort  float64 `json:"redis_commands_short"` // median over repetitions
	CmdsLong   float64 `json:"redis_commands_long"`
	UsecShort  float64 `json:"script_us_short"` // Redis's time in the two script calls
	UsecLong   float64 `json:"script_us_long"`
	Reps       int     `json:"repetitions"`
	SameResult bool    `json:"same_result"` // the newcomer was refused and the release succeeded every time
}

// queueKind is a dlock kind that queues: how to hold it and how a newcomer
// tries it; its name is the kind redistest.Queue fills a queue of, with live
// waiters of Clients that do not exist (their grants go unanswered).
type queueKind struct {
	name string
	hold func(c *dlock.Client, key string) (*dlock.Lease, error)
	try  func(c *dlock.Client, key string) error
}

var queueKinds = []queueKind{
	{"Mutex",
		func(c *dlock.Client, key string) (*dlock.Lease, error) {
			return c.Mutex(key).Lock(context.Background())
		},
		func(c *dlock.Client, key string) error {
			_, err := c.Mutex(key).TryLock(context.Background())
			return err
		}},
	{"FairMutex",
		func(c *dlock.Client, key string) (*dlock.Lease, error) {
			return c.FairMutex(key).Lock(context.Background())
		},
		func(c *dlock.Client, key string) error {
			_, err := c.FairMutex(key).TryLock(context.Background())
			return err
		}},
	{"Semaphore",
		func(c *dlock.Client, key string) (*dlock.Lease, error) {
			return c.Semaphore(key, 1).Acquire(context.Background(), 1)
		},
		func(c *dlock.Client, key string) error {
			_, err := c.Semaphore(key, 1).TryAcquire(context.Background(), 1)
			return err
		}},
	{"RWMutex writers",
		func(c *dlock.Client, key string) (*dlock.Lease, error) {
			return c.RWMutex(key).Lock(context.Background())
		},
		func(c *dlock.Client, key string) error {
			_, err := c.RWMutex(key).TryLock(context.Background())
			return err
		}},
}

// runQueues measures, for every kind that queues, a newcomer's attempt and
// the holder's release with short and long queues behind the holder: the
// Redis commands they run (inside scripts too) and the time Redis spends in
// their scripts, medians over reps fresh locks each.
func runQueues(cfg config, short, long, reps int) ([]queueResult, error) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: cfg.addr})
	defer rdb.Close()
	c, err := dlock.New(redis.NewClient(&redis.Options{Addr: cfg.addr}))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var out []queueResult
	for ki, kind := range queueKinds {
		r := queueResult{Kind: kind.name, Short: short, Long: long, Reps: reps, SameResult: true}
		measure := func(n, rep int) (cmds, usec float64, err error) {
			key := fmt.Sprintf("queue:%d:%d:%d", ki, n, rep)
			l, err := kind.hold(c, key)
			if err != nil {
				return 0, 0, err
			}
			now, err := rdb.Time(ctx).Result()
			if err != nil {
				return 0, 0, err
			}
			if err := redistest.Queue(ctx, rdb, kind.name, key, n, now); err != nil {
				return 0, 0, err
			}
			before := mustSnapshot(cfg.admin)
			if err := kind.try(c, key); !errors.Is(err, dlock.ErrNotAcquired) {
				r.SameResult = false
			}
			if err := l.Unlock(ctx); err != nil {
				r.SameResult = false
			}
			d := mustSnapshot(cfg.admin).sub(before)
			return float64(d.calls), float64(d.scriptUsec), nil
		}
		var cs, cl, us, ul []float64
		for rep := range reps {
			for _, n := range []int{short, long} {
				cmds, usec, err := measure(n, rep)
				if err != nil {
					return nil, fmt.Errorf("%s with %d waiters: %w", kind.name, n, err)
				}
				if n == short {
					cs, us = append(cs, cmds), append(us, usec)
				} else {
					cl, ul = append(cl, cmds), append(ul, usec)
				}
			}
		}
		r.CmdsShort, r.CmdsLong, r.UsecShort, r.UsecLong = median(cs), median(cl), median(us), median(ul)
		out = append(out, r)
		fmt.Fprintf(os.Stderr, "  %s: %.0f / %.0f commands, %.0f / %.0f µs\n", kind.name, r.CmdsShort, r.CmdsLong, r.UsecShort, r.UsecLong)
	}
	return out, nil
}

// ---------- MultiLock over overlapping sets ----------

// runMulti runs clients dlock Clients, each taking a MultiLock over a random
// 2 of names names, in a loop, for window per round: every wait, checked
// mutual exclusion per name, and critical sections per second.
func runMulti(cfg config, clients, names int) (result, error) {
	var (
		mu       sync.Mutex
		waits    []time.Duration
		cs       int64
		violated atomic.Int64
		errs     atomic.Int64
		roundCS  []float64
	)
	occ := make([]atomic.Int32, names)
	cls := make([]*dlock.Client, clients)
	for i := range cls {
		rdb := redis.NewClient(&redis.Options{Addr: cfg.addr})
		defer rdb.Close()
		c, err := dlock.New(rdb)
		if err != nil {
			return result{}, err
		}
		defer c.Close()
		cls[i] = c
	}
	for round := range cfg.csRounds {
		start := time.Now()
		end := start.Add(cfg.csWindow)
		ctx, cancel := context.WithDeadline(context.Background(), end.Add(2*time.Second))
		stop := time.AfterFunc(cfg.csWindow, cancel)
		var n atomic.Int64
		var wg sync.WaitGroup
		for i, c := range cls {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(round)))
				for time.Now().Before(end) {
					a := rng.IntN(names)
					b := (a + 1 + rng.IntN(names-1)) % names
					set := []string{"multi:" + strconv.Itoa(a), "multi:" + strconv.Itoa(b)}
					t0 := time.Now()
					l, err := c.MultiLock(set).Lock(ctx)
					w := time.Since(t0)
					if err != nil {
						if ctx.Err() == nil {
							errs.Add(1)
						} else {
							mu.Lock()
							waits = append(waits, w) // unfinished at the window's end
							mu.Unlock()
						}
						return
					}
					for _, x := range []int{a, b} {
						if occ[x].Add(1) != 1 {
							violated.Add(1)
						}
					}
					time.Sleep(100 * time.Microsecond)
					for _, x := range []int{a, b} {
						occ[x].Add(-1)
					}
					if err := l.Unlock(context.Background()); err != nil {
						errs.Add(1)
					}
					n.Add(1)
					mu.Lock()
					waits = append(waits, w)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		stop.Stop()
		cancel()
		cs += n.Load()
		roundCS = append(roundCS, float64(n.Load())/time.Since(start).Seconds())
	}
	ok := violated.Load() == 0
	r := result{Scenario: "multilock", Library: "dlock", Variant: "default", MutexOK: &ok, errors: errs.Load(), Samples: len(roundCS)}
	if !ok {
		fmt.Fprintf(os.Stderr, "\n!!!!! MUTUAL EXCLUSION BROKEN: multilock: %d overlaps — figures withheld !!!!!\n\n", violated.Load())
		return r, nil
	}
	if len(waits) > 0 {
		var sum time.Duration
		for _, w := range waits {
			sum += w
		}
		r.MeanWaitus = f(us(sum / time.Duration(len(waits))))
		r.MaxWaitus = f(us(slices.Max(waits)))
		r.P99us = f(us(pct(waits, .99)))
	}
	spread(roundCS, &r.OpsPerS, &r.OpsPerSMin, &r.OpsPerSMax)
	return r, nil
}
