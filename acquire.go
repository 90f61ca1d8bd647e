package dlock

// The engine floor: taking leases on locks of every kind, waiting for them
// in line, re-entering them, and giving them back. It asks the protocol
// floor for each round trip, the renewer for each lease's life and the
// notifier for wake-ups; the primitives above are thin layers on it.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/renew"
	"github.com/dlock-go/dlock/internal/timing"
)

// engine is what the primitives of one Client share.
type engine struct {
	backend protocol.Backend
	traits  protocol.Traits // backend's
	ren     *renew.Renewer
	note    *notify.Notifier
	bg      *background
	hooks   *Hooks // nil if none
	log     *slog.Logger
	prefix  string
	closing chan struct{} // closed when Close starts

	id string // random, unique per Client: the stem of every owner id
	// own is ":" and id: a lock's wake-up channel stem followed by it is
	// where this Client's waiters are told of grants.
	own string
	seq atomic.Uint64 // makes each acquisition's owner id unique

	checked sync.Once   // the eviction policy has been looked at
	reached atomic.Bool // a request has had its answer from Redis

	totals semTotals // of the Semaphores it acquired, as Redis holds them

	// name is the Client's (WithClientName), kept in Redis at nameKey while
	// the Client is in use (announce); announced is when it was last sent
	// (Unix ns; 0: never, or the write failed).
	name, nameKey string
	announced     atomic.Int64
	recordEvery   time.Duration // recordEvery, or a test's
}

// Times of a Client's record in Redis (WithClientName).
const (
	recordTTL   = time.Minute
	recordEvery = recordTTL / 3
)

// announce writes the Client's record (its name) in the background if it is
// due (dueRecord): every attempt to acquire, a waiter's included, calls it;
// renewal rounds carry it themselves (leaseEvents.Record). So the record
// lives while the Client holds or waits for anything, and costs one write
// per recordEvery, nothing per acquisition.
func (e *engine) announce() {
	if rec := e.dueRecord(); rec != nil {
		e.recorded(rec)
	}
}

// dueRecord returns the Client's record to write if the last write was sent
// recordEvery ago or more (or failed), and counts it as sent now; nil
// otherwise.
func (e *engine) dueRecord() *protocol.Record {
	now := time.Now().UnixNano()
	last := e.announced.Load()
	if now-last < int64(e.recordEvery) || !e.announced.CompareAndSwap(last, now) {
		return nil
	}
	return &protocol.Record{Key: e.nameKey, Value: e.name, TTL: recordTTL}
}

// recorded finishes the write of rec, from dueRecord: one that went nowhere
// yet is sent in the background; one that failed is due again at once.
func (e *engine) recorded(rec *protocol.Record) {
	if !rec.Sent {
		e.bg.goDo(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			rec.Err, rec.Sent = e.backend.Announce(ctx, rec.Key, rec.Value, rec.TTL), true
			e.recorded(rec)
		})
		return
	}
	if rec.Err != nil {
		e.announced.Store(0)
		e.log.Debug("dlock: writing the Client's name failed", "key", rec.Key, "err", rec.Err)
	}
}

// check looks at Redis's eviction policy (Client.Check).
func (e *engine) check(ctx context.Context) error {
	// (And reads the data epoch a release sent again may need: releasedLoss.)
	protocol.WatchData(ctx, e.backend)
	policy, known, err := e.backend.EvictionPolicy(ctx)
	switch {
	case err != nil:
		return errs.Op(nil, err, "check")
	case !known:
		e.log.Info("dlock: cannot read Redis's maxmemory-policy; it must be noeviction")
	case policy != "noeviction":
		return errs.Op(nil, nil, "check: Redis's maxmemory-policy is %q: it may evict locks and fence keys; set it to noeviction", policy)
	}
	want, short, err := e.backend.ReplicaShortfall(ctx)
	if err != nil {
		return errs.Op(nil, err, "check")
	}
	for addr, have := range short {
		return errs.Op(nil, nil, "check: WithWaitReplicas asks for %d replicas, but the primary %s has %d connected: every acquire will fail", want, addr, have)
	}
	return nil
}

// firstUse runs check in the background the first time it is called, and
// logs what it finds.
func (e *engine) firstUse() {
	e.checked.Do(func() {
		// The id starts every owner id of this Client, as dlock ls shows
		// them: logged, it tells the people on call which process holds.
		e.log.Info("dlock: client in use", "id", e.id, "name", e.name)
		e.bg.goDo(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := e.check(ctx); err != nil {
				e.log.Warn("dlock: Redis may not keep the locks' promises", "err", err)
			}
		})
	})
}

// newOwner returns an owner id unique across Clients and acquisitions.
func (e *engine) newOwner() string {
	var buf [64]byte
	b := append(append(buf[:0], e.id...), ':')
	return string(strconv.AppendUint(b, e.seq.Add(1), 10))
}

// closed reports whether Close has started.
func (e *engine) closed() bool {
	select {
	case <-e.closing:
		return true
	default:
		return false
	}
}

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
// wait is set. extra are the kind's own arguments of its acquire script. It
// brackets the call with the LockStart and LockEnd hooks.
func (a *acquirer) acquire(ctx context.Context, op string, wait bool, extra []any) (*Lease, error) {
	if err := a.check(ctx, op); err != nil {
		return nil, err
	}
	if a.e.hooks == nil {
		return a.acquire1(ctx, op, wait, extra)
	}
	return a.bracket(ctx, op, func(ctx context.Context) (*Lease, error) {
		return a.acquire1(ctx, op, wait, extra)
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

func (a *acquirer) acquire1(ctx context.Context, op string, wait bool, extra []any) (*Lease, error) {
	if ctx.Err() != nil {
		return nil, a.gaveUp(ctx, op)
	}
	if a.k.Kind.Reentrant {
		if h := heldIn(ctx).find(a.e, a.k); h != nil {
			return h.reenter(ctx, extra)
		}
	}
	return a.take(ctx, op, wait, extra)
}

// take makes one attempt, or, if wait is set, waits in line: it subscribes
// to the lock's wake-ups for this Client, and tries again, registered as a
// waiter in Redis, each time it is woken by a message that is not a grant it
// can return on (granted), the holder's lease would have run out, or its
// registration needs renewing.
func (a *acquirer) take(ctx context.Context, op string, wait bool, extra []any) (*Lease, error) {
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
		l, pttl, again, err := t.try(ctx, extra)
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
	w          *notify.Waiter
	registered bool // in Redis, by an attempt that found the lock held
	timer      *time.Timer
	out        outage
	// held is the last attempt that found the lock held: a grant told of
	// later with a fence above its floor was made after it reached Redis.
	held heldAt
	// doubt is the latest deadline of an attempt whose outcome is unknown
	// (protocol.AcquireResult.Doubt), 0 if none: a copy of it may still
	// reach Redis until then, so the release that ends the turn's owner
	// passes it on. doubtSent is when the first such attempt was sent: a
	// lock it took is counted from then.
	doubt     int64
	doubtSent time.Time
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
func (t *turn) try(ctx context.Context, extra []any) (l *Lease, pttl time.Duration, again bool, err error) {
	a, e := t.a, t.a.e
	var register time.Duration
	if t.w != nil {
		register, t.registered = timing.RegisterFor(a.ttl), true // also if the attempt fails: its script may have run
		t.w.Drain()                                              // a grant made before this attempt is found by it
	}
	sent := time.Now()
	l, pttl, r, err := a.attempt(ctx, t, sent, register, extra)
	if r.Doubt > t.doubt {
		t.doubt = r.Doubt
		if t.doubtSent.IsZero() {
			t.doubtSent = sent
		}
	}
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
func (a *acquirer) attempt(ctx context.Context, tn *turn, sent time.Time, register time.Duration, extra []any) (*Lease, time.Duration, protocol.AcquireResult, error) {
	a.e.announce()
	e, owner, before := a.e, tn.owner, tn.doubt
	var r protocol.AcquireResult
	var err error
	if inline(e, ctx) {
		r, err = e.backend.Acquire(ctx, a.k, owner, a.ttl, register, extra...)
	} else {
		// The closures take copies, not tn, which stays on its caller's
		// stack.
		r, err = within(e, ctx, func() (protocol.AcquireResult, error) {
			return e.backend.Acquire(ctx, a.k, owner, a.ttl, register, extra...)
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
	// The lease runs from the first copy that may have taken it: a retry
	// that finds the lock held by its owner does not lengthen it.
	begun := sent
	if !tn.doubtSent.IsZero() && tn.doubtSent.Before(begun) {
		begun = tn.doubtSent
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
// time, though fewer than a majority.
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

// ctxErr is the error of a context that ended, with its cause if it has its
// own.
func ctxErr(ctx context.Context) error {
	cerr := ctx.Err()
	if cerr == nil {
		cerr = context.DeadlineExceeded // past the deadline; the timer has not fired yet
	}
	if cause := context.Cause(ctx); cause != nil && cause != cerr {
		cerr = fmt.Errorf("%w (cause: %w)", cerr, cause)
	}
	return cerr
}

// ended reports whether ctx is done or past its deadline: a request cut off
// by the deadline (go-redis sets it on the connection) can fail a moment
// before ctx's own timer fires.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// errLeftBehind marks the error of a call that within gave up on; the caller
// names the call.
var errLeftBehind = errors.New("left to finish in the background")

// within runs call, which makes one request to Redis, and returns its result,
// or ctx's error as soon as ctx ends, whichever comes first. go-redis does not
// give up a request in flight when its context ends, so without this a stalled
// Redis would hold a caller for the Redis client's timeouts and retries, well
// past its deadline (its autopipeliner for tens of seconds). A request left
// behind goes on in the background; late, if not nil, then gets its outcome:
// say, to release a lock that was taken after its caller had gone. Close waits
// for it.
//
// Waiting on another goroutine costs a hand-off per call (about 18µs on a
// 2-vCPU VM), so where go-redis honors deadlines itself (a Redis client made
// with ContextTimeoutEnabled, without WithAutoPipeline) call runs inline.
func within[T any](e *engine, ctx context.Context, call func() (T, error), late func(T, error)) (T, error) {
	if inline(e, ctx) {
		return call()
	}
	type outcome struct {
		v   T
		err error
	}
	done := make(chan outcome, 1)
	var state atomic.Int32 // 0: running; 1: finished for the caller; 2: the caller left
	if !e.bg.goDo(func() {
		v, err := call()
		if state.CompareAndSwap(0, 1) {
			done <- outcome{v, err}
		} else if late != nil {
			late(v, err)
		}
	}) {
		return call()
	}
	select {
	case o := <-done:
		return o.v, o.err
	case <-ctx.Done():
		if !state.CompareAndSwap(0, 2) {
			o := <-done // it finished just now
			return o.v, o.err
		}
		var zero T
		return zero, fmt.Errorf("%w: %w", errLeftBehind, context.Cause(ctx))
	}
}

// inline reports whether within would make its call on the caller's
// goroutine: go-redis gives up the request at ctx's deadline by itself, or
// ctx can never end. A caller can then skip within and the closures it takes.
func inline(e *engine, ctx context.Context) bool {
	return e.traits.CtxAware || ctx.Done() == nil
}

// cleanupContext returns a context for releasing a lock after the caller's
// context may have ended: it keeps ctx's values but not its cancellation, and
// is bounded by cleanupTimeout. A context that can never be cancelled is used
// as it is; the Redis client's own timeouts bound the call.
func cleanupContext(ctx context.Context, ttl time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), timing.CleanupTimeout(ttl))
}

// newHold returns the first Lease of a new hold of term t, both made in one
// allocation.
func newHold(e *engine, t *renew.Term) *Lease {
	lh := &struct {
		l Lease
		h hold
	}{h: hold{e: e, t: t, holds: 1}}
	lh.l.h = &lh.h
	return &lh.l
}

// hold is what one owner holds of a lock: the lease's term, and how many
// times it was taken (the original acquisition and its re-entries). Every
// Lease of the owner shares it.
type hold struct {
	e *engine
	t *renew.Term

	// mu serialises the round trips that change the hold count in Redis
	// (re-entry and release), so that holds, the authoritative count, stays
	// exact.
	mu    sync.Mutex
	holds int32 // beside granted, in one word: the hold and its Lease are one allocation
	// granted: a release granted the lock to this hold (its first Lease
	// was handed off), so others were waiting for it, and likely still are
	// when it is released.
	granted bool
}

// reenter adds one hold in Redis for a Lock made with a context carrying h;
// extra are the kind's own arguments of its acquire script.
func (h *hold) reenter(ctx context.Context, extra []any) (*Lease, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.t
	if err := t.EndedErr("re-enter"); err != nil {
		return nil, errs.Op(ErrNotAcquired, err, "re-enter %q", t.K.Name)
	}
	r, err := h.e.backend.Reenter(ctx, *t.K, t.Owner, h.e.ren.TTLOf(t), int(h.holds)+1, extra...)
	if err != nil {
		// If the reply was lost the count in Redis may be one too high; the
		// next count sent, or the last release, sets it right.
		return nil, err
	}
	if !r.Reentered {
		lost := t.LostErr(protocol.CodeGone)
		h.e.ren.Lose(t, lost)
		return nil, errs.Op(ErrNotAcquired, lost, "re-enter %q", t.K.Name)
	}
	if r.NotReplicated != nil {
		// Give the hold back: the count in Redis returns to what it was.
		ttl := h.e.ren.TTLOf(t)
		cctx, cancel := cleanupContext(ctx, ttl)
		defer cancel()
		if _, err := h.e.backend.Release(cctx, *t.K, protocol.ReleaseArgs{Owner: t.Owner, Fence: t.FenceArg(), Mode: protocol.ReleaseOne, TTL: ttl, Count: int(h.holds)}); err != nil {
			h.e.log.Debug("dlock: undo of an unreplicated re-entry", "lock", t.K.Name, "err", err)
		}
		return nil, errs.Op(ErrNotAcquired, r.NotReplicated, "re-enter %q", t.K.Name)
	}
	h.holds++
	return &Lease{h: h, reentered: true}, nil
}

// unlock releases one hold; the last one frees the lock. It brackets the
// call with the UnlockStart and UnlockEnd hooks.
func (h *hold) unlock(ctx context.Context) error {
	hk := h.e.hooks
	if hk == nil {
		_, err := h.unlock1(ctx)
		return err
	}
	info := lockInfo(h.t)
	if hk.UnlockStart != nil {
		if c := hk.UnlockStart(ctx, info); c != nil {
			ctx = c
		}
	}
	last, err := h.unlock1(ctx)
	if hk.UnlockEnd != nil {
		hk.UnlockEnd(ctx, info, UnlockResult{Fence: h.t.Fence, Last: last, Held: time.Since(h.t.Begun), Err: err})
	}
	return err
}

func (h *hold) unlock1(ctx context.Context) (last bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, e := h.t, h.e
	if err := t.EndedErr("unlock"); err != nil {
		return false, err
	}
	if h.holds > 1 {
		ttl := e.ren.TTLOf(t)
		cctx, cancel := cleanupContext(ctx, ttl)
		defer cancel()
		// The client's count is the one that decides when the lock is freed:
		// this hold is given back whatever Redis answers, and a count that
		// failed to reach Redis is set right by the next one that does.
		h.holds--
		r, err := e.backend.Release(cctx, *t.K, protocol.ReleaseArgs{Owner: t.Owner, Fence: t.FenceArg(), Mode: protocol.ReleaseOne, TTL: ttl, Count: int(h.holds)})
		switch {
		case err != nil:
			return false, errs.Op(nil, err, "unlock %q: the hold was given back and the lock stays held by its others", t.K.Name)
		case r.Code == protocol.CodeHeld:
			return false, nil
		}
		lost := t.LostErr(r.Code)
		e.ren.Lose(t, lost)
		return false, errs.Op(ErrNotHeld, lost, "unlock")
	}

	// The last hold: the owner gives the lock up, so it is never renewed
	// again, whatever Redis answers.
	ttl := e.ren.Retire(t)
	cctx, cancel := cleanupContext(ctx, ttl)
	defer cancel()
	mode := protocol.ReleaseLast
	if h.granted {
		mode = protocol.ReleaseLastQueued
	}
	r, err := e.backend.Release(cctx, *t.K, protocol.ReleaseArgs{Owner: t.Owner, Fence: t.FenceArg(), Mode: mode, TTL: ttl, Void: t.Doubt})
	if err != nil {
		e.log.Error("dlock: release failed; retrying in the background", "lock", t.K.Name, "fence", t.Fence, "err", err)
		e.ren.End(t, errUnlocked, nil)
		e.bg.doSoon(func() { h.releaseLater(ttl) })
		return true, errs.Op(nil, err, "unlock %q (the Client keeps trying in the background; Redis frees the lock by itself when its TTL runs out)", t.K.Name)
	}
	kept := func() bool { return protocol.KeptData(cctx, e.backend, t.Begun) }
	if lost := releasedLoss(t, r, e.ren.DeadlineOf(t), kept); lost != nil {
		e.ren.Lose(t, lost)
		return true, errs.Op(ErrNotHeld, lost, "unlock")
	}
	e.ren.End(t, errUnlocked, func() {
		if e.log.Enabled(ctx, slog.LevelDebug) {
			e.log.Debug("dlock: released", "lock", t.K.Name, "fence", t.Fence, "held", time.Since(t.Begun))
		}
	})
	return true, nil
}

// releasedLoss tells what r, the answer of the release of t's last hold,
// says: nil if the release freed the lock, else how the lease was lost.
// deadline is the lease's local deadline; kept, asked only of a release
// sent again whose answer shows no trace of its first copy, reports
// whether Redis is known to have kept its data since the hold began.
func releasedLoss(t *renew.Term, r protocol.Released, deadline time.Time, kept func() bool) error {
	before := time.Now().Before(deadline)
	switch {
	case r.Code == protocol.CodeDone,
		// The owner holds nothing, and the lock's keys show that its hold
		// ended while they were there: an earlier copy of this release (its
		// reply lost) freed it, since before the lease's local deadline it
		// cannot have expired instead.
		r.Code == protocol.CodeAfter && before && r.Retried:
		return nil
	case r.Retried && before && (r.Code == protocol.CodeOther || r.Code == protocol.CodeGone) && kept():
		// The lock went on, its keys rewritten or expired since, but Redis
		// lost none of its data meanwhile, and the lease cannot have expired
		// yet: only the first copy of this release can have ended the hold.
		return nil
	case r.Code == protocol.CodeEvicted:
		return t.LostErr(r.Code)
	case r.Code == protocol.CodeAfter && r.Retried:
		return errs.Op(ErrLockLost, nil, "%q was free of this owner when the release ran, but the reply came after the lease's deadline: an earlier copy of this release may have freed it (then this is a false alarm), or the lease had expired first", t.K.Name)
	case r.Code == protocol.CodeAfter:
		// No copy of this release ran before: the hold expired in Redis.
		return errs.Op(ErrLockLost, nil, "%q expired in Redis before its release ran", t.K.Name)
	case r.Retried:
		// A copy of this release whose reply was lost may have freed it,
		// and the keys no longer show it: the lock moved on since, or they
		// expired or were lost.
		return errs.Op(ErrLockLost, nil, "%q was not this owner's when the release was sent again after a lost reply, and Redis no longer shows whether the first copy freed it: if it did, this is a false alarm; if not, the lease had expired or Redis lost its keys (a restart, a failover, eviction)", t.K.Name)
	case before && r.Code == protocol.CodeOther:
		return errs.Op(ErrLockLost, nil, "%q is held by another owner, before this lease could have expired: Redis lost the lock's keys (a restart without persistence, a failover to a replica that missed it, eviction) and it was taken again", t.K.Name)
	case before:
		return errs.Op(ErrLockLost, nil, "%q was gone from Redis before this lease could have expired: Redis lost the lock's keys (a restart without persistence, a failover to a replica that missed it, eviction)", t.K.Name)
	case r.Code == protocol.CodeOther:
		return errs.Op(ErrLockLost, nil, "%q expired, and is held by another owner", t.K.Name)
	}
	return t.LostErr(r.Code)
}

// releaseLater retries the release of a hold whose last Unlock could not
// reach Redis (retryRelease) until Redis answers or the lease's local
// deadline passes; once the Client closes, it makes one last attempt.
func (h *hold) releaseLater(ttl time.Duration) {
	t, e := h.t, h.e
	until := e.ren.DeadlineOf(t)
	if t.Doubt != 0 {
		// Until the record it carries can matter.
		until = latest(until, t.Begun.Add(protocol.RequestTTL))
	}
	err := timing.RetryRelease(e.closing, until, ttl, func(ctx context.Context) error {
		_, err := e.backend.Release(ctx, *t.K, protocol.ReleaseArgs{Owner: t.Owner, Fence: t.FenceArg(), Mode: protocol.ReleaseLast, TTL: ttl, Void: t.Doubt})
		return err
	})
	switch {
	case err == nil:
		e.log.Info("dlock: released in the background", "lock", t.K.Name, "fence", t.Fence)
	case errors.Is(err, timing.ErrReleaseLapsed):
		e.log.Info("dlock: release not retried: the lease has expired by now", "lock", t.K.Name, "fence", t.Fence)
	default:
		e.log.Warn("dlock: release failed; Redis frees the lock when its TTL runs out", "lock", t.K.Name, "fence", t.Fence, "err", err)
	}
}

// errUnlocked is the cause of a lease's end by Unlock.
var errUnlocked = errs.Op(ErrNotHeld, nil, "the lease was unlocked")
