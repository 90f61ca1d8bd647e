package dlock

// Acquisition: one call of Lock, TryLock or their kin, from the first
// attempt to the Lease, and what an attempt whose outcome is unknown leaves
// to be cleaned up.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/renew"
	"github.com/dlock-go/dlock/internal/timing"
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
// context, a closed Client.
func (a *acquirer) check(ctx context.Context, op string) error {
	switch {
	case a.err != nil:
		return a.err
	case ctx == nil:
		return errs.Op(nil, nil, "%s %q: nil context", op, a.k.Name)
	case a.e.closed():
		return errs.Op(ErrClosed, nil, "%s %q", op, a.k.Name)
	}
	a.e.firstUse()
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
		return nil, a.gaveUp(ctx, op)
	}
	if a.k.Kind.Reentrant {
		if h := heldIn(ctx).find(a.e, a.k); h != nil {
			return h.reenter(ctx, x)
		}
	}
	return a.take(ctx, op, wait, x)
}

// take makes one attempt, or, if wait is set, waits in line: it subscribes
// to the lock's wake-ups for this Client, and tries again, registered as a
// waiter in Redis, each time it is woken by a message that is not a grant it
// can return on (granted), the holder's lease would have run out, or its
// registration needs renewing.
func (a *acquirer) take(ctx context.Context, op string, wait bool, x protocol.KindArgs) (*Lease, error) {
	t := &turn{a: a, op: op, wait: wait, owner: a.e.newOwner(), start: time.Now()}
	defer t.end()
	if wait {
		// Subscribed already (others wait for this lock here, or did
		// lately): every attempt can be followed by a sleep.
		if t.g = a.e.note.JoinSubscribed(a.k.Channel, a.e.own); t.g != nil {
			if err := t.enter(); err != nil {
				return nil, err
			}
		}
	}
	for tries := 0; ; tries++ {
		l, pttl, again, err := t.try(ctx, x)
		switch {
		case l != nil || err != nil:
			return l, err
		case again:
			continue
		}
		if tries == 0 {
			a.contended(ctx)
		}
		if t.g == nil {
			// Subscribe, then try again at once: the lock may have been
			// released before the subscription took.
			if err := t.subscribe(ctx); err != nil {
				return nil, err
			}
			continue
		}
		// Where the slot of the lock (and of its channel) lives, the attempt
		// just asked: a move the server did not tell of shows now.
		a.e.note.Check(ctx, t.g)
		if l, err := t.sleep(ctx, pttl); l != nil || err != nil {
			return l, err
		}
	}
}

func (a *acquirer) contended(ctx context.Context) {
	if h := a.e.hooks; h != nil && h.Contended != nil {
		h.Contended(ctx, LockInfo{Kind: a.k.Kind.Name, Name: a.k.Name})
	}
}

// errTooMany is what attempt returns when a Semaphore's acquire script
// answers that more permits were asked for than its total.
var errTooMany = errors.New("more permits than the semaphore's total")

// errExpired is what attempt returns when every copy of an acquire reached
// Redis after its deadline: the server's clock is far from what this host
// learned of it.
var errExpired = errors.New("the request reached Redis after its deadline each time it was sent: is Redis's clock far from this host's?")

// heldAt is what an attempt that found the lock held tells of the moment it
// reached Redis: when it was sent, the fence floor and the server time (µs)
// its script answered with.
type heldAt struct {
	sent      time.Time
	floor, at int64
}

// granted returns the Lease of a grant that m tells owner of, or nil if it
// tells none or the Lease cannot start from it. h is the last attempt that
// found the lock held. A grant whose fence is above h's floor was made after
// that attempt reached Redis, so, by the server's clock, the grant's time less
// h's later; counted on the local clock from h's send time, less 1% for the
// two clocks' rates (as drift allows), that is the earliest the grant can
// have been made here, and its grant lease (the releaser's, from its own
// TTL) runs from then. If at least half of it is left, the Lease starts and
// the renewer lengthens it at once. Otherwise (a message that is no grant, an
// older grant, too little left, WithWaitReplicas, whose acquire waits for the
// replicas to acknowledge the grant) the caller tries again, which finds the
// lock held by owner if it was granted and lengthens it.
func (a *acquirer) granted(ctx context.Context, tn *turn, m protocol.Wake) *Lease {
	e, owner, h, start := a.e, tn.owner, tn.held, tn.start
	if a.k.Kind.Handoff != protocol.HandoffGrant || !e.traits.GrantWake || h.sent.IsZero() {
		return nil
	}
	if m.Owner != owner || m.Fence <= h.floor {
		return nil
	}
	from := h.sent
	if h.at > 0 && m.At > h.at {
		later := time.Duration(m.At-h.at) * time.Microsecond
		from = from.Add(later - later/100)
	}
	if time.Since(from) >= m.Lease/2 {
		return nil
	}
	t, err := e.ren.Begin(&a.k, owner, m.Fence, renew.Start{TTL: a.ttl, Renew: a.renew, Sent: from, Grant: m.Lease, Doubt: tn.doubt})
	if err != nil {
		return nil // closing: the caller's next attempt fails with ErrClosed, and gives the grant back
	}
	if e.log.Enabled(ctx, slog.LevelDebug) {
		e.log.Debug("dlock: acquired by a grant", "lock", a.k.Name, "fence", m.Fence, "waited", time.Since(start))
	}
	l := newHold(e, t)
	l.h.granted = true // before the Lease is returned: read-only from then on
	return l
}

// attempt runs the acquire script once for the turn t, sent at sent,
// registering its owner as a waiter for register if the lock is held (0: not
// at all). It returns the Lease if the lock was taken, else how long the
// holder's lease has left (never less than 1ms; the lock's own TTL if that
// is unknown); and the script's answer (its fence floor and server time, if
// it tells them, and the deadline of a copy whose outcome is unknown, also
// with an error).
func (a *acquirer) attempt(ctx context.Context, tn *turn, sent time.Time, register time.Duration, x protocol.KindArgs) (*Lease, time.Duration, protocol.AcquireResult, error) {
	a.e.announce()
	e, owner, before := a.e, tn.owner, tn.doubt
	var r protocol.AcquireResult
	var err error
	if inline(e, ctx) {
		r, err = e.backend.Acquire(ctx, a.k, owner, a.ttl, register, x)
	} else {
		// The closures take copies, not tn, which stays on its caller's
		// stack.
		r, err = within(e, ctx, func() (protocol.AcquireResult, error) {
			return e.backend.Acquire(ctx, a.k, owner, a.ttl, register, x)
		}, func(r protocol.AcquireResult, err error) {
			// The caller has gone: undo whatever the script did for it. Its
			// own unregistration may have run before this script did.
			doubt := max(r.Doubt, before)
			if err != nil || r.Fence > 0 {
				a.abandon(context.Background(), owner, sent, doubt)
			}
			if register > 0 {
				e.note.Unregister(a.k, a.ttl, owner, doubt)
			}
		})
	}
	e.heard(err)
	switch {
	case errors.Is(err, errLeftBehind):
		// Its outcome is unknown until the background call ends, which
		// then undoes what it did; until then a copy may reach Redis, no
		// later than the deadline of a request sent now.
		return nil, 0, protocol.AcquireResult{Doubt: protocol.RequestDeadline(e.backend)}, errs.Op(nil, err, "acquire %q", a.k.Name)
	case err != nil:
		// The script may have run: the caller tries again with the same
		// owner, which gives the same outcome, or abandons.
		return nil, 0, protocol.AcquireResult{Doubt: r.Doubt}, err
	case r.Expired:
		// Sent again with new deadlines, and too late each time: as an
		// outage, it is tried again or fails.
		return nil, 0, r, errs.Op(nil, errExpired, "acquire %q", a.k.Name)
	case r.Gone:
		return nil, 0, r, errTooMany
	case r.Fence == 0 && r.Pttl < 0:
		return nil, a.ttl, r, nil
	case r.Fence == 0:
		return nil, max(r.Pttl, time.Millisecond), r, nil
	case r.NotReplicated != nil:
		// Taken on the primary only: a failover could grant it again. The
		// caller abandons it.
		return nil, 0, r, errs.Op(ErrNotAcquired, r.NotReplicated, "acquire %q", a.k.Name)
	}
	// The lease runs from this request, unless an earlier copy took it: a
	// retry that finds the lock held by its owner does not lengthen it, and
	// the lease then ends no sooner than what was left of it after this
	// request was sent.
	begun := sent
	if r.Already && r.Left >= 0 && r.Left < a.ttl {
		begun = sent.Add(r.Left - a.ttl)
	}
	t, err := e.ren.Begin(&a.k, owner, r.Fence, renew.Start{TTL: a.ttl, Renew: a.renew, Sent: begun, FenceArg: r.FenceArg, Doubt: max(r.Doubt, tn.doubt)})
	if err != nil {
		a.abandon(ctx, owner, sent, max(r.Doubt, tn.doubt))
		return nil, 0, r, err
	}
	if e.log.Enabled(ctx, slog.LevelDebug) { // the arguments would escape even if discarded
		e.log.Debug("dlock: acquired", "lock", a.k.Name, "fence", r.Fence, "waited", time.Since(tn.start))
	}
	return newHold(e, t), 0, r, nil
}

// abandon releases whatever owner may hold after an acquire, sent at sent,
// whose outcome is unknown: the script may have run even though its reply
// never arrived, and, if doubt is not 0, a copy of it may still reach Redis
// until then (the release records owner, so that it takes nothing). If ctx has ended, the release goes on in the background, so
// that a stalled Redis does not hold the caller. A release that fails is
// retried in the background, as a failed Unlock is, until Redis answers or
// the lock's TTL from sent has run out.
func (a *acquirer) abandon(ctx context.Context, owner string, sent time.Time, doubt int64) {
	e := a.e
	release := func(ctx context.Context) error {
		_, err := e.backend.Release(ctx, a.k, protocol.ReleaseArgs{Owner: owner, Fence: protocol.NoFence, Mode: protocol.ReleaseLast, TTL: a.ttl, Void: doubt})
		return err
	}
	// A copy still on its way may take the lock until its deadline, which
	// may be later than the TTL from sent: the release, which records the
	// owner until then, is worth sending until then too.
	until := sent.Add(a.ttl)
	if doubt != 0 {
		until = latest(until, sent.Add(protocol.RequestTTL))
	}
	first := func() {
		cctx, cancel := cleanupContext(ctx, a.ttl)
		err := release(cctx)
		cancel()
		if err == nil {
			return
		}
		e.log.Debug("dlock: cleanup after failed acquire failed; retrying in the background", "lock", a.k.Name, "err", err)
		// The script may have taken the lock: left alone, it would be held
		// by nobody, and refuse everyone, for its whole TTL.
		e.bg.doSoon(func() {
			switch err := timing.RetryRelease(e.closing, until, a.ttl, release); {
			case err == nil:
				e.log.Debug("dlock: cleanup after failed acquire done in the background", "lock", a.k.Name)
			case errors.Is(err, timing.ErrReleaseLapsed):
				e.log.Debug("dlock: cleanup after failed acquire not retried: the TTL has run out by now", "lock", a.k.Name)
			default:
				e.log.Warn("dlock: cleanup after failed acquire failed; Redis frees what it took when its TTL runs out", "lock", a.k.Name, "err", err)
			}
		})
	}
	if !ended(ctx) || !e.bg.goDo(first) {
		first()
	}
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// interrupted is the error of a call whose pause in an outage was cut short
// by its context (err is ctx's error) or by Close.
func (a *acquirer) interrupted(ctx context.Context, op string, err error, o *outage) error {
	if errors.Is(err, ErrClosed) {
		return errs.Op(ErrClosed, nil, "%s %q", op, a.k.Name)
	}
	cause := fmt.Errorf("%w; Redis unavailable for %v: %w", ctxErr(ctx), time.Since(o.since).Round(time.Millisecond), o.err)
	return errs.Op(ErrNotAcquired, cause, "%s %q: gave up waiting", op, a.k.Name)
}

// gaveUp is the error of a wait that ended with its context.
func (a *acquirer) gaveUp(ctx context.Context, op string) error {
	return errs.Op(ErrNotAcquired, ctxErr(ctx), "%s %q: gave up waiting", op, a.k.Name)
}
