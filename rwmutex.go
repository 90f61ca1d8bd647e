package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// RWMutex is a reentrant reader/writer lock shared by every process that uses
// the same name on the same Redis: any number of readers or one writer hold
// it. It is used as a Mutex is; each read hold has a lease of its own, and
// every hold, read or write, gets a fence from the name's one counter.
//
// Waiters are served in order of arrival, and a new reader waits behind a
// waiting writer, so writers are not starved. A writer may also read: RLock
// with a ctx carrying its write Lease takes a read hold at once, which is how
// to downgrade without a gap (then unlock the write Lease). Upgrading from
// read to write is not supported. See docs/failure-model.md.
type RWMutex struct {
	r, w acquirer
}

// RWMutex returns the reader/writer lock called name, valid as for
// Client.Mutex; the options apply to read and write leases alike. It shares
// nothing with a Mutex or FairMutex of the same name.
func (c *Client) RWMutex(name string, opts ...Option) *RWMutex {
	return &RWMutex{r: c.acquirer(protocol.RWReadKind, name, opts), w: c.acquirer(protocol.RWWriteKind, name, opts)}
}

// Name returns the lock's name.
func (m *RWMutex) Name() string {
	_, w := m.acquirers()
	return w.k.Name
}

// RLock acquires the lock for reading, waiting until no writer holds it or
// waits ahead, or until ctx is done (ErrNotAcquired and ctx.Err(), as for
// Mutex.Lock). With a ctx carrying a read Lease of this lock it re-enters;
// with its write Lease it takes a new read hold at once.
func (m *RWMutex) RLock(ctx context.Context) (*Lease, error) {
	return m.rlock(ctx, "rlock", true)
}

// TryRLock acquires the lock for reading if no writer holds it or waits for
// it; otherwise the error matches ErrNotAcquired. Re-entry is as for RLock.
func (m *RWMutex) TryRLock(ctx context.Context) (*Lease, error) {
	return m.rlock(ctx, "tryrlock", false)
}

// Lock acquires the lock for writing, waiting in line until nobody holds it,
// or until ctx is done, as Mutex.Lock does. With a ctx carrying its write
// Lease it re-enters; with only a read Lease it fails at once with
// ErrNotAcquired, since upgrading is not supported.
func (m *RWMutex) Lock(ctx context.Context) (*Lease, error) {
	return m.lock(ctx, "lock", true)
}

// TryLock acquires the lock for writing if nobody holds it or waits for it;
// otherwise the error matches ErrNotAcquired. Re-entry and the upgrade error
// are as for Lock.
func (m *RWMutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.lock(ctx, "trylock", false)
}

// RDo runs fn holding the lock for reading, as Mutex.Do does. A Lock within
// fn fails: it would be an upgrade.
func (m *RWMutex) RDo(ctx context.Context, fn func(ctx context.Context) error) error {
	return doLocked(ctx, "RWMutex.RDo", fn, m.RLock)
}

// Do runs fn holding the lock for writing, as Mutex.Do does. An RLock within
// fn takes a read hold at once.
func (m *RWMutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return doLocked(ctx, "RWMutex.Do", fn, m.Lock)
}

// rlock takes a read hold, or re-enters one ctx carries. Who may take the
// lock, in which order, and whom a release wakes are rw_acquire.lua's and
// rw_release.lua's rules (internal/protocol/lua): only the waiters that can
// now proceed are woken, a writer first in line by a grant as a FairMutex's,
// the readers before the first waiting writer by a message each.
func (m *RWMutex) rlock(ctx context.Context, op string, wait bool) (*Lease, error) {
	r, w := m.acquirers()
	writer := "" // the owner of a write hold carried by ctx: the caller is the writer
	if ctx != nil {
		if h := heldIn(ctx).find(w.e, w.k); h != nil {
			writer = h.t.Owner
		}
	}
	return r.acquire(ctx, op, wait, protocol.KindArgs{Writer: writer})
}

// lock takes the write hold, or re-enters one ctx carries. It refuses an
// upgrade from a read hold ctx carries: two readers that both upgraded would
// wait for each other forever.
func (m *RWMutex) lock(ctx context.Context, op string, wait bool) (*Lease, error) {
	r, w := m.acquirers()
	if ctx != nil && w.err == nil {
		held := heldIn(ctx)
		if held.find(w.e, w.k) == nil && held.find(r.e, r.k) != nil {
			return nil, errs.Op(ErrNotAcquired, nil, "%s %q: upgrade from read to write is not supported: unlock the read Lease first", op, w.k.Name)
		}
	}
	return w.acquire(ctx, op, wait, protocol.KindArgs{})
}

// acquirers returns m's read and write acquirers; a nil or zero *RWMutex
// gets ones that answer every call with an error.
func (m *RWMutex) acquirers() (r, w *acquirer) {
	if m == nil || m.w.e == nil && m.w.err == nil {
		a := &acquirer{err: errors.New("dlock: nil or zero RWMutex; get one from Client.RWMutex")}
		return a, a
	}
	return &m.r, &m.w
}
