package dlock

import "github.com/dlock-go/dlock/internal/errs"

// The sentinel errors. Compare with errors.Is: every error this package returns
// wraps at most a few of them together with what was being done. They are
// internal/errs's values, which the packages below this one return.
var (
	// ErrNotAcquired means an acquire did not take the lock: TryLock found it
	// held, or Lock's ctx ended (the error then also matches ctx.Err()).
	ErrNotAcquired = errs.ErrNotAcquired

	// ErrNotHeld means a release or extend found the Lease already ended
	// (unlocked or lost); such a call changes nothing in Redis.
	ErrNotHeld = errs.ErrNotHeld

	// ErrLockLost means a lease ended without its holder releasing it: another
	// owner took the lock, or renewal failed until the local deadline. Work done
	// after that is not protected by the lock; the fence lets the resource reject it.
	ErrLockLost = errs.ErrLockLost

	// ErrNotReplicated means fewer replicas than WithWaitReplicas asks for
	// acknowledged a write in time; a refused acquire also matches ErrNotAcquired.
	ErrNotReplicated = errs.ErrNotReplicated

	// ErrClosed means the Client was closed.
	ErrClosed = errs.ErrClosed

	// ErrNoLeader means nobody leads an Election: no candidate holds its
	// lease (Election.Leader).
	ErrNoLeader = errs.ErrNoLeader
)

// QuorumError is the cause of a RedLock request that fewer than a majority of
// the nodes answered in time, with each failed node's error. An acquire's
// error matches it and ErrNotAcquired.
type QuorumError = errs.QuorumError
