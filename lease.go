package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/renew"
	"sync/atomic"
	"time"
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
