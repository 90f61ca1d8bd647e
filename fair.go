package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/protocol"
)

// FairMutex is a reentrant mutual-exclusion lock that is granted in strict
// order of arrival, shared by every process that uses the same name on the
// same Redis.
//
// A FairMutex is, like a Mutex, a cheap and immutable description of a lock,
// safe for concurrent use; each successful Lock or TryLock returns a Lease,
// which is what is unlocked. The zero FairMutex is not usable; get one from
// Client.FairMutex. Re-entry works as for a Mutex, through a context carrying
// the Lease.
//
// Waiters queue in Redis in the order they first asked (by Redis server
// time). The lock goes to the first live waiter in the queue, and a newcomer,
// TryLock included, never takes it ahead of a waiter, even while it is free.
// On release the lock is granted to the waiter at the head, and only that
// waiter is woken; its Lock returns on the message. A waiter keeps its place alive by renewing it while it
// waits; one that stops (its process died) lapses, so a dead waiter holds the
// queue up for at most half the TTL. A waiter whose context ends leaves the
// queue at once. The package documentation (Times) gives every such time.
//
// It differs from a Mutex in one case: a grantee that does not take up its
// grant in time (its process paused past the grant lease) keeps the head of
// the queue while its registration lives, where a Mutex passes the lock to
// the next live waiter.
type FairMutex struct {
	a acquirer
}

// FairMutex returns the fair lock called name. Any byte string of at most
// MaxNameLen bytes is a valid name but the empty one; an invalid name or
// option is an error returned by every call. A FairMutex and a Mutex of the
// same name are different locks.
func (c *Client) FairMutex(name string, opts ...Option) *FairMutex {
	return &FairMutex{a: c.acquirer(protocol.FairKind, name, opts)}
}

// Name returns the lock's name.
func (m *FairMutex) Name() string { return m.acquirer().k.Name }

// Lock queues for the lock and waits until it is this caller's turn, or ctx
// is done. ctx bounds the wait only, never the lease. If ctx ends first, the
// error matches both ErrNotAcquired and ctx.Err(), and the caller's place in
// the queue is given up. If ctx carries a Lease of this lock (see
// Lease.Context), Lock re-enters it at once.
func (m *FairMutex) Lock(ctx context.Context) (*Lease, error) {
	return m.acquirer().acquire(ctx, "lock", true, nil)
}

// TryLock takes the lock if it is free and nobody is queued for it, in one
// round trip; otherwise the error matches ErrNotAcquired. It never queues.
func (m *FairMutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.acquirer().acquire(ctx, "trylock", false, nil)
}

// Do acquires the lock as Lock does, runs fn, and unlocks, as Mutex.Do does.
func (m *FairMutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return doLocked(ctx, "FairMutex.Do", fn, m.Lock)
}

func (m *FairMutex) acquirer() *acquirer {
	if m == nil || m.a.e == nil && m.a.err == nil {
		return &acquirer{err: errors.New("dlock: nil or zero FairMutex; get one from Client.FairMutex")}
	}
	return &m.a
}
