package dlock

import (
	"errors"
	"fmt"
	"strings"
)

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

	// ErrNotReplicated means fewer replicas than WithWaitReplicas asks for
	// acknowledged a write in time. An acquire it refuses also matches
	// ErrNotAcquired, and was undone; a lease whose renewals it refuses until
	// the local deadline is lost (ErrLockLost).
	ErrNotReplicated = errors.New("dlock: not replicated")

	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("dlock: client closed")
)

// prefix starts the text of every error of this package, once.
const prefix = "dlock: "

// opError is the error of a call that failed: what it was doing, the sentinel
// it matches (if any) and its cause (if any). Its text says each once: an
// inner error's own "dlock: " is dropped, so that wrapping an error of this
// package into another reads "dlock: multilock ["a" "b"]: not acquired: …".
type opError struct {
	kind  error // a sentinel, or nil
	what  string
	cause error // nil if what says it all
}

// opErr returns the error of a call: kind (a sentinel, or nil) and cause (or
// nil) with a description of what was being done.
func opErr(kind, cause error, format string, args ...any) error {
	return &opError{kind: kind, what: fmt.Sprintf(format, args...), cause: cause}
}

func (e *opError) Error() string {
	var b strings.Builder
	if e.kind != nil {
		b.WriteString(e.kind.Error())
		b.WriteString(": ")
	} else {
		b.WriteString(prefix)
	}
	b.WriteString(e.what)
	if e.cause != nil {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(e.cause.Error(), prefix))
	}
	return b.String()
}

func (e *opError) Unwrap() []error {
	switch {
	case e.kind == nil && e.cause == nil:
		return nil
	case e.kind == nil:
		return []error{e.cause}
	case e.cause == nil:
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}
