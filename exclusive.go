package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// lockKind is what tells the kinds of lock apart: their Lua and their keys.
// Everything else (leases, renewal, waiting, re-entry) is the engine's.
//
// Each key list names keys by their suffix after the lock's tag ("" is the
// tag itself, the lock hash), in the order of the KEYS its script's header
// lists.
type lockKind struct {
	what    string // the type's name, for messages
	space   string // key namespace after the prefix
	acquire *redis.Script
	release *redis.Script

	acquireKeys []string // KEYS of acquire
	releaseKeys []string // KEYS of release, but the last: the release marker (see keys.marker)
	// leaseKeys is a lease's KEYS group of extend.lua: the key that carries
	// each holder's lease, then those that must outlive it.
	leaseKeys []string
	zlease    bool // each holder's lease is its member of a sorted set of holders, not the lock hash
	once      bool // no re-entry: a Lease in the context does not make an acquisition share its hold
}

// leaseType names, for extend.lua and ttl.lua, what carries a holder's lease.
func (k *lockKind) leaseType() string {
	if k.zlease {
		return "z"
	}
	return "h"
}

var (
	mutexKind = &lockKind{what: "Mutex", acquire: scripts.acquire, release: scripts.release,
		acquireKeys: []string{"", ":fence", ":waiters"},
		releaseKeys: []string{"", ":waiters"},
		leaseKeys:   []string{"", ":fence"}}
	fairKind = &lockKind{what: "FairMutex", space: "fair:", acquire: scripts.fairAcquire, release: scripts.fairRelease,
		acquireKeys: []string{"", ":fence", ":waiters", ":alive"},
		releaseKeys: []string{"", ":waiters", ":alive"},
		leaseKeys:   []string{"", ":fence"}}
	semKind = &lockKind{what: "Semaphore", space: "sem:", acquire: scripts.semAcquire, release: scripts.semRelease,
		acquireKeys: []string{"", ":fence", ":waiters", ":alive", ":holders", ":total"},
		releaseKeys: []string{"", ":waiters", ":alive", ":holders", ":total"},
		leaseKeys:   []string{":holders", ":fence", ""},
		zlease:      true, once: true}
)

// exclusive is the engine of the reentrant exclusive locks, Mutex and
// FairMutex: an immutable description of one lock.
type exclusive struct {
	c     *Client
	k     keys
	ttl   time.Duration
	renew bool
	err   error // an invalid name or option, returned by every call
}

func (c *Client) exclusive(kind *lockKind, name string, opts []Option) exclusive {
	if c == nil {
		return exclusive{err: fmt.Errorf("dlock: %s of a nil Client", kind.what)}
	}
	x := exclusive{c: c, k: c.keys(kind, name)}
	cfg, err := c.cfg.with(opts, false)
	switch {
	case name == "":
		x.err = fmt.Errorf("dlock: %s: empty lock name", kind.what)
	case err != nil:
		x.err = fmt.Errorf("dlock: %s %q: %w", kind.what, name, err)
	}
	x.ttl, x.renew = cfg.ttl, cfg.renew
	return x
}

func (m *exclusive) do(ctx context.Context, fn func(ctx context.Context) error) error {
	return doLocked(ctx, strconv.Quote(m.k.name), fn, func(ctx context.Context) (*Lease, error) {
		return m.lock(ctx, "lock", true, nil)
	})
}

// lock acquires, waiting if wait is set; extra are the kind's own arguments
// of its acquire script (after the four every acquire script takes).
func (m *exclusive) lock(ctx context.Context, op string, wait bool, extra []any) (*Lease, error) {
	if m.err != nil {
		return nil, m.err
	}
	if err := m.c.checkCall(ctx, op, m.k.name); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, m.gaveUp(ctx)
	}
	if !m.k.kind.once {
		if h := heldIn(ctx).find(m.c, m.k); h != nil {
			return h.reenter(ctx)
		}
	}
	start := time.Now()
	owner := m.c.newOwner()
	if wait {
		// If this process is subscribed to the lock's releases already (others
		// wait for it here, or did lately), every attempt can be followed by
		// a sleep: no need for a first attempt before subscribing.
		if g := m.c.note.joinSubscribed(m.c.ownChannel(m.k)); g != nil {
			defer m.c.note.leave(g)
			return m.wait(ctx, g, owner, start, true, extra)
		}
	}
	l, _, err := m.attempt(ctx, owner, start, 0, extra)
	if err == errTooMany && wait {
		err = nil // it waits, registered, for the total to be raised
	}
	if err != nil && ended(ctx) {
		return nil, m.gaveUp(ctx)
	}
	if l != nil || err != nil {
		return l, err
	}
	if !wait {
		return nil, fmt.Errorf("%w: %q is held by another owner", ErrNotAcquired, m.k.name)
	}
	m.contended()
	g, err := m.c.note.join(ctx, m.k, m.ttl, m.c.ownChannel(m.k))
	if err != nil {
		if ended(ctx) {
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
	return m.wait(ctx, g, owner, start, false, extra)
}

func (m *exclusive) contended() {
	if f := m.c.cfg.hooks; f != nil && f.Contended != nil {
		f.Contended(m.k.name)
	}
}

// wait tries to acquire, registered as a waiter in Redis, and after each
// failed attempt sleeps until the lock is kept for it (a message on g), the
// holder's lease would have run out, or its registration needs renewing.
// announce says whether a first failed attempt is news for the Contended hook.
func (m *exclusive) wait(ctx context.Context, g *gate, owner string, start time.Time, announce bool, extra []any) (*Lease, error) {
	// Close waits for a waiting Lock, so that its registration is gone from
	// Redis when Close returns.
	if !m.c.track() {
		return nil, fmt.Errorf("%w: lock %q", ErrClosed, m.k.name)
	}
	defer m.c.untrack()
	w := m.c.note.enter(g, owner)
	registered := false // in Redis, by an attempt that found the lock held
	defer func() { m.c.note.exit(g, w, registered) }()
	keep := keepAlive(m.ttl)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for tries := 0; ; tries++ {
		registered = true // also if the attempt failed: its script may have run
		l, pttl, err := m.attempt(ctx, owner, start, 3*keep, extra)
		if l != nil {
			registered = false // acquiring removed the registration
			return l, nil
		}
		if err != nil {
			if ended(ctx) {
				return nil, m.gaveUp(ctx)
			}
			return nil, err
		}
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
func (m *exclusive) attempt(ctx context.Context, owner string, start time.Time, register time.Duration, extra []any) (*Lease, time.Duration, error) {
	sent := time.Now()
	r, err := within(m.c, ctx, func() (acquireResult, error) {
		return m.c.acquire(ctx, m.k, owner, m.ttl, register, extra...)
	}, func(r acquireResult, err error) {
		// The caller has gone: undo whatever the script did for it. Its
		// own unregistration may have run before this script did.
		if err != nil || r.fence > 0 {
			m.abandon(context.Background(), owner)
		}
		if register > 0 {
			m.c.note.unregister(m.k, m.ttl, owner)
		}
	})
	if err != nil {
		if errors.Is(err, errLeftBehind) {
			return nil, 0, fmt.Errorf("dlock: acquire %q: %w", m.k.name, err)
		}
		m.abandon(ctx, owner)
		return nil, 0, err
	}
	if r.gone {
		return nil, 0, errTooMany
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

// errTooMany is what attempt returns when a Semaphore's acquire script
// answers that more permits were asked for than its total.
var errTooMany = errors.New("more permits than the semaphore's total")

// abandon releases whatever owner may hold after an acquire whose outcome is
// unknown: the script may have run even though its reply never arrived. If
// ctx has ended, the release goes on in the background, so that a stalled
// Redis does not hold the caller.
func (m *exclusive) abandon(ctx context.Context, owner string) {
	release := func() {
		cctx, cancel := cleanupContext(ctx, m.ttl)
		defer cancel()
		if _, err := m.c.release(cctx, m.k, owner, releaseLast, m.ttl, 0); err != nil {
			m.c.log.Debug("dlock: cleanup after failed acquire", "lock", m.k.name, "err", err)
		}
	}
	if !ended(ctx) || !m.c.goBehind(release) {
		release()
	}
}

// ended reports whether ctx is done or past its deadline: a request cut off
// by the deadline (go-redis sets it on the connection) can fail a moment
// before ctx's own timer fires.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// gaveUp is the error of a wait that ended with its context.
func (m *exclusive) gaveUp(ctx context.Context) error {
	cerr := ctx.Err()
	if cerr == nil {
		cerr = context.DeadlineExceeded // past the deadline; the timer has not fired yet
	}
	err := fmt.Errorf("%w: lock %q: gave up waiting: %w", ErrNotAcquired, m.k.name, cerr)
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		err = fmt.Errorf("%w (cause: %w)", err, cause)
	}
	return err
}
