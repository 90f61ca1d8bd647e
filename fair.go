package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/protocol"
)

// FairMutex is a reentrant lock granted in strict order of arrival, and used
// as a Mutex is. Unlike a Mutex, it keeps the head of the line for a waiter
// granted the lock that does not take it up in time (its process paused)
// while that waiter's registration lives, so a dead waiter holds the line up
// for at most TTL/2 (or 150ms, if more). See docs/failure-model.md.
type FairMutex struct {
	a acquirer
}

// FairMutex returns the fair lock called name, valid as for Client.Mutex. It
// is a different lock from the Mutex of the same name.
func (c *Client) FairMutex(name string, opts ...Option) *FairMutex {
	return &FairMutex{a: c.acquirer(protocol.FairKind, name, opts)}
}

// Name returns the lock's name.
func (m *FairMutex) Name() string { return m.acquirer().k.Name }

// Lock waits in line for the lock as Mutex.Lock does: ctx bounds the wait
// only, and a Lock that gives up leaves the line and returns an error
// matching both ErrNotAcquired and ctx.Err().
func (m *FairMutex) Lock(ctx context.Context) (*Lease, error) {
	return m.acquirer().acquire(ctx, "lock", true, protocol.KindArgs{})
}

// TryLock acquires the lock if it is free and nobody waits for it; otherwise
// the error matches ErrNotAcquired. It never queues.
func (m *FairMutex) TryLock(ctx context.Context) (*Lease, error) {
	return m.acquirer().acquire(ctx, "trylock", false, protocol.KindArgs{})
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
