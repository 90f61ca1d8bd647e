package dlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// chaosReport is what a chaos worker prints when done.
type chaosReport struct {
	Sections   int64 // critical sections entered
	Extends    int64 // Lease.Extend calls that succeeded
	ExtendErrs map[string]int64
	Accepted   int64 // fenced writes the resource accepted
	Stale      int64 // fenced writes it rejected: another holder had written with a higher fence
	Noticed    int64 // stale writes whose lease was reported lost within TTL/3 + 300ms of running
	Stopped    int64 // of which the process was stopped between the write and the report
	Unnoticed  []string
	LostInside int64 // critical sections during which the lease was lost
	LockErrors map[string]int64
	UnlockErrs map[string]int64
	FirstOther string // the first error that is none of the package's
}

// chaosWorker runs p.Goroutines goroutines that take p's lock (or one of
// p.Names locks) over and over for p.For, each critical section a fenced
// write to the lock's resource, some (with p.Extend) after a Lease.Extend
// that shortens or lengthens the lease. A write the resource rejects means
// another holder got the lock, with a higher fence, while this one thought
// it held it: the lease must then be reported lost within one renewal period
// (a third of the longest TTL it asked for) and a margin, or the client
// believed longer than Redis held it. The period counts the time the process
// ran: one that is stopped (the chaos test stops holders) notices nothing
// until it runs again, however long ago its lease's deadline passed.
func chaosWorker(c *dlock.Client, resRDB *redis.Client, p workerParams) error {
	ctx := context.Background()
	locks := []locker{p.lock(c)}
	resources := []string{"resource"}
	for i := 1; i < p.Names; i++ {
		q := p
		q.Name = fmt.Sprintf("%s%d", p.Name, i)
		locks, resources = append(locks, q.lock(c)), append(resources, "resource"+strconv.Itoa(i))
	}
	rep := chaosReport{LockErrors: map[string]int64{}, UnlockErrs: map[string]int64{}, ExtendErrs: map[string]int64{}}
	var mu sync.Mutex
	count := func(into map[string]int64, err error) {
		key := "other"
		switch {
		case err == nil:
			return
		case errors.Is(err, dlock.ErrNotAcquired):
			key = "not acquired"
		case errors.Is(err, dlock.ErrLockLost):
			key = "lost"
		case errors.Is(err, dlock.ErrNotHeld):
			key = "not held"
		}
		mu.Lock()
		into[key]++
		if key == "other" && rep.FirstOther == "" {
			rep.FirstOther = err.Error()
		}
		mu.Unlock()
	}
	end := time.Now().Add(p.For)
	stops := watchStops()
	defer stops.stop()
	var wg sync.WaitGroup
	for range p.Goroutines {
		wg.Go(func() {
			for time.Now().Before(end) {
				i := rand.IntN(len(locks))
				lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				l, err := locks[i].Lock(lctx)
				cancel()
				if err != nil {
					count(rep.LockErrors, err)
					continue
				}
				atomic.AddInt64(&rep.Sections, 1)
				// Tell the test who holds the lock, so that it can stop the
				// holder; work under the lock; then the write.
				_ = resRDB.Set(ctx, "holder", os.Getpid(), 0).Err()
				work := time.Duration(rand.IntN(10000)) * time.Microsecond
				if rand.IntN(10) == 0 {
					work = time.Duration(200+rand.IntN(400)) * time.Millisecond // across a renewal
				}
				time.Sleep(work)
				longest := p.TTL
				if p.Extend && rand.IntN(4) == 0 {
					// Between a third of the TTL and twice the TTL: the
					// renewals that follow, and those in flight, run with
					// the old TTL or the new one.
					ttl := p.TTL/3 + time.Duration(rand.Int64N(int64(5*p.TTL/3)))
					longest = max(longest, ttl)
					if err := l.Extend(ctx, ttl); err != nil {
						count(rep.ExtendErrs, err)
					} else {
						atomic.AddInt64(&rep.Extends, 1)
					}
				}
				acc, err := fencedWrite.Run(ctx, resRDB, []string{resources[i]}, l.Fence()).Int()
				switch {
				case err != nil:
					count(rep.LockErrors, err)
				case acc == 1:
					atomic.AddInt64(&rep.Accepted, 1)
				default:
					atomic.AddInt64(&rep.Stale, 1)
					wrote, window, wait := time.Now(), longest/3+300*time.Millisecond, longest/3+3*time.Second
					var late string
					select {
					case <-l.Done():
						took := time.Since(wrote)
						stopped := stops.within(wrote, time.Now())
						if ran := took - stopped; ran > window {
							late = fmt.Sprintf("lease reported lost %v after a higher fence wrote, %v of it running (allowed: %v)", took, ran, window)
						} else if stopped > 0 {
							atomic.AddInt64(&rep.Stopped, 1)
						}
					case <-time.After(wait):
						late = fmt.Sprintf("lease still held %v after a higher fence wrote", wait)
					}
					if late == "" {
						atomic.AddInt64(&rep.Noticed, 1)
					} else {
						mu.Lock()
						rep.Unnoticed = append(rep.Unnoticed, fmt.Sprintf("fence %d: %s", l.Fence(), late))
						mu.Unlock()
					}
				}
				if l.Err() != nil {
					atomic.AddInt64(&rep.LostInside, 1)
				}
				if err := l.Unlock(ctx); err != nil {
					count(rep.UnlockErrs, err)
				}
			}
		})
	}
	wg.Wait()
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// stopWatch tells how long this process did not run: a goroutine that ticks
// every 5 ms notes every gap between its ticks longer than stopGap, which
// only a stopped process (SIGSTOP) or a stalled machine makes.
type stopWatch struct {
	done chan struct{}
	mu   sync.Mutex
	last time.Time      // the last tick
	gaps [][2]time.Time // the gaps noted: from the tick before to the tick after
}

const stopGap = 50 * time.Millisecond

func watchStops() *stopWatch {
	w := &stopWatch{done: make(chan struct{}), last: time.Now()}
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
				now := time.Now() // the tick's own time is when it was due
				w.mu.Lock()
				if now.Sub(w.last) > stopGap {
					w.gaps = append(w.gaps, [2]time.Time{w.last, now})
				}
				w.last = now
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *stopWatch) stop() { close(w.done) }

// within returns how long, of from to to, the process did not run: the
// gaps noted, and the one it may be in the middle of noting (the process
// runs again, but the ticking goroutine has not yet).
func (w *stopWatch) within(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	gaps := w.gaps
	if to.Sub(w.last) > stopGap {
		gaps = append(gaps[:len(gaps):len(gaps)], [2]time.Time{w.last, to})
	}
	var d time.Duration
	for _, g := range gaps {
		if a, b := later(g[0], from), earlier(g[1], to); b.After(a) {
			d += b.Sub(a)
		}
	}
	return d
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
