package dlock

// Taking a lock: a turn makes attempts, and if it waits, registers in
// Redis's queue, listens for its grant and sleeps between attempts; and
// what an attempt whose outcome is unknown leaves to be cleaned up.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/renew"
	"github.com/dlock-go/dlock/internal/timing"
)

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
		if t.g = a.e.note.JoinSubscribed(a.k.Channel, a.e.listen); t.g != nil {
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
	// A take whose first expiry is short (r.Short) begins as a grant: the
	// renewer lengthens it at once.
	t, err := e.ren.Begin(&a.k, owner, r.Fence, renew.Start{TTL: a.ttl, Renew: a.renew, Sent: begun, Grant: r.Short, FenceArg: r.FenceArg, Doubt: max(r.Doubt, tn.doubt)})
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
		return nil, 0, false, t.failed(ctx, err, sent)
	case err != nil:
		a.abandon(ctx, t.owner, sent, t.doubt)
		return nil, 0, false, t.failed(ctx, err, sent)
	case !t.wait:
		if t.doubt != 0 {
			// An earlier copy may still take the lock: the owner ends here.
			a.abandon(ctx, t.owner, sent, t.doubt)
		}
		return nil, 0, false, errs.Op(ErrNotAcquired, nil, "%s %q: held by another owner", t.op, a.k.Name)
	}
	return nil, pttl, false, nil
}

// failed is the error of a call whose attempt, sent at sent, failed with
// err, which was no outage to ride out.
func (t *turn) failed(ctx context.Context, err error, sent time.Time) error {
	if ended(ctx) {
		return t.gaveUp(ctx, err, sent)
	}
	return t.out.wrap(err)
}

// gaveUp is the error of a call whose context ended while its request, sent
// at sent, failed with err (nil if none was in flight). A waiting call gives
// up during an outage if err is one, or if it was riding one out when its
// request was cut short (left behind): its error says so.
func (t *turn) gaveUp(ctx context.Context, err error, sent time.Time) error {
	if !t.wait {
		return t.a.gaveUp(ctx, t.op, nil)
	}
	t.out.last(err, sent)
	return t.a.gaveUp(ctx, t.op, &t.out)
}

// subscribe joins the lock's gate for this Client and enters it, riding out
// an outage of Redis; nil means try again.
func (t *turn) subscribe(ctx context.Context) error {
	a, e := t.a, t.a.e
	sent := time.Now()
	g, err := e.note.Join(ctx, a.k, a.ttl, a.k.Channel+e.listen)
	if err == nil {
		t.g = g
		return t.enter()
	}
	switch {
	case ended(ctx):
		return t.gaveUp(ctx, err, sent)
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
		return nil, t.gaveUp(ctx, nil, time.Time{})
	case <-e.closing:
		return nil, errs.Op(ErrClosed, nil, "%s %q", t.op, a.k.Name)
	}
	return nil, nil
}
