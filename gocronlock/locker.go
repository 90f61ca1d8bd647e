package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/go-co-op/gocron/v2"
)

// DefaultMinHold is the min hold when WithMinHold is not given.
const DefaultMinHold = 5 * time.Second

// namePrefix starts the name of every lock a Locker takes: the lock of job
// "report" is the dlock Mutex "gocron:report".
const namePrefix = "gocron:"

// Option configures a Locker.
type Option func(*Locker) error

// WithMinHold sets how long, at least, a Locker keeps a job's lock after the
// run started, however soon the run ends. Choose it longer than the
// instances' schedulers can fire the same tick apart, and shorter than the
// job's interval less that spread (see Locker): with the default, a job
// fired every second runs once every 5 or 6 seconds. Default: DefaultMinHold
// (5s). 0 releases the lock when the run ends; a negative d is an error.
func WithMinHold(d time.Duration) Option {
	return func(l *Locker) error {
		if d < 0 {
			return fmt.Errorf("gocronlock: WithMinHold(%v): negative", d)
		}
		l.minHold = d
		return nil
	}
}

// WithLogger sets the logger of the Locker's one warning: the first time
// an instance skips a run because it fired the job again within the min
// hold of the job's last firing here (see Locker). Default: slog.Default(),
// since the skip is otherwise seen only in gocron's AfterLockError; a
// logger with slog.DiscardHandler silences it. A nil l is an error.
func WithLogger(l *slog.Logger) Option {
	return func(lk *Locker) error {
		if l == nil {
			return errors.New("gocronlock: WithLogger(nil): pass a logger, or omit the option to use slog.Default()")
		}
		lk.log = l
		return nil
	}
}

// Locker is a gocron.Locker on dlock Mutexes: give it to
// gocron.WithDistributedLocker (or a job's WithDistributedJobLocker), and a
// job fired by several instances' schedulers runs in only one of them per
// tick.
//
// gocron asks for a lock by the job's name, not by the tick it fires for, so
// a lock held only while the job runs would let an instance whose scheduler
// fires the same tick a little later, after a short run ended, run it again.
// So each lock is held for at least the min hold (WithMinHold) after the run
// started, however soon it ends. The promise: a tick runs at most once among
// the instances whose schedulers fire it less than the min hold apart
// (counting the time a lock request takes to reach Redis), as long as Redis
// keeps the lock (see dlock's guarantees page on failovers and restarts).
// And a tick is not skipped because of the last one while the job's interval
// is longer than the min hold plus that spread, and its runs are shorter
// than the interval.
//
// Two things follow, which the Locker cannot check: gocron gives it the
// job's name only, never its schedule. Every instance must fire each tick at
// the same instant, as far as their clocks agree: schedule the job with a
// gocron.CronJob, or a gocron.DurationJob started on a multiple of its
// interval (AlignedStart). A DurationJob started with its scheduler fires at
// that instance's own phase: instances started half a second apart fire
// every tick half a second apart, and run it twice if that is longer than
// the min hold. And the job's interval must be longer than the min hold:
// under the default min hold, a job fired every second runs once every 5 or
// 6 seconds. What the Locker sees is a refusal of a firing less than the
// min hold after the job's last firing in this instance: it says so in the
// error (which gocron's AfterLockError listener gets), and logs a warning
// the first time (WithLogger), naming the job and the min hold.
//
// Each lock is the dlock Mutex "gocron:" + the job's name, taken with
// TryLock: an instance that finds it held skips the run (gocron's
// AfterLockError listener is told). Its TTL is the min hold (at least
// dlock.MinTTL; the Client's TTL when the min hold is 0), so an instance
// that dies while it holds the lock keeps it no longer than the min hold
// after its last renewal; a run longer than that keeps it renewed.
//
// A Locker is safe for concurrent use. Close it after the scheduler's
// Shutdown and before the dlock Client's Close: closing the Client releases
// the locks at once, cutting their min holds short. The methods of a nil
// *Locker return errors.
type Locker struct {
	c       *dlock.Client
	minHold time.Duration
	opts    []dlock.Option // of every Mutex
	log     *slog.Logger   // default: slog.Default()

	mu      sync.Mutex
	closed  bool
	pending int                  // locks unlocked by gocron whose min hold is still running
	idle    chan struct{}        // made by Close, closed once pending is 0
	fired   map[string]time.Time // by job: when Lock was last called for it
	warned  bool                 // the min-hold warning was logged
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker that takes its locks through c. A nil or zero
// Client, a closed one, or an invalid option is an error.
func NewLocker(c *dlock.Client, opts ...Option) (*Locker, error) {
	if c == nil || c.ID() == "" {
		return nil, errors.New("gocronlock: NewLocker: nil or zero *dlock.Client; make one with dlock.New")
	}
	l := &Locker{
		c: c, minHold: DefaultMinHold,
		log:   slog.Default(),
		fired: make(map[string]time.Time),
	}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("gocronlock: NewLocker: nil Option")
		}
		if err := o(l); err != nil {
			return nil, fmt.Errorf("gocronlock: NewLocker: %w", err)
		}
	}
	if l.minHold > 0 {
		l.opts = []dlock.Option{dlock.WithTTL(max(l.minHold, dlock.MinTTL))}
	}
	return l, nil
}

// Lock takes the lock of the job called key, in one attempt: if another
// instance holds it, the error matches dlock.ErrNotAcquired and gocron
// skips the run. ctx bounds the attempt only. The returned Lock's Unlock
// releases it once the min hold has passed since Lock returned.
//
// If the job was fired here (Lock was called for key) less than the min hold
// before, a refusal is put down to the min hold: the error says so, and the
// first such refusal of the Locker is logged as a warning.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	switch {
	case l == nil || l.c == nil:
		return nil, errors.New("gocronlock: Lock of a nil or zero Locker; make one with NewLocker")
	case ctx == nil:
		return nil, fmt.Errorf("gocronlock: lock %q: nil context", key)
	case key == "":
		return nil, errors.New("gocronlock: lock: empty job name")
	}
	now := time.Now()
	l.mu.Lock()
	closed := l.closed
	last, seen := l.fired[key]
	if !closed {
		l.fired[key] = now
	}
	l.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("gocronlock: lock %q: %w", key, errLockerClosed)
	}
	lease, err := l.c.Mutex(namePrefix+key, l.opts...).TryLock(ctx)
	if err != nil {
		if since := now.Sub(last); seen && since < l.minHold && errors.Is(err, dlock.ErrNotAcquired) {
			l.warnMinHold(key, since)
			return nil, fmt.Errorf("gocronlock: lock job %q, fired %v after its last firing here, within the min hold of %v: %w",
				key, since.Round(time.Millisecond), l.minHold, err)
		}
		return nil, fmt.Errorf("gocronlock: lock job %q: %w", key, err)
	}
	// Redis granted the lock before this instant, so holding it until
	// holdUntil in this process's monotonic time holds it for at least the
	// min hold after the grant, however late the reply came.
	return &jobLock{l: l, lease: lease, holdUntil: time.Now().Add(l.minHold)}, nil
}

var errLockerClosed = errors.New("the Locker is closed")

// warnMinHold logs, the first time only, that job was refused its lock
// since after it fired again within the min hold.
func (l *Locker) warnMinHold(job string, since time.Duration) {
	l.mu.Lock()
	first := !l.warned
	l.warned = true
	l.mu.Unlock()
	if !first {
		return
	}
	l.log.Warn("gocronlock: a run was skipped because the job fired again within the min hold of its last firing; check the job's interval and its alignment (logged once)",
		"job", job, "min_hold", l.minHold.String(), "fired_after", since.Round(time.Millisecond).String(),
		"interval", "must be longer than the min hold (gocronlock.WithMinHold), or every firing within the min hold of a run is skipped",
		"alignment", "every instance must fire each tick at the same instant: a gocron.CronJob, or a DurationJob started on a multiple of its interval (gocronlock.AlignedStart)")
}

// Close waits until the lock of every run that ended has been released,
// each once its min hold has passed, and makes later Locks fail. It does not
// wait for runs still going: call it after the scheduler's Shutdown, which
// waits for them. A second Close waits too.
func (l *Locker) Close() error {
	if l == nil || l.c == nil {
		return errors.New("gocronlock: Close of a nil or zero Locker")
	}
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		l.idle = make(chan struct{})
		if l.pending == 0 {
			close(l.idle)
		}
	}
	idle := l.idle
	l.mu.Unlock()
	<-idle
	return nil
}

// jobLock is one run's lock.
type jobLock struct {
	l         *Locker
	lease     *dlock.Lease
	holdUntil time.Time
	unlocked  atomic.Bool
}

// Unlock releases the lock now if the min hold has passed, or the lease was
// lost (it then returns the lease's error); otherwise it returns nil at once
// and the lock is released when the min hold has passed, in the background
// (a release that fails then is retried by the dlock Client until the TTL
// runs out). Until then the lease is renewed as while the job ran, so it
// outlives the min hold even if this process dies meanwhile (by the TTL).
//
// The release is sent after holdUntil: whatever happens to it (lost reply,
// retry, late arrival), Redis frees the lock no sooner.
func (j *jobLock) Unlock(ctx context.Context) error {
	if !j.unlocked.CompareAndSwap(false, true) {
		return fmt.Errorf("gocronlock: unlock %q: %w", j.lease.Name(), dlock.ErrNotHeld)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	left := time.Until(j.holdUntil)
	if left <= 0 || j.lease.Err() != nil {
		return j.lease.Unlock(ctx)
	}
	l := j.l
	l.mu.Lock()
	late := l.idle != nil && l.pending == 0 // Close has returned, or is about to
	if !late {
		l.pending++
	}
	l.mu.Unlock()
	if late {
		// Nobody would wait for a timer now: hold here.
		t := time.NewTimer(left)
		<-t.C
		return j.lease.Unlock(ctx)
	}
	time.AfterFunc(left, func() {
		_ = j.lease.Unlock(context.Background())
		l.mu.Lock()
		l.pending--
		if l.pending == 0 && l.idle != nil {
			close(l.idle)
		}
		l.mu.Unlock()
	})
	return nil
}
