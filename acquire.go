package dlock

// Acquisition: one call of Lock, TryLock or their kin, from its checks and
// hooks to a re-entry or a take (take.go).

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// acquirer takes leases on one lock: an immutable description of it.
type acquirer struct {
	e     *engine
	k     protocol.Keys
	ttl   time.Duration
	renew bool
	err   error // an invalid name or option, returned by every call
}

// check rejects a call that cannot proceed: a bad description, a nil
// context, a closed Client, a Redis that does not run what every wait needs
// (firstUse).
func (a *acquirer) check(ctx context.Context, op string) error {
	if err := a.checkRead(ctx, op); err != nil {
		return err
	}
	if err := a.e.firstUse(ctx); err != nil {
		return errs.Op(nil, err, "%s %q", op, a.k.Name)
	}
	return nil
}

// checkRead is check for a call that only reads and never waits
// (Election.Leader): it makes no first-use probe, whose SPUBLISH a user
// allowed only to read may not send (docs/acl.md's user for the people on
// call).
func (a *acquirer) checkRead(ctx context.Context, op string) error {
	switch {
	case a.err != nil:
		return a.err
	case ctx == nil:
		return errs.Op(nil, nil, "%s %q: nil context", op, a.k.Name)
	case a.e.closed():
		return errs.Op(ErrClosed, nil, "%s %q", op, a.k.Name)
	}
	return nil
}

// acquire takes a lease, or re-enters one ctx carries, waiting in line if
// wait is set. x are the kind's own arguments of its acquire script. It
// brackets the call with the LockStart and LockEnd hooks.
func (a *acquirer) acquire(ctx context.Context, op string, wait bool, x protocol.KindArgs) (*Lease, error) {
	if err := a.check(ctx, op); err != nil {
		return nil, err
	}
	if a.e.hooks == nil {
		return a.acquire1(ctx, op, wait, x)
	}
	return a.bracket(ctx, op, func(ctx context.Context) (*Lease, error) {
		return a.acquire1(ctx, op, wait, x)
	})
}

// bracket runs take, an acquisition of op, between the LockStart and LockEnd
// hooks, which a.e.hooks has.
func (a *acquirer) bracket(ctx context.Context, op string, take func(context.Context) (*Lease, error)) (*Lease, error) {
	h := a.e.hooks
	info := LockInfo{Kind: a.k.Kind.Name, Name: a.k.Name}
	if h.LockStart != nil {
		if c := h.LockStart(ctx, info, op); c != nil {
			ctx = c
		}
	}
	start := time.Now()
	l, err := take(ctx)
	if h.LockEnd != nil {
		r := LockResult{Waited: time.Since(start), Err: err}
		if l != nil {
			r.Fence, r.Reentered, r.HandedOff = l.Fence(), l.reentered, l.h.granted && !l.reentered
		}
		h.LockEnd(ctx, info, r)
	}
	return l, err
}

func (a *acquirer) acquire1(ctx context.Context, op string, wait bool, x protocol.KindArgs) (*Lease, error) {
	if ctx.Err() != nil {
		return nil, a.gaveUp(ctx, op, nil)
	}
	if a.k.Kind.Reentrant {
		if h := heldIn(ctx).find(a.e, a.k); h != nil {
			return h.reenter(ctx, x)
		}
	}
	return a.take(ctx, op, wait, x)
}

// interrupted is the error of a call whose pause in the outage o was cut
// short by its context (err is ctx's error) or by Close.
func (a *acquirer) interrupted(ctx context.Context, op string, err error, o *outage) error {
	if errors.Is(err, ErrClosed) {
		return errs.Op(ErrClosed, nil, "%s %q", op, a.k.Name)
	}
	return a.gaveUp(ctx, op, o)
}

// gaveUp is the error of a wait that ended with its context, during the
// outage o if o says so (nil: none).
func (a *acquirer) gaveUp(ctx context.Context, op string, o *outage) error {
	return errs.Op(ErrNotAcquired, o.cause(ctx), "%s %q: gave up waiting", op, a.k.Name)
}
