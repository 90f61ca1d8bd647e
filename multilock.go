package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/renew"
	"slices"
	"sync"
	"time"
)

// MultiLock is a lock over several names, taken all or nothing: a successful
// Lock or TryLock holds the Mutex of every name and returns a MultiLease; a
// failed one holds none.
//
// A MultiLock is immutable and safe for concurrent use. It takes its names one
// at a time in bytewise order, so MultiLocks over overlapping names never
// deadlock each other; a caller that already holds one of the names can. It is
// not atomic in Redis: while it waits for a name it holds those before it, and
// its names can be lost separately (see MultiLease). The names may live in
// different Redis Cluster slots.
type MultiLock struct {
	names []string
	locks []*Mutex
	err   error // a bad name list or option, returned by every call
}

// MultiLock returns the lock over names, which may repeat and come in any
// order, each valid as for Client.Mutex; the options apply to every name's
// Mutex. An empty list or an invalid name or option is the error of every call.
func (c *Client) MultiLock(names []string, opts ...Option) *MultiLock {
	if c == nil {
		return &MultiLock{err: errors.New("dlock: MultiLock of a nil Client")}
	}
	if len(names) == 0 {
		return &MultiLock{err: errors.New("dlock: MultiLock: no lock names")}
	}
	for _, name := range names {
		if err := nameErr("MultiLock", name); err != nil {
			return &MultiLock{err: err}
		}
	}
	if _, err := c.cfg.with(opts, false); err != nil {
		return &MultiLock{err: errs.Op(nil, err, "MultiLock")}
	}
	sorted := slices.Compact(slices.Sorted(slices.Values(names)))
	ml := &MultiLock{names: sorted, locks: make([]*Mutex, len(sorted))}
	for i, name := range sorted {
		ml.locks[i] = c.Mutex(name, opts...)
	}
	return ml
}

// Names returns the lock's names, de-duplicated, in the order they are taken.
func (ml *MultiLock) Names() []string {
	if ml == nil {
		return nil
	}
	return slices.Clone(ml.names)
}

// Lock acquires every name's Mutex in order, as Mutex.Lock does, until all are
// held or ctx is done; ctx bounds the wait only. On failure it unlocks what it
// took before it returns; if ctx ended, the error matches ErrNotAcquired and
// ctx.Err(). The leases of the names that ctx carries are re-entered.
func (ml *MultiLock) Lock(ctx context.Context) (*MultiLease, error) {
	return ml.lock(ctx, "lock", (*Mutex).Lock)
}

// TryLock tries each name once, in order; at the first it cannot take, it
// unlocks those it took and the error matches ErrNotAcquired. It re-enters as
// Lock does.
func (ml *MultiLock) TryLock(ctx context.Context) (*MultiLease, error) {
	return ml.lock(ctx, "trylock", (*Mutex).TryLock)
}

// Do runs fn holding every name, as Mutex.Do does. fn's ctx is cancelled when
// any lease ends and carries every lease for re-entry, but LeaseFromContext
// finds none in it: to pass fences on, use Lock and MultiLease.Fences.
func (ml *MultiLock) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return doLocked(ctx, "MultiLock.Do", fn, ml.Lock)
}

func (ml *MultiLock) lock(ctx context.Context, op string, acquire func(*Mutex, context.Context) (*Lease, error)) (*MultiLease, error) {
	switch {
	case ml == nil:
		return nil, errors.New("dlock: nil *MultiLock")
	case ml.err != nil:
		return nil, ml.err
	case len(ml.locks) == 0:
		return nil, errors.New("dlock: zero MultiLock; get one from Client.MultiLock")
	case ctx == nil:
		return nil, errs.Op(nil, nil, "multi%s %q: nil context", op, ml.names)
	}
	leases := make([]*Lease, 0, len(ml.locks))
	for _, m := range ml.locks {
		l, err := acquire(m, ctx)
		if err != nil {
			return nil, errors.Join(
				errs.Op(nil, err, "multi%s %q", op, ml.names),
				unlockAll(ctx, leases))
		}
		leases = append(leases, l)
	}
	return newMultiLease(ml.names, leases), nil
}

// unlockAll unlocks leases in reverse order, each even if ctx has ended
// (Lease.Unlock releases under a context of its own), and joins the errors.
func unlockAll(ctx context.Context, leases []*Lease) error {
	var errs []error
	for _, l := range slices.Backward(leases) {
		if err := l.Unlock(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// MultiLease is one acquisition of a MultiLock: a Lease per name, released
// together. It is safe for concurrent use. Its leases are renewed and can be
// lost separately: once Done is closed, work that needs every name is no
// longer protected. A nil *MultiLease's methods return errors or a closed Done.
type MultiLease struct {
	names  []string
	leases []*Lease

	ctx    context.Context // cancelled, with the reason as cause, when any lease ends
	cancel context.CancelCauseFunc
	stops  []func() bool // undo the context.AfterFunc on each lease

	mu       sync.Mutex // serialises Unlock
	unlocked bool
}

// errNilMultiLease is what the methods of a nil *MultiLease return.
var errNilMultiLease = errors.New("dlock: nil or zero *MultiLease")

func newMultiLease(names []string, leases []*Lease) *MultiLease {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &MultiLease{names: names, leases: leases, ctx: ctx, cancel: cancel}
	l.stops = make([]func() bool, len(leases))
	for i, sub := range leases {
		end := &sub.h.t.Ending
		l.stops[i] = end.AfterFunc(func() { cancel(end.Cause()) })
	}
	return l
}

// Names returns the names held, in the order they were taken.
func (l *MultiLease) Names() []string {
	if l == nil {
		return nil
	}
	return slices.Clone(l.names)
}

// Leases returns the lease of each name, in Names order. Unlock the
// MultiLease rather than these, so that it knows they are released.
func (l *MultiLease) Leases() []*Lease {
	if l == nil {
		return nil
	}
	return slices.Clone(l.leases)
}

// Fences returns the fence of each name's lease, in Names order. Fences of
// different names are not comparable: a resource checks its own name's.
func (l *MultiLease) Fences() []int64 {
	if l == nil {
		return nil
	}
	fs := make([]int64, len(l.leases))
	for i, sub := range l.leases {
		fs[i] = sub.Fence()
	}
	return fs
}

// Done returns a channel that is closed when any of the leases ends: when one
// is lost, when the MultiLease is unlocked, or when the Client is closed.
func (l *MultiLease) Done() <-chan struct{} {
	if l == nil || l.ctx == nil {
		return renew.ClosedChan
	}
	return l.ctx.Done()
}

// Err returns nil while every lease is held; after Done is closed, why the
// first lease ended, as Lease.Err does: ErrLockLost, ErrNotHeld or ErrClosed.
func (l *MultiLease) Err() error {
	if l == nil || l.ctx == nil {
		return errNilMultiLease
	}
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Context returns a copy of parent that is cancelled when parent is or any
// lease ends, and that carries every lease for re-entry, as Lease.Context
// does. Call cancel when done; a nil parent is taken as context.Background().
func (l *MultiLease) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancelCause := context.WithCancelCause(parent)
	if l == nil || l.ctx == nil {
		cancelCause(errNilMultiLease)
		return ctx, func() {}
	}
	stop := context.AfterFunc(l.ctx, func() { cancelCause(context.Cause(l.ctx)) })
	held := heldIn(parent)
	for _, sub := range l.leases {
		held = &heldEntry{l: sub, next: held}
	}
	// No single Lease stands for the MultiLease: LeaseFromContext reports
	// none.
	held = &heldEntry{next: held}
	ctx = context.WithValue(ctx, heldKey{}, held)
	return ctx, func() {
		stop()
		cancelCause(context.Canceled)
	}
}

// Unlock unlocks every lease, in reverse order, as Lease.Unlock does, even
// with a cancelled ctx, and returns their errors joined. A second Unlock
// returns an error matching ErrNotHeld.
func (l *MultiLease) Unlock(ctx context.Context) error {
	if l == nil || l.ctx == nil {
		return errNilMultiLease
	}
	if ctx == nil {
		return errs.Op(nil, nil, "unlock %q: nil context", l.names)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unlocked {
		return errs.Op(ErrNotHeld, nil, "unlock %q: already unlocked", l.names)
	}
	l.unlocked = true
	err := unlockAll(ctx, l.leases)
	for _, stop := range l.stops {
		stop()
	}
	l.cancel(l.endCause())
	return err
}

// endCause is why the MultiLease ended once every lease is unlocked: the
// first lease that ended otherwise than by Unlock says why, if any did.
func (l *MultiLease) endCause() error {
	for _, sub := range l.leases {
		if err := sub.Err(); err != nil && !errors.Is(err, ErrNotHeld) {
			return err
		}
	}
	return errUnlocked
}

// Extend extends every lease as Lease.Extend does, one round trip each, and
// returns their errors joined.
func (l *MultiLease) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil || l.ctx == nil {
		return errNilMultiLease
	}
	if ctx == nil {
		return errs.Op(nil, nil, "extend %q: nil context", l.names)
	}
	if ttl < MinTTL {
		return errs.Op(nil, nil, "extend %q by %v: the TTL must be at least %v", l.names, ttl, MinTTL)
	}
	var errs []error
	for _, sub := range l.leases {
		if err := sub.Extend(ctx, ttl); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
