package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"time"
)

// CountDownLatch lets processes wait until a count, set with TrySetCount, has
// been counted down to zero by CountDown calls from anywhere; the latch is
// then open until TrySetCount arms it again.
//
// A CountDownLatch is immutable and safe for concurrent use. Count downs are
// not owned, and one that a crashed process never made is missing for good:
// Delete opens a latch that cannot reach zero. An armed latch has no expiry.
// A Wait that has not seen the latch open before it is armed again waits for
// the new count.
type CountDownLatch struct {
	e   *engine
	k   protocol.Keys
	err error // an invalid name or Client, returned by every call
}

// The fallback re-check of a waiting Wait, against a lost wake-up message:
// after latchRecheck, then twice as long each time, up to latchMaxRecheck.
const (
	latchRecheck    = 100 * time.Millisecond
	latchMaxRecheck = 5 * time.Second
)

// CountDownLatch returns the latch called name, valid as for Client.Mutex; an
// invalid name is the error of every call.
func (c *Client) CountDownLatch(name string) *CountDownLatch {
	if c == nil || c.e == nil {
		return &CountDownLatch{k: protocol.Keys{Name: name}, err: errors.New("dlock: CountDownLatch of a nil or zero Client")}
	}
	if err := nameErr("CountDownLatch", name); err != nil {
		return &CountDownLatch{k: protocol.Keys{Name: name}, err: err}
	}
	l := &CountDownLatch{e: c.e, k: protocol.NewKeys(c.cfg.prefix, protocol.LatchKind, name)}
	if c.e.latches == nil {
		l.err = c.e.unsupported("CountDownLatch", name)
	}
	return l
}

// Name returns the latch's name.
func (l *CountDownLatch) Name() string {
	if l == nil {
		return ""
	}
	return l.k.Name
}

// TrySetCount arms the latch with count, above zero, if it has no count, and
// reports whether it did.
func (l *CountDownLatch) TrySetCount(ctx context.Context, count int64) (bool, error) {
	const op = "set count of latch"
	if err := l.check(ctx, op); err != nil {
		return false, err
	}
	if count <= 0 {
		return false, errs.Op(nil, nil, "%s %q: count %d, want more than 0", op, l.k.Name, count)
	}
	v, err := l.e.latches.Latch(ctx, l.k, l.e.newOwner(), protocol.LatchSet, count)
	l.e.heard(err)
	return v == 1, err
}

// CountDown decrements the count; at zero the latch opens and every waiter
// returns. It does nothing to a latch with no count.
func (l *CountDownLatch) CountDown(ctx context.Context) error {
	if err := l.check(ctx, "count down latch"); err != nil {
		return err
	}
	_, err := l.e.latches.Latch(ctx, l.k, l.e.newOwner(), protocol.LatchDown, 0)
	l.e.heard(err)
	return err
}

// Delete removes the latch's count, which opens it, and reports whether there
// was one.
func (l *CountDownLatch) Delete(ctx context.Context) (bool, error) {
	if err := l.check(ctx, "delete latch"); err != nil {
		return false, err
	}
	v, err := l.e.latches.Latch(ctx, l.k, l.e.newOwner(), protocol.LatchDelete, 0)
	l.e.heard(err)
	return v == 1, err
}

// Count returns the latch's count: 0 when it has none. One round trip.
func (l *CountDownLatch) Count(ctx context.Context) (int64, error) {
	if err := l.check(ctx, "count of latch"); err != nil {
		return 0, err
	}
	n, err := l.e.latches.LatchCount(ctx, l.k)
	l.e.heard(err)
	return n, err
}

// Wait blocks until the latch is open, or ctx is done (an error matching
// ctx.Err()), or the Client is closed (ErrClosed). It writes nothing to Redis,
// and rides out a Redis outage.
func (l *CountDownLatch) Wait(ctx context.Context) error {
	const op = "wait for latch"
	if err := l.check(ctx, op); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return l.gaveUp(ctx, nil)
	}
	e, channel := l.e, protocol.LatchChannel(l.k)
	var out outage
	// count returns the latch's count, riding out an outage of Redis.
	count := func() (int64, error) {
		for {
			sent := time.Now()
			n, err := e.latches.LatchCount(ctx, l.k)
			e.heard(err)
			if err == nil {
				out = outage{}
				return n, nil
			}
			switch again, stop := out.ride(ctx, e, l.k, err); {
			case stop != nil:
				return 0, l.waitErr(ctx, stop, &out, sent)
			case !again:
				return 0, l.waitErr(ctx, err, &out, sent)
			}
		}
	}
	g := e.note.JoinSubscribed(l.k.Tag, protocol.LatchSuffix)
	for g == nil {
		// Not subscribed yet: an open latch needs no subscription at all.
		if n, err := count(); err != nil || n == 0 {
			return err
		}
		var err error
		sent := time.Now()
		if g, err = e.note.Join(ctx, l.k, 0, channel); err != nil {
			g = nil
			switch {
			case ended(ctx):
				return l.waitErr(ctx, err, &out, sent)
			case errors.Is(err, ErrClosed):
				return errs.Op(ErrClosed, nil, "%s %q", op, l.k.Name)
			}
			switch again, stop := out.ride(ctx, e, l.k, err); {
			case stop != nil:
				return l.waitErr(ctx, stop, &out, sent)
			case !again:
				return errs.Op(nil, out.wrap(err), "%s %q", op, l.k.Name)
			}
		}
	}
	defer e.note.Leave(g)
	w := e.note.Enter(g, e.newOwner())
	defer e.note.Exit(g, w, false, 0)

	// Subscribed: the latch opening from now on wakes w, so it is enough to
	// look once before each sleep.
	recheck := latchRecheck
	timer := time.NewTimer(recheck)
	defer timer.Stop()
	for {
		n, err := count()
		if err != nil || n == 0 {
			return err
		}
		timer.Reset(recheck)
		select {
		case <-w.Wake:
		case <-timer.C:
			recheck = min(2*recheck, latchMaxRecheck)
		case <-ctx.Done():
			return l.gaveUp(ctx, nil)
		case <-e.closing:
			return errs.Op(ErrClosed, nil, "%s %q", op, l.k.Name)
		}
	}
}

// waitErr is the error of a wait whose request, sent at sent, failed with
// err, or whose pause in the outage o was cut short (err is what cut it):
// the context's if it ended meanwhile, saying so if it ended during an
// outage.
func (l *CountDownLatch) waitErr(ctx context.Context, err error, o *outage, sent time.Time) error {
	switch {
	case ended(ctx):
		o.last(err, sent)
		return l.gaveUp(ctx, o)
	case errors.Is(err, ErrClosed):
		return errs.Op(ErrClosed, nil, "wait for latch %q", l.k.Name)
	}
	return o.wrap(err)
}

// gaveUp is the error of a wait that ended with its context, during the
// outage o if o says so (nil: none).
func (l *CountDownLatch) gaveUp(ctx context.Context, o *outage) error {
	return errs.Op(nil, o.cause(ctx), "wait for latch %q", l.k.Name)
}

// check rejects a call that cannot proceed.
func (l *CountDownLatch) check(ctx context.Context, op string) error {
	switch {
	case l == nil:
		return errs.Op(nil, nil, "%s: nil *CountDownLatch", op)
	case l.err != nil:
		return l.err
	case l.e == nil:
		return errs.Op(nil, nil, "%s: zero CountDownLatch; get one from Client.CountDownLatch", op)
	case ctx == nil:
		return errs.Op(nil, nil, "%s %q: nil context", op, l.k.Name)
	case l.e.closed():
		return errs.Op(ErrClosed, nil, "%s %q", op, l.k.Name)
	}
	if err := l.e.firstUse(ctx); err != nil {
		return errs.Op(nil, err, "%s %q", op, l.k.Name)
	}
	return nil
}
