package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/protocol"
)

// Mutex is a reentrant mutual-exclusion lock shared by every process that uses
// the same name on the same Redis. Each successful Lock or TryLock returns a
// Lease, which is what is unlocked, from any goroutine.
//
// A Mutex is immutable and safe for concurrent use; the zero Mutex is not
// usable. A call whose ctx carries a Lease of the same lock from the same
// Client re-enters it (see Lease.Context). Waiters are served in order of
// arrival. docs/failure-model.md states what a lease promises.
type Mutex struct {
	a acquirer
}

// Mutex returns the lock called name, a non-empty string of at most MaxNameLen
// bytes. An invalid name or option is the error of every call on the Mutex.
func (c *Client) Mutex(name string, opts ...Option) *Mutex {
	return &Mutex{a: c.acquirer(protocol.MutexKind, name, opts)}
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.acquirer().k.Name }

// Lock acquires the lock, waiting in line until it is free or ctx is done; ctx
// bounds the wait only, never the Lease. If ctx ends first, the error matches
// both ErrNotAcquired and ctx.Err(). A waiting Lock rides out a Redis outage or
// failover. If ctx carries a Lease of this lock, Lock re-enters it at once.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	return m.acquirer().acquire(ctx, "lock", true, protocol.KindArgs{})
}

// TryLock acquires the lock if it is free and no live waiter is ahead, in one
// attempt; otherwise the error matches ErrNotAcquired. It re-enters as Lock does.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.acquirer().acquire(ctx, "trylock", false, protocol.KindArgs{})
}

// Do acquires the lock as Lock does, runs fn, and unlocks, also if fn panics.
// fn's ctx carries the Lease, for LeaseFromContext and re-entry, and is
// cancelled with a cause matching ErrLockLost if the lease is lost. Do returns
// fn's error joined with Unlock's.
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
