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

// Lease is one successful acquisition of a lock: the handle its holder keeps
// to release it, read its fence and learn whether it is still held.
//
// A Lease is safe for concurrent use. Unlock may be called from any goroutine,
// not only the one that acquired it; ownership is not tied to goroutines.
//
// While a Lease is held its lock is renewed in the background (unless the
// lock was made WithoutRenewal). If the lease is lost anyway (another owner
// took the lock after it expired, or renewal failed until the local deadline)
// Done is closed and Err matches ErrLockLost. A lease can always be lost
// without the holder noticing in time (a paused process notices nothing); use
// Fence to let the protected resource reject a stale holder.
//
// The methods of a nil *Lease return errors, or a closed Done channel.
type Lease struct {
	h         *hold
	reentered bool // re-entered an existing hold; Unlock gives back one hold count
	handedOff bool // taken on a release's grant, without a request of its own
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

// Owner returns the lease's owner id, as Redis keeps it and as Inspect and
// the dlock command's ls and inspect show it: the Client's ID, ':' and a
// number.
func (l *Lease) Owner() string {
	if l == nil || l.h == nil {
		return ""
	}
	return l.h.t.Owner
}

// Fence returns the lease's fencing token: a number that is strictly greater
// than that of every earlier acquisition of the same lock name, by any holder,
// in any process. A re-entered Lease has the fence of the hold it re-entered.
// Hand it to the resource the lock protects, and have the resource reject any
// write whose fence is lower than the highest it has accepted.
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
	return l.h.t.Ending.Done()
}

// Err returns nil while the lease is held. After Done is closed it returns why:
// an error matching ErrLockLost if the lease was lost, ErrNotHeld if it was
// unlocked, ErrClosed if the Client was closed.
func (l *Lease) Err() error {
	if l == nil || l.h == nil {
		return errNilLease
	}
	return l.h.t.Ending.Cause()
}

// Context returns a copy of parent that is cancelled when parent is, or when
// the lease ends (context.Cause then tells why, as Err does), and that carries
// the lease: LeaseFromContext returns it, and a Lock or TryLock of the same
// name on the same Client with this context (or one derived from it)
// re-enters the held lock instead of waiting for it. Call cancel when done, as
// with context.WithCancel. A nil parent is taken as context.Background().
func (l *Lease) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancelCause := context.WithCancelCause(parent)
	if l == nil || l.h == nil {
		cancelCause(errNilLease)
		return ctx, func() {}
	}
	end := &l.h.t.Ending
	stop := end.AfterFunc(func() { cancelCause(end.Cause()) })
	ctx = context.WithValue(ctx, heldKey{}, &heldEntry{l: l, next: heldIn(parent)})
	return ctx, func() {
		stop()
		cancelCause(context.Canceled)
	}
}

// Unlock gives the lock back: the hold this Lease stands for is released, and
// when it was the last hold of its owner the lock becomes free and one waiter
// is woken. Renewal has stopped before Unlock sends anything to Redis, so a
// lock given up is never renewed again, whatever happens next.
//
// Unlock still works when ctx is already cancelled: the release runs with ctx's
// values under a timeout of its own. A second Unlock of the same Lease, or an
// Unlock after the lease ended, returns an error matching ErrNotHeld (and
// ErrLockLost if the lease had been lost) and changes nothing in Redis. If
// Redis could not be reached, the error says so; the Lease counts as unlocked
// all the same, and the Client keeps trying to release the lock in the
// background until it succeeds or the lease's TTL has run out (after which
// Redis has freed the lock by itself), so there is nothing to retry.
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

// Extend sets the lease to expire ttl from now, and makes ttl the lease's TTL
// for the renewals that follow. It is one round trip. For a lease made
// WithoutRenewal, it is how the holder asks for more time; a ttl shorter than
// what is left shortens the lease. If the lease was found lost, the error
// matches ErrNotHeld and ErrLockLost.
//
// The newest intent is what Redis keeps: no renewal or Extend sent before
// this one undoes it, however late Redis runs it (a lost reply retried, a
// script sent again) or its reply comes. While it is in flight, and after
// it failed, the lease counts as ending no later than the shorter of the old
// and the new TTL allow. If its reply comes after the lease it asked for has
// run out, the lease is lost, and the error matches ErrLockLost. An Extend
// during Unlock returns an error matching ErrNotHeld.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil || l.h == nil {
		return errNilLease
	}
	switch {
	case ctx == nil:
		return errs.Op(nil, nil, "extend %q: nil context", l.Name())
	case ttl < MinTTL:
		return errs.Op(nil, nil, "extend %q by %v: the TTL must be at least %v", l.Name(), ttl, MinTTL)
	}
	return l.h.e.ren.Extend(ctx, l.h.t, ttl)
}

// TTL returns how long the lock has left before it expires, as Redis sees it.
// If the lease is no longer held, the error matches ErrNotHeld.
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil || l.h == nil {
		return 0, errNilLease
	}
	t := l.h.t
	if ctx == nil {
		return 0, errs.Op(nil, nil, "ttl %q: nil context", t.K.Name)
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

// LeaseFromContext returns the Lease ctx carries, and whether it carries one.
// The function Do runs gets the Lease in its context, as do the handlers of
// lockhttp and idempotency, so that they can hand its Fence to the resource
// the lock protects. A context carries the Lease of each Lease.Context it was
// derived from; LeaseFromContext returns the innermost. It reports false if
// ctx carries none, or if the innermost is a MultiLease's (MultiLock.Do,
// MultiLease.Context), which has a lease per name, or a Leadership's
// (Leadership.Context), which ends by Resign. A Lease that has ended is
// returned all the same: its Err says why.
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
