package dlock

// Waiting in line: a turn registers in Redis's queue, listens for its
// grant and sleeps between attempts.

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/timing"
)

// A turn is one call of take: its owner id and, once it waits in line, its
// gate, its place among the gate's waiters and in Redis's queue, its timer,
// the outage it rides out and the last attempt that found the lock held.
type turn struct {
	a     *acquirer
	op    string
	wait  bool
	owner string
	start time.Time

	g          *notify.Gate
	w          *notify.Listener
	registered bool // in Redis, by an attempt that found the lock held
	timer      *time.Timer
	out        outage
	// held is the last attempt that found the lock held: a grant told of
	// later with a fence above its floor was made after it reached Redis.
	held heldAt
	// doubt is the latest deadline of an attempt whose outcome is unknown
	// (protocol.AcquireResult.Doubt), 0 if none: a copy of it may still
	// reach Redis until then, so the release that ends the turn's owner
	// passes it on.
	doubt int64
}

// end stops t's timer and leaves its gate, taking its registration out of
// Redis's queue if it is still there.
func (t *turn) end() {
	e := t.a.e
	if t.timer != nil {
		t.timer.Stop()
	}
	if t.w != nil {
		e.note.Exit(t.g, t.w, t.registered, t.doubt)
		e.bg.wg.Done()
	}
	if t.g != nil {
		e.note.Leave(t.g)
	}
}

// enter makes t a waiter of its gate, which Close waits for, so that its
// registration is gone from Redis when Close returns.
func (t *turn) enter() error {
	e := t.a.e
	if !e.bg.add() {
		return errs.Op(ErrClosed, nil, "%s %q", t.op, t.a.k.Name)
	}
	t.w = e.note.Enter(t.g, t.owner)
	return nil
}

// try makes one attempt. It returns the Lease; or how long the lock is
// still held (pttl); or again, if Redis could not be reached and the outage
// is ridden out by trying again at once; or the error that ends the call.
func (t *turn) try(ctx context.Context, x protocol.KindArgs) (l *Lease, pttl time.Duration, again bool, err error) {
	a, e := t.a, t.a.e
	var register time.Duration
	if t.w != nil {
		register, t.registered = timing.RegisterFor(a.ttl), true // also if the attempt fails: its script may have run
		t.w.Drain()                                              // a grant made before this attempt is found by it
	}
	sent := time.Now()
	l, pttl, r, err := a.attempt(ctx, t, sent, register, x)
	t.doubt = max(t.doubt, r.Doubt)
	if err == nil {
		t.out = outage{}
		t.held = heldAt{sent: sent, floor: r.Floor, at: r.At}
	}
	switch {
	case l != nil:
		t.registered = false // acquiring removed the registration
		return l, 0, false, nil
	case err == errTooMany && t.wait:
		return nil, a.ttl, false, nil // it waits, registered, for the total to be raised
	case err != nil && t.wait:
		again, stop := t.out.ride(ctx, e, a.k, err)
		if again {
			return nil, 0, true, nil
		}
		a.abandon(ctx, t.owner, sent, t.doubt)
		if stop != nil {
			return nil, 0, false, a.interrupted(ctx, t.op, stop, &t.out)
		}
		return nil, 0, false, t.failed(ctx, err)
	case err != nil:
		a.abandon(ctx, t.owner, sent, t.doubt)
		return nil, 0, false, t.failed(ctx, err)
	case !t.wait:
		if t.doubt != 0 {
			// An earlier copy may still take the lock: the owner ends here.
			a.abandon(ctx, t.owner, sent, t.doubt)
		}
		return nil, 0, false, errs.Op(ErrNotAcquired, nil, "%s %q: held by another owner", t.op, a.k.Name)
	}
	return nil, pttl, false, nil
}

// failed is the error of a call whose attempt failed with err, which was no
// outage to ride out.
func (t *turn) failed(ctx context.Context, err error) error {
	a := t.a
	if ended(ctx) && t.wait && protocol.Transient(err) {
		// The context ended while Redis could not be reached: say so.
		t.out.err = err
		if t.out.since.IsZero() {
			t.out.since = t.start
		}
		return a.interrupted(ctx, t.op, ctx.Err(), &t.out)
	}
	if ended(ctx) {
		return a.gaveUp(ctx, t.op)
	}
	return t.out.wrap(err)
}

// subscribe joins the lock's gate for this Client and enters it, riding out
// an outage of Redis; nil means try again.
func (t *turn) subscribe(ctx context.Context) error {
	a, e := t.a, t.a.e
	g, err := e.note.Join(ctx, a.k, a.ttl, a.k.Channel+e.own)
	if err == nil {
		t.g = g
		return t.enter()
	}
	switch {
	case ended(ctx):
		return a.gaveUp(ctx, t.op)
	case errors.Is(err, ErrClosed):
		return errs.Op(ErrClosed, nil, "%s %q", t.op, a.k.Name)
	}
	again, stop := t.out.ride(ctx, e, a.k, err)
	switch {
	case again:
		return nil
	case stop != nil:
		return a.interrupted(ctx, t.op, stop, &t.out)
	}
	return errs.Op(nil, t.out.wrap(err), "%s %q", t.op, a.k.Name)
}

// sleep waits, for at most pttl or until the registration needs renewing,
// for a message to t's waiter. It returns the Lease of a grant it can return
// on, or the error that ends the call; neither means try again.
func (t *turn) sleep(ctx context.Context, pttl time.Duration) (*Lease, error) {
	a, e := t.a, t.a.e
	d := min(pttl, timing.KeepAlive(a.ttl))
	if t.timer == nil {
		t.timer = time.NewTimer(d)
	} else {
		t.timer.Reset(d)
	}
	select {
	case m := <-t.w.Wake:
		if l := a.granted(ctx, t, m); l != nil {
			t.registered = false // the grant took the registration out of the queue
			return l, nil
		}
	case <-t.timer.C:
	case <-ctx.Done():
		return nil, a.gaveUp(ctx, t.op)
	case <-e.closing:
		return nil, errs.Op(ErrClosed, nil, "%s %q", t.op, a.k.Name)
	}
	return nil, nil
}
