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

// MultiLock is a lock over several names at once, taken all or nothing: a
// successful Lock holds the Mutex of every name, a failed one holds none.
//
// A MultiLock is a cheap, immutable description: its names, de-duplicated and
// sorted, and the options of their Mutexes. It holds no state and is safe for
// concurrent use; each successful Lock or TryLock returns a MultiLease, which
// is what is unlocked, from any goroutine. The zero MultiLock is not usable;
// get one from Client.MultiLock.
//
// Every MultiLock takes its names one Mutex at a time in one global order,
// bytewise by name, whatever order they were given in. So two MultiLocks over
// overlapping names never deadlock: whoever holds a name waits only for names
// after it, and the holder of the last name in any such chain waits for
// nobody. The guarantee covers acquisitions that start holding nothing; a
// caller that holds one name (through a Lease or a re-entry context) and then
// takes a MultiLock including names before it can deadlock, as with any lock
// order. The lock of each name is that name's Mutex, so Mutex holders and
// MultiLocks of the same names exclude each other.
//
// Each name is a lock of its own, with its own keys, lease and fence, taken
// and released by scripts that touch that name's keys only. On Redis Cluster
// each name is therefore a single-slot lock, and the names of one MultiLock
// may live in different slots.
//
// Waiting is that of Mutex.Lock for each name in turn, so the fairness is
// per name. While a MultiLock waits for one name it already holds the names
// before it. The MultiLock is not atomic across names in Redis: an observer
// may see some of its names held while it is still waiting for the others,
// and a holder's names may be lost separately (see MultiLease.Done).
type MultiLock struct {
	names []string
	locks []*Mutex
	err   error // a bad name list or option, returned by every call
}

// MultiLock returns the lock over every one of names. Names may repeat and
// come in any order; any non-empty byte string of at most MaxNameLen bytes is
// a valid name. An empty list, an invalid name or an invalid option is an
// error returned by every call on the MultiLock. The options apply to the
// Mutex of every name.
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

// Lock acquires every name's Mutex in order, each waiting as Mutex.Lock
// waits, until all are held or ctx is done. ctx bounds the wait only, never
// the leases.
//
// If ctx ends or any acquire fails, every name already taken is unlocked
// before Lock returns (also when ctx is cancelled by then), and nothing is
// held. When ctx ended, the error matches both ErrNotAcquired and ctx.Err().
// If ctx carries leases of some of the names (see MultiLease.Context and
// Lease.Context), Lock re-enters those.
func (ml *MultiLock) Lock(ctx context.Context) (*MultiLease, error) {
	return ml.lock(ctx, "lock", (*Mutex).Lock)
}

// TryLock makes one attempt per name, in order, one round trip each. At the
// first name held by another owner it unlocks the names it took and returns
// an error matching ErrNotAcquired. If ctx carries leases of some of the
// names, TryLock re-enters those.
func (ml *MultiLock) TryLock(ctx context.Context) (*MultiLease, error) {
	return ml.lock(ctx, "trylock", (*Mutex).TryLock)
}

// Do acquires every name as Lock does, runs fn, and unlocks them all, also
// when fn panics. fn's context is cancelled when any of the leases ends
// (context.Cause then tells why), and it carries every lease, so that a Lock
// of any of the names, or of a MultiLock over some of them, within fn
// re-enters instead of deadlocking; LeaseFromContext reports none there, as
// no single Lease stands for them (Lock returns the MultiLease, whose Fences
// are one per name). Do returns fn's error joined with Unlock's; an Unlock
// error matching ErrNotHeld means fn ran, at least at the end, without one of
// the locks.
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

// MultiLease is one successful acquisition of a MultiLock: a Lease for each
// name, held together, and the handle its holder keeps to release them all.
//
// A MultiLease is safe for concurrent use, and may be unlocked from any
// goroutine. Each of its leases is renewed on its own and can be lost on its
// own; Done closes, and Err tells why, as soon as any of them ends. Work that
// needs all the names must stop then: it is no longer protected by all of
// them. The methods of a nil *MultiLease return errors, or a closed Done.
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

// Fences returns the fence of each name's lease, in Names order (see
// Lease.Fence). Each fence rises per name: a resource guarded by one of the
// names checks that name's fence, and fences of different names are not
// comparable.
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

// Err returns nil while every lease is held. After Done is closed it returns
// why, as Lease.Err does for the first lease that ended: an error matching
// ErrLockLost if it was lost, ErrNotHeld if the MultiLease was unlocked,
// ErrClosed if the Client was closed.
func (l *MultiLease) Err() error {
	if l == nil || l.ctx == nil {
		return errNilMultiLease
	}
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Context returns a copy of parent that is cancelled when parent is, or when
// any of the leases ends (context.Cause then tells why, as Err does), and that
// carries every lease for re-entry: a Lock or TryLock with this context (or
// one derived from it) of any of the names, or of a MultiLock over any of
// them, on the same Client re-enters the held locks instead of waiting. Call
// cancel when done. A nil parent is taken as context.Background().
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

// Unlock unlocks every lease, in reverse order, and returns their errors
// joined: one matching ErrNotHeld and ErrLockLost tells of a lease that had
// been lost, and the others are unlocked all the same. Unlock still works when
// ctx is already cancelled. A release that could not reach Redis is retried
// by the Client in the background, as Lease.Unlock says; the error says so,
// and there is nothing to retry. Another Unlock returns an error matching
// ErrNotHeld and changes nothing in Redis.
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
