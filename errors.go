package dlock

import "github.com/dlock-go/dlock/internal/errs"

// The sentinel errors. Compare with errors.Is: every error this package returns
// wraps at most a few of them together with what was being done. They are
// internal/errs's values, which the packages below this one return.
var (
	// ErrNotAcquired means an acquire gave up: TryLock found the lock held by
	// another owner, or Lock's context ended while it waited. In the second
	// case the error also matches the context's error (context.Canceled or
	// context.DeadlineExceeded).
	ErrNotAcquired = errs.ErrNotAcquired

	// ErrNotHeld means a release or extend found nothing to act on: the Lease
	// was already unlocked, or its lease had been lost. It never changes
	// anything in Redis.
	ErrNotHeld = errs.ErrNotHeld

	// ErrLockLost means a lease ended without its holder releasing it: another
	// owner holds the lock now, or the lease could not be renewed before its
	// local deadline. Work done under the lock after this point is not
	// protected by it; the fence is what lets the resource reject it.
	ErrLockLost = errs.ErrLockLost

	// ErrNotReplicated means fewer replicas than WithWaitReplicas asks for
	// acknowledged a write in time. An acquire it refuses also matches
	// ErrNotAcquired, and was undone; a lease whose renewals it refuses until
	// the local deadline is lost (ErrLockLost).
	ErrNotReplicated = errs.ErrNotReplicated

	// ErrClosed means the Client was closed.
	ErrClosed = errs.ErrClosed

	// ErrNoLeader means nobody leads an Election: no candidate holds its
	// lease (Election.Leader).
	ErrNoLeader = errs.ErrNoLeader
)

// QuorumError is the cause of a RedLock request (NewRedLock) that fewer
// than a majority of the nodes answered in time: an acquire's error matches
// it and ErrNotAcquired, a renewal's is in a lost lease's Err. It may
// succeed if made again once the nodes are back.
type QuorumError = errs.QuorumError
