package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/protocol"
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
// Waiters are served in the order they arrived: a lock released while others
// wait is granted to the one registered longest ago, and only that one is
// woken; its Lock returns on the message. A lock whose holder died goes to
// the first live waiter, and a newcomer, TryLock included, never takes it
// ahead of a live waiter. A waiter paused past its grant goes to the back
// (a FairMutex keeps its place; see the package documentation, Waiting).
type Mutex struct {
	a acquirer
}

// Mutex returns the lock called name. Any byte string of at most MaxNameLen
// bytes is a valid name but the empty one; an invalid name or option is an
// error returned by every call on the Mutex. A Mutex and a FairMutex of the
// same name are different locks.
func (c *Client) Mutex(name string, opts ...Option) *Mutex {
	return &Mutex{a: c.acquirer(protocol.MutexKind, name, opts)}
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.acquirer().k.Name }

// Lock acquires the lock, waiting until it is free or ctx is done. ctx bounds
// the wait only, never the lease: a Lease outlives the ctx it was acquired
// with until it is unlocked or lost.
//
// A waiting Lock sleeps until a release grants it the lock, or until
// the holder's lease would expire, then tries again; it does not poll, beyond
// a keep-alive while it waits (see Times in the package documentation), and
// it rides out a failover or restart of Redis (see Outages). If ctx ends
// first, the error matches both ErrNotAcquired and ctx.Err(), and the wait
// leaves nothing behind in Redis. If ctx carries a Lease of this lock (see Lease.Context),
// Lock re-enters it at once.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	return m.acquirer().acquire(ctx, "lock", true, nil)
}

// TryLock makes one attempt to acquire the lock, one round trip. If another
// owner holds it (or it was just granted to a waiter), the error matches
// ErrNotAcquired. If ctx carries a Lease of this lock (see Lease.Context),
// TryLock re-enters it.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.acquirer().acquire(ctx, "trylock", false, nil)
}

// Do acquires the lock as Lock does, runs fn, and unlocks, also when fn panics.
// fn's context is cancelled if the lease is lost (context.Cause then matches
// ErrLockLost), and it carries the Lease: LeaseFromContext returns it, for
// its Fence, and a Lock of the same name within fn re-enters instead of
// deadlocking. Do returns fn's error joined with Unlock's; an Unlock error
// matching ErrNotHeld means fn ran, at least at the end, without the lock.
func (m *Mutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return doLocked(ctx, "Mutex.Do", fn, m.Lock)
}

// acquirer returns m's acquirer; a nil or zero *Mutex gets one that answers
// every call with an error.
func (m *Mutex) acquirer() *acquirer {
	if m == nil || m.a.e == nil && m.a.err == nil {
		return &acquirer{err: errors.New("dlock: nil or zero Mutex; get one from Client.Mutex")}
	}
	return &m.a
}
