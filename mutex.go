package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Mutex is a reentrant mutual-exclusion lock shared by every process that uses
// the same name on the same Redis.
//
// A Mutex is a cheap, immutable description of a lock: make one wherever it is
// needed, or share one between goroutines; it is safe for concurrent use. It
// holds no state: each successful Lock or TryLock returns a Lease, and the
// Lease is what is unlocked. The zero Mutex is not usable; get one from
// Client.Mutex.
//
// Every acquisition is a new owner, even from the same goroutine or Client,
// unless it is made with a context that carries a Lease of the same lock on the
// same Client (see Lease.Context and Do): then it re-enters that Lease's hold,
// and the lock is free again once every re-entry and the original are
// unlocked. Ownership is never tied to goroutines: any goroutine holding the
// Lease may unlock it.
//
// Waiters are served about in the order they arrived: a lock released while
// others wait is kept briefly for the one registered longest ago, and only
// that one is woken (see the package documentation, Waiting). A free lock with
// nobody waiting goes to whoever asks first.
type Mutex struct {
	c     *Client
	k     keys
	ttl   time.Duration
	renew bool
	err   error // an invalid name or option, returned by every call
}

// Mutex returns the lock called name. Any byte string is a valid name; the
// empty one is not, and neither is an invalid option: those errors are
// returned by every call on the Mutex.
func (c *Client) Mutex(name string, opts ...Option) *Mutex {
	if c == nil {
		return &Mutex{err: errors.New("dlock: Mutex of a nil Client")}
	}
	m := &Mutex{c: c, k: c.keys(name)}
	cfg, err := c.cfg.with(opts, false)
	switch {
	case name == "":
		m.err = errors.New("dlock: Mutex: empty lock name")
	case err != nil:
		m.err = fmt.Errorf("dlock: Mutex %q: %w", name, err)
	}
	m.ttl, m.renew = cfg.ttl, cfg.renew
	return m
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.k.name }

// Lock acquires the lock, waiting until it is free or ctx is done. ctx bounds
// the wait only, never the lease: a Lease outlives the ctx it was acquired
// with until it is unlocked or lost.
//
// A waiting Lock sleeps until the lock is released and kept for it, or until
// the holder's lease would expire, then tries again; it does not poll, beyond
// a keep-alive every TTL/6 (at most 5s) while it waits. If ctx ends first, the
// error matches both ErrNotAcquired and ctx.Err(). If ctx carries a Lease of
// this lock (see Lease.Context), Lock re-enters it at once.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) { return m.lock(ctx, "lock", true) }

// TryLock makes one attempt to acquire the lock, one round trip. If another
// owner holds it (or it is kept for a woken waiter), the error matches
// ErrNotAcquired. If ctx carries a Lease of
// this lock (see Lease.Context), TryLock re-enters it.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) { return m.lock(ctx, "trylock", false) }

// Do acquires the lock as Lock does, runs fn, and unlocks, also when fn panics.
// fn's context is cancelled if the lease is lost (context.Cause then matches
// ErrLockLost), and it carries the Lease, so that a Lock of the same name
// within fn re-enters instead of deadlocking. Do returns fn's error joined
// with Unlock's; an Unlock error matching ErrNotHeld means fn ran, at least at
// the end, without the lock.
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	if fn == nil {
		return fmt.Errorf("dlock: Do %q: nil function", m.k.name)
	}
	l, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	lctx, cancel := l.Context(ctx)
	defer func() {
		cancel()
		err = errors.Join(err, l.Unlock(ctx))
	}()
	return fn(lctx)
}

func (m *Mutex) lock(ctx context.Context, op string, wait bool) (*Lease, error) {
	if m == nil {
		return nil, fmt.Errorf("dlock: %s on a nil Mutex", op)
	}
	if m.err != nil {
		return nil, m.err
	}
	if err := m.c.checkCall(ctx, op, m.k.name); err != nil {
		return nil, err
	}
	if h := heldIn(ctx).find(m.c, m.k); h != nil {
		return h.reenter(ctx)
	}
	if ctx.Err() != nil {
		return nil, m.gaveUp(ctx)
	}
	start := time.Now()
	owner := m.c.newOwner()
	if wait {
		// If this process is subscribed to the lock's releases already (others
		// wait for it here, or did lately), every attempt can be followed by
		// a sleep: no need for a first attempt before subscribing.
		if g := m.c.note.joinSubscribed(m.k); g != nil {
			defer m.c.note.leave(g)
			return m.wait(ctx, g, owner, start, true)
		}
	}
	l, _, err := m.attempt(ctx, owner, start, 0)
	if l != nil || err != nil {
		return l, err
	}
	if !wait {
		return nil, fmt.Errorf("%w: %q is held by another owner", ErrNotAcquired, m.k.name)
	}
	m.contended()
	g, err := m.c.note.join(ctx, m.k, m.ttl)
	if err != nil {
		if ctx.Err() != nil {
			return nil, m.gaveUp(ctx)
		}
		if errors.Is(err, ErrClosed) {
			return nil, fmt.Errorf("%w: lock %q", ErrClosed, m.k.name)
		}
		return nil, fmt.Errorf("dlock: lock %q: %w", m.k.name, err)
	}
	defer m.c.note.leave(g)
	// Subscribed now: a release from here on wakes the gate. The lock may
	// have been released before the subscription, so wait starts by trying
	// again.
	return m.wait(ctx, g, owner, start, false)
}

func (m *Mutex) contended() {
	if f := m.c.cfg.hooks; f != nil && f.Contended != nil {
		f.Contended(m.k.name)
	}
}

// wait tries to acquire, registered as a waiter in Redis, and after each
// failed attempt sleeps until the lock is kept for it (a message on g), the
// holder's lease would have run out, or its registration needs renewing.
// announce says whether a first failed attempt is news for the Contended hook.
func (m *Mutex) wait(ctx context.Context, g *gate, owner string, start time.Time, announce bool) (*Lease, error) {
	w := m.c.note.enter(g, owner)
	acquired, pending := false, false // pending: woken, and not yet tried since
	defer func() { m.c.note.exit(g, w, acquired, pending) }()
	keep := keepAlive(m.ttl)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for tries := 0; ; tries++ {
		l, pttl, err := m.attempt(ctx, owner, start, 3*keep)
		if l != nil {
			acquired = true
			return l, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, m.gaveUp(ctx)
			}
			return nil, err
		}
		pending = false
		if tries == 0 && announce {
			m.contended()
		}
		sleep := min(pttl, keep)
		if timer == nil {
			timer = time.NewTimer(sleep)
		} else {
			timer.Reset(sleep)
		}
		select {
		case <-w.wake:
			pending = true
		case <-timer.C:
		case <-ctx.Done():
			return nil, m.gaveUp(ctx)
		case <-m.c.closing:
			return nil, fmt.Errorf("%w: lock %q", ErrClosed, m.k.name)
		}
	}
}

// attempt runs the acquire script once, registering owner as a waiter for
// register if the lock is held (0: not at all). It returns the Lease if the
// lock was taken, else how long the holder's lease has left (never less than
// 1ms; the lock's own TTL if the holder's key has no expiry).
func (m *Mutex) attempt(ctx context.Context, owner string, start time.Time, register time.Duration) (*Lease, time.Duration, error) {
	sent := time.Now()
	r, err := m.c.acquire(ctx, m.k, owner, m.ttl, false, register)
	if err != nil {
		m.abandon(ctx, owner)
		return nil, 0, err
	}
	if r.fence == 0 {
		if r.pttl < 0 {
			return nil, m.ttl, nil
		}
		return nil, max(r.pttl, time.Millisecond), nil
	}
	h, err := m.c.newHold(m.k, owner, r.fence, m.ttl, m.renew, sent)
	if err != nil {
		m.abandon(ctx, owner)
		return nil, 0, err
	}
	waited := time.Since(start)
	m.c.log.Debug("dlock: acquired", "lock", m.k.name, "fence", r.fence, "waited", waited)
	if f := m.c.cfg.hooks; f != nil && f.Acquired != nil {
		f.Acquired(m.k.name, r.fence, waited)
	}
	return &Lease{h: h}, 0, nil
}

// abandon releases whatever owner may hold after an acquire whose outcome is
// unknown: the script may have run even though its reply never arrived.
func (m *Mutex) abandon(ctx context.Context, owner string) {
	cctx, cancel := cleanupContext(ctx, m.ttl)
	defer cancel()
	if _, err := m.c.release(cctx, m.k, owner, releaseLast, m.ttl); err != nil {
		m.c.log.Debug("dlock: cleanup after failed acquire", "lock", m.k.name, "err", err)
	}
}

// gaveUp is the error of a wait that ended with its context.
func (m *Mutex) gaveUp(ctx context.Context) error {
	err := fmt.Errorf("%w: lock %q: gave up waiting: %w", ErrNotAcquired, m.k.name, ctx.Err())
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		err = fmt.Errorf("%w (cause: %w)", err, cause)
	}
	return err
}
