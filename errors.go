package dlock

import "errors"

// The sentinel errors. Compare with errors.Is: every error this package returns
// wraps at most a few of them together with what was being done.
var (
	// ErrNotAcquired means an acquire gave up: TryLock found the lock held by
	// another owner, or Lock's context ended while it waited. In the second
	// case the error also matches the context's error (context.Canceled or
	// context.DeadlineExceeded).
	ErrNotAcquired = errors.New("dlock: not acquired")

	// ErrNotHeld means a release or extend found nothing to act on: the Lease
	// was already unlocked, or its lease had been lost. It never changes
	// anything in Redis.
	ErrNotHeld = errors.New("dlock: not held")

	// ErrLockLost means a lease ended without its holder releasing it: another
	// owner holds the lock now, or the lease could not be renewed before its
	// local deadline. Work done under the lock after this point is not
	// protected by it; the fence is what lets the resource reject it.
	ErrLockLost = errors.New("dlock: lock lost")

	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("dlock: client closed")
)
