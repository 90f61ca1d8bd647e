package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// outageLimit bounds how long a waiting call whose context has no deadline
// rides out an outage.
const outageLimit = 30 * time.Second

// outage is a waiting call's run of requests that failed because Redis could
// not be reached or was changing hands: a failover, a restart, a slot
// migration. The call rides it out, trying again after a growing pause, until
// its context ends (or for outageLimit if it has no deadline), so that a
// waiter does not fail because a failover took a few seconds.
type outage struct {
	since time.Time     // the first failure; zero if the last request succeeded
	wait  time.Duration // the next pause
	err   error         // the last failure
}

// heard notes that Redis has answered a request, if the request's outcome err
// says so: it succeeded, or it is a RedLock's that some nodes answered in
// time, though fewer than a majority. Every request a caller's call makes
// notes its outcome here, whatever the call (Check, Inspect, an acquire that
// found the lock held): any answer shows that the Client's address leads to
// Redis, so that a failure later is an outage to ride out.
func (e *engine) heard(err error) {
	if err == nil || someAnswered(err) {
		e.reached.Store(true)
	}
}

// someAnswered reports whether err is a RedLock's QuorumError with answers
// from some nodes.
func someAnswered(err error) bool {
	var q *QuorumError
	return errors.As(err, &q) && q.Answered > 0
}

// rideOut reports whether a waiting call whose request about k failed with
// err is to try again: err says Redis could not be reached or is changing
// hands, the Client has reached Redis before (a wrong address fails at
// once), and the outage has not gone on too long.
func (o *outage) rideOut(ctx context.Context, e *engine, k protocol.Keys, err error) bool {
	if !protocol.Transient(err) || !e.reached.Load() || ended(ctx) {
		return false
	}
	now := time.Now()
	if o.since.IsZero() {
		o.since, o.wait = now, outagePause
		e.log.Warn("dlock: Redis unavailable; waiting for it", "lock", k.Name, "err", err)
	}
	if _, ok := ctx.Deadline(); !ok && now.Sub(o.since) >= outageLimit {
		return false
	}
	o.err = err
	return true
}

// ride rides out a waiting call's failed request about k: if the failure
// is an outage to ride out (rideOut), it pauses (pause) and reports again,
// or, if the pause was cut short by ctx or Close, what cut it (stop).
func (o *outage) ride(ctx context.Context, e *engine, k protocol.Keys, err error) (again bool, stop error) {
	if !o.rideOut(ctx, e, k, err) {
		return false, nil
	}
	if err := o.pause(ctx, e); err != nil {
		return false, err
	}
	return true, nil
}

// Pauses between the tries of a call riding out an outage: outagePause, then
// twice as long each time, up to outageMaxPause.
const (
	outagePause    = 10 * time.Millisecond
	outageMaxPause = time.Second
)

// pause sleeps before the next try. It returns ctx's error if ctx ends
// first, and ErrClosed if the Client is closed.
func (o *outage) pause(ctx context.Context, e *engine) error {
	t := time.NewTimer(o.wait)
	defer t.Stop()
	o.wait = min(2*o.wait, outageMaxPause)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.closing:
		return ErrClosed
	}
}

// wrap adds to err, the failure that ended a call, how long Redis had been
// unavailable, if it had been.
func (o *outage) wrap(err error) error {
	if o.since.IsZero() {
		return err
	}
	return errs.Op(nil, err, "Redis unavailable for %v", time.Since(o.since).Round(time.Millisecond))
}

// last notes err, the failure of the request a waiting call was making when
// its context ended: if it says Redis could not be reached or is changing
// hands, the call gives up during an outage, which began at from if the call
// was not riding one out already. o may be nil.
func (o *outage) last(err error, from time.Time) {
	if o == nil || !protocol.Transient(err) {
		return
	}
	o.err = err
	if o.since.IsZero() {
		o.since = from
	}
}

// cause is the cause of the error of a waiting call that ended with ctx:
// ctx's error (and cause), and, if the call gave up during an outage, how
// long Redis had been unavailable and what the last failed request met. o
// may be nil: no outage.
func (o *outage) cause(ctx context.Context) error {
	if o == nil || o.since.IsZero() {
		return ctxErr(ctx)
	}
	// ctx's error stands where a sentinel would: the error matches it, and
	// what the failure matches.
	return errs.Op(ctxErr(ctx), o.err, "Redis unavailable for %v", time.Since(o.since).Round(time.Millisecond))
}
