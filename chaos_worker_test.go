package dlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// Environment of a chaos worker, beside worker_test.go's (workerParams has
// no field for them).
const (
	// envChaosKind is the kind of lock the worker takes, a dlock.Kind
	// (Mutex, FairMutex, RWMutex, Semaphore, Election); unset: a Mutex, or a
	// FairMutex with workerParams.Fair.
	envChaosKind = "DLOCK_CHAOS_KIND"
	// envChaosMutants lists, comma-separated, the chaosMutants the worker
	// runs, which break what the chaos run checks from its history.
	envChaosMutants = "DLOCK_CHAOS_MUTANTS"
)

// The worker's own mutants, beside the broken scripts of dlock.UseMutant.
const (
	// A release that returns an error matching ErrLockLost is recorded as
	// having returned nil: an Unlock (Release, Resign) that reports success
	// for a hold it had lost.
	mutantUnlockHidesLoss = "unlock-hides-loss"
	// After its last section the worker takes the Mutex ghostName for
	// ghostTTLs TTLs, without renewal, and exits holding it: a hold that
	// outlives every owner, as a late acquire makes one.
	mutantGhostAfterEnd = "ghost-after-end"
)

// ghostName is the lock mutantGhostAfterEnd leaves held, for ghostTTLs of
// the worker's TTL: longer than the chaos run waits after the end (the
// longest TTL and a margin), shorter than it waits for Redis to empty.
const (
	ghostName = "chaos-ghost"
	ghostTTLs = 6
)

// chaosReport is what a chaos worker prints when done.
type chaosReport struct {
	Kind       dlock.Kind
	Pid        int
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
	// History is every section, in the order their releases returned.
	History []section
	// Ghost is the hold mutantGhostAfterEnd left, if it left one.
	Ghost string `json:",omitempty"`
}

// chaosLock is a lock of one kind, as the chaos workers and the chaos run
// take it.
type chaosLock struct {
	name      string
	mutex     locker // a Mutex or FairMutex
	rw        *dlock.RWMutex
	sem       *dlock.Semaphore
	el        *dlock.Election
	permits   int64 // the Semaphore's total
	readShare int   // percent of an RWMutex's holds that are reads
}

// chaosKind is the kind of lock a chaos worker takes (envChaosKind).
func chaosKind(p workerParams) dlock.Kind {
	if k := os.Getenv(envChaosKind); k != "" {
		return dlock.Kind(k)
	}
	if p.Fair {
		return dlock.KindFairMutex
	}
	return dlock.KindMutex
}

// chaosLockOf returns the lock of kind called name on c, with p's Semaphore
// total and share of reads.
func chaosLockOf(c *dlock.Client, kind dlock.Kind, name string, p workerParams) (chaosLock, error) {
	l := chaosLock{name: name, permits: p.Permits, readShare: p.ReadShare}
	switch kind {
	case dlock.KindMutex:
		l.mutex = c.Mutex(name)
	case dlock.KindFairMutex:
		l.mutex = c.FairMutex(name)
	case dlock.KindRWMutex:
		l.rw = c.RWMutex(name)
	case dlock.KindSemaphore:
		if p.Permits < 1 {
			return l, fmt.Errorf("a Semaphore needs workerParams.Permits")
		}
		l.sem = c.Semaphore(name, p.Permits)
	case dlock.KindElection:
		l.el = c.Election(name)
	default:
		return l, fmt.Errorf("no chaos worker for the kind %q", kind)
	}
	return l, nil
}

// chaosHold is a hold of a chaosLock: a Lease or a Leadership.
type chaosHold struct {
	hold    string // holdWrite, holdRead, holdPermits or holdLeader
	permits int64
	fence   int64
	done    <-chan struct{}
	err     func() error
	extend  func(context.Context, time.Duration) error // nil for a Leadership
	release func(context.Context) error
}

// exclusive reports whether nobody else may hold the lock with h: then the
// holder writes to the fenced resource.
func (h *chaosHold) exclusive() bool { return h.hold == holdWrite || h.hold == holdLeader }

func leaseHold(hold string, permits int64, l *dlock.Lease) *chaosHold {
	return &chaosHold{hold: hold, permits: permits, fence: l.Fence(), done: l.Done(), err: l.Err, extend: l.Extend, release: l.Unlock}
}

// take takes a hold of l: an RWMutex's read hold readShare percent of the
// time, else its write hold; a Semaphore's one permit, two a quarter of the
// time. With whole, the write hold or every permit.
func (l chaosLock) take(ctx context.Context, whole bool) (*chaosHold, error) {
	switch {
	case l.mutex != nil:
		ls, err := l.mutex.Lock(ctx)
		if err != nil {
			return nil, err
		}
		return leaseHold(holdWrite, 0, ls), nil
	case l.rw != nil:
		if !whole && rand.IntN(100) < l.readShare {
			ls, err := l.rw.RLock(ctx)
			if err != nil {
				return nil, err
			}
			return leaseHold(holdRead, 0, ls), nil
		}
		ls, err := l.rw.Lock(ctx)
		if err != nil {
			return nil, err
		}
		return leaseHold(holdWrite, 0, ls), nil
	case l.sem != nil:
		n := int64(1)
		if whole {
			n = l.permits
		} else if l.permits > 1 && rand.IntN(4) == 0 {
			n = 2
		}
		ls, err := l.sem.Acquire(ctx, n)
		if err != nil {
			return nil, err
		}
		return leaseHold(holdPermits, n, ls), nil
	}
	ld, err := l.el.Campaign(ctx, fmt.Sprintf("pid %d", os.Getpid()))
	if err != nil {
		return nil, err
	}
	return &chaosHold{hold: holdLeader, fence: ld.Term(), done: ld.Done(), err: ld.Err, release: ld.Resign}, nil
}

// chaosWorker runs p.Goroutines goroutines that take p's lock (or one of
// p.Names locks), of the kind envChaosKind names, over and over for p.For.
// In each critical section an exclusive holder (a Mutex's, a FairMutex's, an
// RWMutex's writer, an Election's leader) makes a fenced write to the lock's
// resource, some (with p.Extend, a Lease) after a Lease.Extend that shortens
// or lengthens the lease. A write the resource rejects means another holder
// got the lock, with a higher fence, while this one thought it held it: the
// lease must then be reported lost within one renewal period (a third of the
// longest TTL it asked for) and a margin, or the client believed longer than
// Redis held it. The period counts the time the process ran: one that is
// stopped (the chaos test stops holders) notices nothing until it runs
// again, however long ago its lease's deadline passed. Every section goes in
// the history the report carries, which the chaos run checks
// (checkOverlaps).
func chaosWorker(c *dlock.Client, resRDB *redis.Client, p workerParams) error {
	ctx := context.Background()
	kind := chaosKind(p)
	mutants := strings.Split(os.Getenv(envChaosMutants), ",")
	var locks []chaosLock
	resources := []string{"resource"}
	for i := range max(p.Names, 1) {
		name := p.Name
		if i > 0 {
			name = fmt.Sprintf("%s%d", p.Name, i)
			resources = append(resources, "resource"+strconv.Itoa(i))
		}
		l, err := chaosLockOf(c, kind, name, p)
		if err != nil {
			return err
		}
		locks = append(locks, l)
	}
	rep := chaosReport{Kind: kind, Pid: os.Getpid(), LockErrors: map[string]int64{}, UnlockErrs: map[string]int64{}, ExtendErrs: map[string]int64{}}
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
	for g := range p.Goroutines {
		wg.Go(func() {
			for time.Now().Before(end) {
				i := rand.IntN(len(locks))
				lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				h, err := locks[i].take(lctx, false)
				cancel()
				if err != nil {
					count(rep.LockErrors, err)
					continue
				}
				begin := time.Now().UnixNano()
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
				if p.Extend && h.extend != nil && rand.IntN(4) == 0 {
					// Between a third of the TTL and twice the TTL: the
					// renewals that follow, and those in flight, run with
					// the old TTL or the new one.
					ttl := p.TTL/3 + time.Duration(rand.Int64N(int64(5*p.TTL/3)))
					longest = max(longest, ttl)
					if err := h.extend(ctx, ttl); err != nil {
						count(rep.ExtendErrs, err)
					} else {
						atomic.AddInt64(&rep.Extends, 1)
					}
				}
				if h.exclusive() {
					if late := fencedSection(ctx, resRDB, resources[i], h, longest, stops, &rep, func(err error) { count(rep.LockErrors, err) }); late != "" {
						mu.Lock()
						rep.Unnoticed = append(rep.Unnoticed, fmt.Sprintf("fence %d: %s", h.fence, late))
						mu.Unlock()
					}
				}
				if h.err() != nil {
					atomic.AddInt64(&rep.LostInside, 1)
				}
				s := section{Kind: kind, Name: locks[i].name, Hold: h.hold, Fence: h.fence, Begin: begin, Pid: rep.Pid, G: g}
				if h.hold == holdPermits {
					s.Permits, s.Total = h.permits, p.Permits
				}
				s.End = time.Now().UnixNano()
				err = h.release(ctx)
				if slices.Contains(mutants, mutantUnlockHidesLoss) && errors.Is(err, dlock.ErrLockLost) {
					s.Err, err = mutantUnlockHidesLoss+" hid: "+err.Error(), nil
				}
				count(rep.UnlockErrs, err)
				if s.Release = releaseOutcome(err); err != nil {
					s.Err = err.Error()
				}
				mu.Lock()
				rep.History = append(rep.History, s)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if slices.Contains(mutants, mutantGhostAfterEnd) {
		rep.Ghost = leaveGhost(p)
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// fencedSection makes h's fenced write to resource, counts it in rep (an
// error by fail) and, if the resource rejects it, waits for h's loss to be
// reported: it returns what went wrong if that came later than a renewal
// period (a third of longest, the longest TTL the lease had) and a margin,
// not counting the time the process was stopped.
func fencedSection(ctx context.Context, resRDB *redis.Client, resource string, h *chaosHold, longest time.Duration, stops *stopWatch, rep *chaosReport, fail func(error)) string {
	acc, err := fencedWrite.Run(ctx, resRDB, []string{resource}, h.fence).Int()
	switch {
	case err != nil:
		fail(err)
		return ""
	case acc == 1:
		atomic.AddInt64(&rep.Accepted, 1)
		return ""
	}
	atomic.AddInt64(&rep.Stale, 1)
	wrote, window, wait := time.Now(), longest/3+300*time.Millisecond, longest/3+3*time.Second
	select {
	case <-h.done:
		took := time.Since(wrote)
		stopped := stops.within(wrote, time.Now())
		if ran := took - stopped; ran > window {
			return fmt.Sprintf("lease reported lost %v after a higher fence wrote, %v of it running (allowed: %v)", took, ran, window)
		} else if stopped > 0 {
			atomic.AddInt64(&rep.Stopped, 1)
		}
	case <-time.After(wait):
		return fmt.Sprintf("lease still held %v after a higher fence wrote", wait)
	}
	atomic.AddInt64(&rep.Noticed, 1)
	return ""
}

// leaveGhost takes the Mutex ghostName for ghostTTLs of p's TTL, without
// renewal, through a Client of its own that it never closes, and says what
// it took, or why it took nothing (another worker took it first, say).
func leaveGhost(p workerParams) string {
	c, err := dlock.New(lockRedis(), dlock.WithTTL(ghostTTLs*p.TTL), dlock.WithoutRenewal())
	if err != nil {
		return "no ghost: " + err.Error()
	}
	l, err := c.Mutex(ghostName).TryLock(context.Background())
	if err != nil {
		return "no ghost: " + err.Error()
	}
	return fmt.Sprintf("left Mutex %q held by %s with fence %d for %v", ghostName, l.Owner(), l.Fence(), ghostTTLs*p.TTL)
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
