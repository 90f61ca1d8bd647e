// Package errs holds dlock's errors, which the root package re-exports (as
// go-redis re-exports its internal pool's), so that the packages below it
// return the very values errors.Is compares with.
package errs

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

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

	// ErrNoLeader means nobody leads an Election: no candidate holds its
	// lease.
	ErrNoLeader = errors.New("dlock: no leader")
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
// Op returns the error of an operation: what it was doing (format and
// args), matching kind (a sentinel, or nil) and cause (nil if what says it
// all).
func Op(kind, cause error, format string, args ...any) error {
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

// QuorumError is the cause of a RedLock request (NewRedLock) that fewer
// than a majority of the nodes answered in time: an acquire's error matches
// it and ErrNotAcquired, a renewal's is in a lost lease's Err. It may
// succeed if made again once the nodes are back.
type QuorumError struct {
	Answered int     // nodes that answered in time
	Need     int     // a majority
	Nodes    int     // all nodes
	Errs     []error // of the nodes that did not answer in time, or failed
}

func (e *QuorumError) Error() string {
	msg := fmt.Sprintf("%d of %d nodes answered in time, a majority is %d", e.Answered, e.Nodes, e.Need)
	if len(e.Errs) == 0 {
		return msg
	}
	// The most telling error first: one a node sent, not a timeout.
	first := e.Errs[0]
	for _, err := range e.Errs {
		if !errors.Is(err, ErrNodeTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			first = err
			break
		}
	}
	msg += ": " + first.Error()
	if len(e.Errs) > 1 {
		msg += fmt.Sprintf(" (and %d more)", len(e.Errs)-1)
	}
	return msg
}

// Unwrap returns the nodes' errors.
func (e *QuorumError) Unwrap() []error { return e.Errs }

// ErrNodeTimeout is a member's error when it did not answer within the
// per-node timeout.
var ErrNodeTimeout = errors.New("no answer within the per-node timeout")
