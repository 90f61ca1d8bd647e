package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// RWMutex is a reentrant reader/writer lock shared by every process that uses
// the same name on the same Redis: it is held by any number of readers or by
// one writer.
//
// The zero RWMutex is not usable; get one from Client.RWMutex. An RWMutex is
// a cheap, immutable description of a lock, as a Mutex is: make one wherever
// it is needed, or share one between goroutines; it is safe for concurrent
// use. It holds no state: each successful RLock, TryRLock, Lock or TryLock
// returns a Lease, and the Lease is what is unlocked, by any goroutine that
// has it; ownership is never tied to goroutines.
//
// Every read hold has a lease of its own, renewed while held: a reader that
// dies frees its share after its TTL, whatever the other readers do. The write
// hold has one lease, as a Mutex's. Every acquisition, read or write, gets a
// fence from the lock's one counter, so a write's fence is above that of
// every read and write before it.
//
// Re-entry travels in a context, as for a Mutex (see Lease.Context, Do and
// RDo): RLock with a context carrying a read Lease of this RWMutex re-enters
// that read hold, and Lock with one carrying its write Lease re-enters the
// write hold; a Lease counts only on the Client that acquired it. A writer
// may also read: RLock with a context carrying its write Lease takes a read
// hold of its own at once, even while others wait. That is how to downgrade
// without a gap: take the read lock under the write lock, then unlock the
// write Lease; no writer can get in between.
//
// Waiters are served in order of arrival, and writers are not starved: a
// writer takes the lock when no reader or writer holds it and no live waiter
// arrived before it; a reader takes it when no writer holds it and no live
// writer arrived before it. So once a writer waits,
// readers that come after it wait behind it, and it gets the lock as soon as
// the readers already inside leave. TryLock and TryRLock follow the same rules
// without queueing. When the lock is freed, only the waiters that can now
// proceed are woken: a writer first in line (the lock is granted to it, as a
// FairMutex's is, and its Lock returns on the message), or every reader
// queued before the first waiting writer (each then takes its read hold with
// one request). A reader leaving while other readers hold wakes nobody. A
// waiter keeps its place by renewing it while it waits; one whose process
// died lapses, and one whose context ends leaves the queue at once. The
// package documentation (Times) gives every such time.
//
// Upgrading from read to write is not supported: two readers that both
// upgraded would wait for each other forever. Lock or TryLock with a context
// carrying a read Lease of this RWMutex (and not its write Lease) fails at
// once with an error matching ErrNotAcquired; unlock the read Lease, then
// Lock. An RWMutex shares no keys with a Mutex or FairMutex of the same name.
type RWMutex struct {
	r, w acquirer
}

// RWMutex returns the reader/writer lock called name. Any byte string of at
// most MaxNameLen bytes is a valid name but the empty one; an invalid name or
// option is an error returned by every call on the RWMutex. The options apply
// to read and write leases alike.
func (c *Client) RWMutex(name string, opts ...Option) *RWMutex {
	return &RWMutex{r: c.acquirer(protocol.RWReadKind, name, opts), w: c.acquirer(protocol.RWWriteKind, name, opts)}
}

// Name returns the lock's name.
func (m *RWMutex) Name() string {
	_, w := m.acquirers()
	return w.k.Name
}

// RLock acquires the lock for reading, waiting until no writer holds it or
// waits before this caller, or until ctx is done. ctx bounds the wait only,
// never the lease. If ctx ends first, the error matches both ErrNotAcquired
// and ctx.Err(), and the caller's place in the queue is given up. If ctx
// carries a read Lease of this RWMutex, RLock re-enters it at once; if it
// carries the write Lease, RLock takes a new read hold at once.
func (m *RWMutex) RLock(ctx context.Context) (*Lease, error) {
	return m.rlock(ctx, "rlock", true)
}

// TryRLock takes the lock for reading if no writer holds it or waits for it,
// in one round trip; otherwise the error matches ErrNotAcquired. It never
// queues. Re-entry and reading under the write lock work as for RLock.
func (m *RWMutex) TryRLock(ctx context.Context) (*Lease, error) {
	return m.rlock(ctx, "tryrlock", false)
}

// Lock acquires the lock for writing, waiting until no reader or writer holds
// it and every waiter that arrived before this caller has had its turn, or
// until ctx is done. ctx bounds the wait only, never the lease. If ctx ends
// first, the error matches both ErrNotAcquired and ctx.Err(), and the
// caller's place in the queue is given up. If ctx carries the write Lease of
// this RWMutex, Lock re-enters it at once; if it carries only a read Lease,
// Lock fails at once: upgrading is not supported.
func (m *RWMutex) Lock(ctx context.Context) (*Lease, error) {
	return m.lock(ctx, "lock", true)
}

// TryLock takes the lock for writing if nobody holds it and nobody is queued
// for it, in one round trip; otherwise the error matches ErrNotAcquired. It
// never queues. Re-entry and the upgrade error are as for Lock.
func (m *RWMutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.lock(ctx, "trylock", false)
}

// RDo acquires the lock for reading as RLock does, runs fn, and unlocks, also
// when fn panics, as Mutex.Do does. fn's context carries the read Lease, so
// an RLock within fn re-enters; a Lock within fn fails, since that would be
// an upgrade.
func (m *RWMutex) RDo(ctx context.Context, fn func(ctx context.Context) error) error {
	return doLocked(ctx, "RWMutex.RDo", fn, m.RLock)
}

// Do acquires the lock for writing as Lock does, runs fn, and unlocks, also
// when fn panics, as Mutex.Do does. fn's context carries the write Lease, so
// a Lock within fn re-enters and an RLock within fn takes a read hold at once.
func (m *RWMutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return doLocked(ctx, "RWMutex.Do", fn, m.Lock)
}

func (m *RWMutex) rlock(ctx context.Context, op string, wait bool) (*Lease, error) {
	r, w := m.acquirers()
	writer := "" // the owner of a write hold carried by ctx: the caller is the writer
	if ctx != nil {
		if h := heldIn(ctx).find(w.e, w.k); h != nil {
			writer = h.t.Owner
		}
	}
	return r.acquire(ctx, op, wait, []any{"r", writer})
}

func (m *RWMutex) lock(ctx context.Context, op string, wait bool) (*Lease, error) {
	r, w := m.acquirers()
	if ctx != nil && w.err == nil {
		held := heldIn(ctx)
		if held.find(w.e, w.k) == nil && held.find(r.e, r.k) != nil {
			return nil, errs.Op(ErrNotAcquired, nil, "%s %q: upgrade from read to write is not supported: unlock the read Lease first", op, w.k.Name)
		}
	}
	return w.acquire(ctx, op, wait, []any{"w", ""})
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
