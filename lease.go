package dlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/renew"
	"github.com/dlock-go/dlock/internal/timing"
)

// Lease is one successful acquisition of a lock: the handle that releases it,
// carries its fence and tells of its loss. It is safe for concurrent use.
//
// A held lease is renewed in the background (unless WithoutRenewal); if it is
// lost anyway, Done is closed and Err matches ErrLockLost. A paused holder may
// learn of a loss too late to stop its writes: pass Fence to the resource (see
// docs/failure-model.md). A nil *Lease's methods return errors or a closed Done.
type Lease struct {
	h         *hold
	reentered bool // re-entered an existing hold; Unlock gives back one hold count
	unlocked  atomic.Bool
}

// errNilLease is what the methods of a nil *Lease return.
var errNilLease = errors.New("dlock: nil *Lease")

// Name returns the lock's name.
func (l *Lease) Name() string {
	if l == nil || l.h == nil {
		return ""
	}
	return l.h.t.K.Name
}

// Owner returns the lease's owner id, as Inspect and the dlock command show
// it: the Client's ID, ':' and a number.
func (l *Lease) Owner() string {
	if l == nil || l.h == nil {
		return ""
	}
	return l.h.t.Owner
}

// Fence returns the lease's fencing token, greater than that of every earlier
// acquisition of the same name; a re-entered Lease has its hold's. Have the
// resource reject a write whose fence is below the highest it accepted.
func (l *Lease) Fence() int64 {
	if l == nil || l.h == nil {
		return 0
	}
	return l.h.t.Fence
}

// Done returns a channel that is closed when the lease ends: when it is lost,
// when its last hold is unlocked, or when the Client is closed.
func (l *Lease) Done() <-chan struct{} {
	if l == nil || l.h == nil {
		return renew.ClosedChan
	}
	l.h.t.Check()
	return l.h.t.Ending.Done()
}

// Err returns nil while the lease is held. After Done is closed it returns why:
// an error matching ErrLockLost if the lease was lost, ErrNotHeld if it was
// unlocked, ErrClosed if the Client was closed.
func (l *Lease) Err() error {
	if l == nil || l.h == nil {
		return errNilLease
	}
	return l.h.t.Check()
}

// Context returns a copy of parent that is cancelled, with Err's cause, when
// parent is or the lease ends, and that carries the lease: for LeaseFromContext,
// and so that a Lock of the same lock on the same Client re-enters it. Call
// cancel when done; a nil parent is taken as context.Background().
func (l *Lease) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancelCause := context.WithCancelCause(parent)
	if l == nil || l.h == nil {
		cancelCause(errNilLease)
		return ctx, func() {}
	}
	t := l.h.t
	end := &t.Ending
	stop := end.AfterFunc(func() { cancelCause(end.Cause()) })
	ctx = context.WithValue(ctx, heldKey{}, &heldEntry{l: l, next: heldIn(parent)})
	lc := &leaseContext{Context: ctx, t: t, cancel: cancelCause}
	lc.Err() // a lease past its deadline ends here, and ctx with it
	return lc, func() {
		stop()
		cancelCause(context.Canceled)
	}
}

// leaseContext is a Lease's Context: its Err (and Done, through it) ends the
// context as soon as the lease has ended, also when the lease's local
// deadline has passed and no timer has fired yet (a process resumed after a
// pause): asked, it does not answer that the lease still holds.
type leaseContext struct {
	context.Context
	t      *renew.Term
	cancel context.CancelCauseFunc
}

func (c *leaseContext) Err() error {
	if cause := c.t.Check(); cause != nil {
		c.cancel(cause)
	}
	return c.Context.Err()
}

func (c *leaseContext) Done() <-chan struct{} {
	c.Err()
	return c.Context.Done()
}

// Unlock releases the hold this Lease stands for; once its owner's last hold
// is released the lock is free and never renewed again. Unlock works with a
// cancelled ctx. A second Unlock, or one after the lease ended, changes
// nothing and returns an error matching ErrNotHeld (and ErrLockLost if it was
// lost). If Redis cannot be reached, Unlock returns that error, but the hold
// counts as released (the Client retries a last hold's release in the
// background until the TTL has run out): do not retry it.
func (l *Lease) Unlock(ctx context.Context) error {
	if l == nil || l.h == nil {
		return errNilLease
	}
	if ctx == nil {
		return errs.Op(nil, nil, "unlock %q: nil context", l.Name())
	}
	if !l.unlocked.CompareAndSwap(false, true) {
		return errs.Op(ErrNotHeld, nil, "unlock %q: already unlocked", l.Name())
	}
	return l.h.unlock(ctx)
}

// Release gives the lease back, as Unlock does; it reads better for the
// permits of a Semaphore.
func (l *Lease) Release(ctx context.Context) error { return l.Unlock(ctx) }

// Extend sets the lease to expire ttl (at least MinTTL) from now, and makes
// ttl its TTL for later renewals; a ttl shorter than what is left shortens it.
// No renewal or Extend sent before it undoes it, however late it runs. If the
// lease was lost, or its reply came after ttl ran out, the error matches
// ErrLockLost; during Unlock, once the lease ended or once this Lease was
// unlocked (a re-entered one, whose other holds remain), it matches ErrNotHeld.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil || l.h == nil {
		return errNilLease
	}
	switch {
	case ctx == nil:
		return errs.Op(nil, nil, "extend %q: nil context", l.Name())
	case ttl < MinTTL:
		return errs.Op(nil, nil, "extend %q by %v: the TTL must be at least %v", l.Name(), ttl, MinTTL)
	case l.unlocked.Load():
		// A re-entered Lease shares its lock with the holds that remain:
		// once unlocked, it no longer speaks for them.
		return errs.Op(ErrNotHeld, nil, "extend %q: this Lease was unlocked", l.Name())
	}
	return l.h.e.ren.Extend(ctx, l.h.t, ttl)
}

// TTL returns how long the lock has left before it expires, as Redis sees it.
// If the lease is no longer held, or this Lease was unlocked, the error
// matches ErrNotHeld.
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil || l.h == nil {
		return 0, errNilLease
	}
	t := l.h.t
	if ctx == nil {
		return 0, errs.Op(nil, nil, "ttl %q: nil context", t.K.Name)
	}
	if l.unlocked.Load() {
		return 0, errs.Op(ErrNotHeld, nil, "ttl %q: this Lease was unlocked", t.K.Name)
	}
	if err := t.EndedErr("ttl"); err != nil {
		return 0, err
	}
	left, code, err := l.h.e.backend.TTL(ctx, *t.K, t.Owner)
	switch {
	case err != nil:
		return 0, err
	case code != protocol.CodeDone:
		return 0, errs.Op(ErrNotHeld, t.LostErr(code), "ttl")
	case left < 0:
		return 0, errs.Op(nil, nil, "ttl %q: lock key has no expiry", t.K.Name)
	}
	return left, nil
}

// heldLock is what doLocked needs of a Lease or a MultiLease.
type heldLock interface {
	Context(parent context.Context) (context.Context, context.CancelFunc)
	Unlock(ctx context.Context) error
}

// doLocked is every primitive's Do: it acquires with acquire, runs fn with a
// context derived from the lease (cancelled on loss, carrying it for
// re-entry), and unlocks, also when fn panics. It returns fn's error joined
// with Unlock's. op names the call in the error for a nil fn.
func doLocked[L heldLock](ctx context.Context, op string, fn func(context.Context) error, acquire func(context.Context) (L, error)) (err error) {
	if fn == nil {
		return errs.Op(nil, nil, "%s: nil function", op)
	}
	l, err := acquire(ctx)
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

// LeaseFromContext returns the innermost Lease ctx carries (from Do,
// Lease.Context, lockhttp or idempotency), and whether there is one. It
// reports false when the innermost is a MultiLease's or a Leadership's. A
// Lease that has ended is returned all the same: its Err says why.
func LeaseFromContext(ctx context.Context) (*Lease, bool) {
	if ctx == nil {
		return nil, false
	}
	if c := heldIn(ctx); c != nil && c.l != nil && c.l.h.t.K.Kind != protocol.ElectionKind {
		return c.l, true
	}
	return nil, false
}

// heldKey is the context key under which Lease.Context and
// MultiLease.Context store held leases.
type heldKey struct{}

// heldEntry is one lease carried by a context, linked to those of the
// contexts it was derived from. An entry with no lease marks where a
// MultiLease's leases begin: the entries after it, down to the parent's, are
// its own.
type heldEntry struct {
	l    *Lease
	next *heldEntry
}

func heldIn(ctx context.Context) *heldEntry {
	e, _ := ctx.Value(heldKey{}).(*heldEntry)
	return e
}

// find returns the live hold of lock k of engine e carried by the chain, if
// any: a hold that has ended is no longer anyone's to re-enter. The kind must
// match too: an RWMutex's read and write holds share its keys.
func (c *heldEntry) find(e *engine, k protocol.Keys) *hold {
	for ; c != nil; c = c.next {
		if c.l == nil {
			continue
		}
		if h := c.l.h; h.e == e && h.t.K.Tag == k.Tag && h.t.K.Kind == k.Kind && h.t.Ending.Cause() == nil {
			return h
		}
	}
	return nil
}

// newHold returns the first Lease of a new hold of term t, both made in one
// allocation.
func newHold(e *engine, t *renew.Term) *Lease {
	lh := &struct {
		l Lease
		h hold
	}{h: hold{e: e, t: t, holds: 1}}
	lh.l.h = &lh.h
	return &lh.l
}

// hold is what one owner holds of a lock: the lease's term, and how many
// times it was taken (the original acquisition and its re-entries). Every
// Lease of the owner shares it.
type hold struct {
	e *engine
	t *renew.Term

	// mu serialises the round trips that change the hold count in Redis
	// (re-entry and release), so that holds, the authoritative count, stays
	// exact.
	mu    sync.Mutex
	holds int32 // beside granted, in one word: the hold and its Lease are one allocation
	// granted: a release granted the lock to this hold (its first Lease
	// was handed off), so others were waiting for it, and likely still are
	// when it is released.
	granted bool
}

// reenter adds one hold in Redis for a Lock made with a context carrying h;
// x are the kind's own arguments of its acquire script.
func (h *hold) reenter(ctx context.Context, x protocol.KindArgs) (*Lease, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.t
	if err := t.EndedErr("re-enter"); err != nil {
		return nil, errs.Op(ErrNotAcquired, err, "re-enter %q", t.K.Name)
	}
	r, err := h.e.backend.Reenter(ctx, *t.K, t.Owner, h.e.ren.TTLOf(t), int(h.holds)+1, x)
	if err != nil {
		// If the reply was lost the count in Redis may be one too high; the
		// next count sent, or the last release, sets it right.
		return nil, err
	}
	if !r.Reentered {
		lost := t.LostErr(protocol.CodeGone)
		h.e.ren.Lose(t, lost)
		return nil, errs.Op(ErrNotAcquired, lost, "re-enter %q", t.K.Name)
	}
	if r.NotReplicated != nil {
		// Give the hold back: the count in Redis returns to what it was.
		ttl := h.e.ren.TTLOf(t)
		cctx, cancel := cleanupContext(ctx, ttl)
		defer cancel()
		if _, err := h.e.backend.Release(cctx, *t.K, protocol.ReleaseArgs{Owner: t.Owner, Fence: t.FenceArg(), Mode: protocol.ReleaseOne, TTL: ttl, Count: int(h.holds)}); err != nil {
			h.e.log.Debug("dlock: undo of an unreplicated re-entry", "lock", t.K.Name, "err", err)
		}
		return nil, errs.Op(ErrNotAcquired, r.NotReplicated, "re-enter %q", t.K.Name)
	}
	h.holds++
	return &Lease{h: h, reentered: true}, nil
}

// unlock releases one hold; the last one frees the lock. It brackets the
// call with the UnlockStart and UnlockEnd hooks.
func (h *hold) unlock(ctx context.Context) error {
	hk := h.e.hooks
	if hk == nil {
		_, err := h.unlock1(ctx)
		return err
	}
	info := lockInfo(h.t)
	if hk.UnlockStart != nil {
		if c := hk.UnlockStart(ctx, info); c != nil {
			ctx = c
		}
	}
	last, err := h.unlock1(ctx)
	if hk.UnlockEnd != nil {
		hk.UnlockEnd(ctx, info, UnlockResult{Fence: h.t.Fence, Last: last, Held: time.Since(h.t.Begun), Err: err})
	}
	return err
}

func (h *hold) unlock1(ctx context.Context) (last bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, e := h.t, h.e
	if err := t.EndedErr("unlock"); err != nil {
		return false, err
	}
	if h.holds > 1 {
		ttl := e.ren.TTLOf(t)
		cctx, cancel := cleanupContext(ctx, ttl)
		defer cancel()
		// The client's count is the one that decides when the lock is freed:
		// this hold is given back whatever Redis answers, and a count that
		// failed to reach Redis is set right by the next one that does.
		h.holds--
		r, err := e.backend.Release(cctx, *t.K, protocol.ReleaseArgs{Owner: t.Owner, Fence: t.FenceArg(), Mode: protocol.ReleaseOne, TTL: ttl, Count: int(h.holds)})
		switch {
		case err != nil:
			return false, errs.Op(nil, err, "unlock %q: the hold was given back and the lock stays held by its others", t.K.Name)
		case r.Code == protocol.CodeHeld:
			return false, nil
		}
		lost := t.LostErr(r.Code)
		e.ren.Lose(t, lost)
		return false, errs.Op(ErrNotHeld, lost, "unlock")
	}

	// The last hold: the owner gives the lock up, so it is never renewed
	// again, whatever Redis answers.
	ttl := e.ren.Retire(t)
	cctx, cancel := cleanupContext(ctx, ttl)
	defer cancel()
	e.ren.Landed(cctx, t)
	mode := protocol.ReleaseLast
	if h.granted {
		mode = protocol.ReleaseLastQueued
	}
	r, err := e.backend.Release(cctx, *t.K, protocol.ReleaseArgs{Owner: t.Owner, Fence: t.FenceArg(), Mode: mode, TTL: ttl, Void: t.Doubt})
	if err != nil {
		e.log.Error("dlock: release failed; retrying in the background", "lock", t.K.Name, "fence", t.Fence, "err", err)
		e.ren.End(t, errUnlocked, nil)
		e.bg.doSoon(func() { h.releaseLater(ttl) })
		return true, errs.Op(nil, err, "unlock %q (the Client keeps trying in the background; Redis frees the lock by itself when its TTL runs out)", t.K.Name)
	}
	kept := func() bool { return protocol.KeptData(cctx, e.backend, t.Begun) }
	if lost := releasedLoss(t, r, e.ren.DeadlineOf(t), kept); lost != nil {
		e.ren.Lose(t, lost)
		return true, errs.Op(ErrNotHeld, lost, "unlock")
	}
	e.ren.End(t, errUnlocked, func() {
		if e.log.Enabled(ctx, slog.LevelDebug) {
			e.log.Debug("dlock: released", "lock", t.K.Name, "fence", t.Fence, "held", time.Since(t.Begun))
		}
	})
	return true, nil
}

// releasedLoss tells what r, the answer of the release of t's last hold,
// says: nil if the release freed the lock, else how the lease was lost.
// deadline is the lease's local deadline; kept, asked only of a release
// sent again whose answer shows no trace of its first copy, reports
// whether Redis is known to have kept its data since the hold began.
func releasedLoss(t *renew.Term, r protocol.Released, deadline time.Time, kept func() bool) error {
	before := time.Now().Before(deadline)
	switch {
	case r.Code == protocol.CodeDone,
		// The owner holds nothing, and the lock's keys show that its hold
		// ended while they were there: an earlier copy of this release (its
		// reply lost) freed it, since before the lease's local deadline it
		// cannot have expired instead.
		r.Code == protocol.CodeAfter && before && r.Retried:
		return nil
	case r.Retried && before && (r.Code == protocol.CodeOther || r.Code == protocol.CodeGone) && kept():
		// The lock went on, its keys rewritten or expired since, but Redis
		// lost none of its data meanwhile, and the lease cannot have expired
		// yet: only the first copy of this release can have ended the hold.
		return nil
	case r.Code == protocol.CodeEvicted:
		return t.LostErr(r.Code)
	case r.Code == protocol.CodeAfter && r.Retried:
		return errs.Op(ErrLockLost, nil, "%q was free of this owner when the release ran, but the reply came after the lease's deadline: an earlier copy of this release may have freed it (then this is a false alarm), or the lease had expired first", t.K.Name)
	case r.Code == protocol.CodeAfter:
		// No copy of this release ran before: the hold expired in Redis.
		return errs.Op(ErrLockLost, nil, "%q expired in Redis before its release ran", t.K.Name)
	case r.Retried:
		// A copy of this release whose reply was lost may have freed it,
		// and the keys no longer show it: the lock moved on since, or they
		// expired or were lost.
		return errs.Op(ErrLockLost, nil, "%q was not this owner's when the release was sent again after a lost reply, and Redis no longer shows whether the first copy freed it: if it did, this is a false alarm; if not, the lease had expired or Redis lost its keys (a restart, a failover, eviction)", t.K.Name)
	case before && r.Code == protocol.CodeOther:
		return errs.Op(ErrLockLost, nil, "%q is held by another owner, before this lease could have expired: Redis lost the lock's keys (a restart without persistence, a failover to a replica that missed it, eviction) and it was taken again", t.K.Name)
	case before:
		return errs.Op(ErrLockLost, nil, "%q was gone from Redis before this lease could have expired: Redis lost the lock's keys (a restart without persistence, a failover to a replica that missed it, eviction)", t.K.Name)
	case r.Code == protocol.CodeOther:
		return errs.Op(ErrLockLost, nil, "%q expired, and is held by another owner", t.K.Name)
	}
	return t.LostErr(r.Code)
}

// releaseLater retries the release of a hold whose last Unlock could not
// reach Redis (retryRelease) until Redis answers or the lease's local
// deadline passes; once the Client closes, it makes one last attempt.
func (h *hold) releaseLater(ttl time.Duration) {
	t, e := h.t, h.e
	until := e.ren.DeadlineOf(t)
	if t.Doubt != 0 {
		// Until the record it carries can matter.
		until = latest(until, t.Begun.Add(protocol.RequestTTL))
	}
	err := timing.RetryRelease(e.closing, until, ttl, func(ctx context.Context) error {
		_, err := e.backend.Release(ctx, *t.K, protocol.ReleaseArgs{Owner: t.Owner, Fence: t.FenceArg(), Mode: protocol.ReleaseLast, TTL: ttl, Void: t.Doubt})
		return err
	})
	switch {
	case err == nil:
		e.log.Info("dlock: released in the background", "lock", t.K.Name, "fence", t.Fence)
	case errors.Is(err, timing.ErrReleaseLapsed):
		e.log.Info("dlock: release not retried: the lease has expired by now", "lock", t.K.Name, "fence", t.Fence)
	default:
		e.log.Warn("dlock: release failed; Redis frees the lock when its TTL runs out", "lock", t.K.Name, "fence", t.Fence, "err", err)
	}
}

// errUnlocked is the cause of a lease's end by Unlock.
var errUnlocked = errs.Op(ErrNotHeld, nil, "the lease was unlocked")
