package dlock

import (
	"context"
	"errors"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/renew"
	"github.com/dlock-go/dlock/internal/timing"
)

// Election elects one leader among the candidates that campaign for it, in
// any number of processes that use the same name on the same Redis, and
// lets anyone read and follow who leads.
//
// A leader exists from the moment Redis grants a candidate the Election's
// lease (the grant writes the leader's term, value and start in Redis) until
// that lease ends: its leader resigns, or stops renewing it (its process
// died, paused or was cut off from Redis), or its Client is closed. Term is
// the lease's fence: every term of a name is greater than all earlier ones,
// so a resource that rejects writes with a term below the highest it has
// seen rejects a leader that was paused past its lease. Candidates are
// served in the order they campaigned, as a FairMutex's waiters are: a
// leader that resigns hands the lease to the next candidate at once.
//
// An Election is a cheap, immutable description: make one wherever it is
// needed, or share one; it is safe for concurrent use. The zero Election is
// not usable; get one from Client.Election. Its keys are its own: an
// Election and a Mutex of the same name share nothing.
type Election struct {
	a acquirer
}

// Leader is who leads an Election: the value the leader campaigned with or
// last proclaimed, its term and when the term began (the Redis server's
// clock). The zero Leader, Term 0, is nobody.
type Leader struct {
	Value string
	Term  int64
	Since time.Time
}

// Election returns the election called name. name must not be empty, nor
// longer than MaxNameLen bytes. WithTTL sets how long a leader that stopped
// renewing its lease still leads; WithoutRenewal does not apply to an
// Election (its leaders' leases are renewed while they lead) and is an
// error, given here or to the Client. These errors, and an unusable Client,
// are returned by every call. On a RedLock Client every call returns an
// error matching errors.ErrUnsupported.
func (c *Client) Election(name string, opts ...Option) *Election {
	el := &Election{a: c.acquirer(protocol.ElectionKind, name, opts)}
	if a := &el.a; a.err == nil {
		if !a.renew {
			a.err = errs.Op(nil, nil, "Election %q: WithoutRenewal (given to it or to its Client) does not apply: a leader's lease is renewed while it leads", name)
		}
	}
	return el
}

// Name returns the election's name.
func (el *Election) Name() string { return el.acquirer().k.Name }

// Campaign makes the caller a candidate with value, and waits until it
// leads or ctx is done. ctx bounds the wait only, never the leadership. If
// ctx ends first, the error matches both ErrNotAcquired and ctx.Err(), and
// the candidate leaves the line. Each call is a candidate of its own, served
// after those that campaigned before it. A Campaign whose ctx carries a
// Leadership of this Election (see Leadership.Context) fails at once, with
// ErrNotAcquired: its caller leads already.
//
// value, which Leader and Observe report while the candidate leads, must
// not be empty, nor longer than MaxValueLen bytes. It is in Redis from the
// moment the candidate is in line, so that a leader that resigns hands over
// to it at once, value and all.
func (el *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	const op = "campaign"
	a := el.acquirer()
	if err := a.check(ctx, op); err != nil {
		return nil, err
	}
	if err := checkValue(op, a.k.Name, value); err != nil {
		return nil, err
	}
	if heldIn(ctx).find(a.e, a.k) != nil {
		return nil, errs.Op(ErrNotAcquired, nil, "%s %q: its context carries a Leadership of this Election: the caller leads already", op, a.k.Name)
	}
	l, err := a.acquire(ctx, op, true, protocol.KindArgs{Value: value})
	if err != nil {
		return nil, err
	}
	return &Leadership{l: l, value: value}, nil
}

// Leader returns who leads the election, in one request that writes
// nothing. If nobody does, the error matches ErrNoLeader.
func (el *Election) Leader(ctx context.Context) (Leader, error) {
	const op = "leader of"
	a := el.acquirer()
	if err := a.checkRead(ctx, op); err != nil {
		return Leader{}, err
	}
	st, err := a.readLeader(ctx)
	switch {
	case err != nil:
		return Leader{}, err
	case st.Term == 0:
		return Leader{}, errs.Op(ErrNoLeader, nil, "%s %q", op, a.k.Name)
	}
	return leaderOf(st), nil
}

// Observe returns the sequence of the election's states: who leads (the
// zero Leader, Term 0, when nobody does), the current state first, then each
// later one as it changes. It may skip states (a consumer slower than the
// changes, a wake-up message lost), but never yields a state older than one
// it yielded: a term below one it yielded, a term's earlier value, or a
// leader of a term it saw end. When the changes stop, it yields the final
// state within one TTL. On a Redis error it yields the error and goes on,
// reading the state again; it ends when ctx ends (yielding nothing more),
// when the loop stops, or after yielding an error matching ErrClosed when the
// Client is closed.
//
// It waits on the Client's one pub/sub connection: all the Observe calls of a
// Client on one election share one subscription. Each change is published;
// each call reads the state once per message, and, as a message may be
// lost, at least once per TTL and when the leader's lease would run out.
func (el *Election) Observe(ctx context.Context) iter.Seq2[Leader, error] {
	return func(yield func(Leader, error) bool) {
		a := el.acquirer()
		if err := a.check(ctx, "observe"); err != nil {
			yield(Leader{}, err)
			return
		}
		(&observer{a: a}).run(ctx, yield)
	}
}

// observer is one Observe call's loop.
type observer struct {
	a *acquirer
	g *notify.Gate
	w *notify.Listener
	// last is where the last state yielded stands in the election's history
	// (pos); seen tells whether one was.
	last pos
	seen bool
}

// pos orders the states of an election: a leader by its term and the seq
// of its value, and nobody leading after every state of the highest term
// seen.
type pos struct{ term, seq int64 }

// after reports whether p comes after q.
func (p pos) after(q pos) bool { return p.term > q.term || p.term == q.term && p.seq > q.seq }

// nobody is the seq of "nobody leads".
const nobody = 1<<63 - 1

func (o *observer) run(ctx context.Context, yield func(Leader, error) bool) {
	a, e := o.a, o.a.e
	defer func() {
		if o.w != nil {
			e.note.Exit(o.g, o.w, false, 0)
		}
		if o.g != nil {
			e.note.Leave(o.g)
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// sleep waits d, for a message, for ctx's end or for Close; it reports
	// whether the loop goes on.
	sleep := func(d time.Duration) bool {
		timer.Reset(d)
		var wake <-chan protocol.Wake
		if o.w != nil {
			wake = o.w.Wake
		}
		select {
		case <-timer.C:
		case <-wake:
		case <-ctx.Done():
			return false
		case <-e.closing:
			yield(Leader{}, errs.Op(ErrClosed, nil, "observe %q", a.k.Name))
			return false
		}
		return true
	}
	// failed yields err, unless ctx has ended, and reports whether the loop
	// goes on after a pause.
	failed := func(err error) bool {
		switch {
		case ended(ctx):
			return false
		case errors.Is(err, ErrClosed):
			yield(Leader{}, errs.Op(ErrClosed, nil, "observe %q", a.k.Name))
			return false
		}
		return yield(Leader{}, errs.Op(nil, err, "observe %q", a.k.Name)) && sleep(timing.RetryDelay(a.ttl))
	}
	channel := protocol.LeaderKey(a.k)
	for {
		if o.g == nil {
			// Subscribed before the state is read: a change after the read
			// is told.
			g := e.note.JoinSubscribed(channel, "")
			if g == nil {
				var err error
				if g, err = e.note.Join(ctx, a.k, a.ttl, channel); err != nil {
					if !failed(err) {
						return
					}
					continue
				}
			}
			o.g, o.w = g, e.note.Enter(g, e.newOwner())
		}
		o.w.Drain() // a message before this read is answered by it
		st, err := a.readLeader(ctx)
		if err != nil {
			if !failed(err) {
				return
			}
			continue
		}
		if o.take(st) && !yield(leaderOf(st), nil) {
			return
		}
		if !sleep(observeAgain(a.ttl, st)) {
			return
		}
	}
}

// observeAgain is how long an Observe call that read st waits for a
// message before it reads the state again. A message tells of the next
// change; a lease that runs out sends none, and a message may be lost: it
// looks again when the leader's lease would run out, and at least once per
// TTL. (A variable, so that a test can show that its checks catch an Observe
// that waits for messages alone.)
var observeAgain = func(ttl time.Duration, st protocol.LeaderState) time.Duration {
	if st.Term > 0 {
		return min(ttl, st.Left+time.Millisecond)
	}
	return ttl
}

// take reports whether st is to be yielded: it is the first state read, or
// comes after the last one yielded, which it then becomes.
func (o *observer) take(st protocol.LeaderState) bool {
	p := pos{st.Term, st.Seq}
	if st.Term == 0 {
		// Nobody leads: after every state of the highest term seen, which
		// has ended.
		p = pos{o.last.term, nobody}
	}
	if o.seen && !p.after(o.last) {
		return false
	}
	o.last, o.seen = p, true
	return true
}

// readLeader reads the election's leader, returning at ctx's end even if
// Redis has stalled.
func (a *acquirer) readLeader(ctx context.Context) (protocol.LeaderState, error) {
	e := a.e
	st, err := within(e, ctx, func() (protocol.LeaderState, error) { return e.elections.Leader(ctx, a.k) }, nil)
	e.heard(err)
	if errors.Is(err, errLeftBehind) {
		err = errs.Op(nil, err, "read the leader of %q", a.k.Name)
	}
	return st, err
}

func leaderOf(st protocol.LeaderState) Leader {
	if st.Term == 0 {
		return Leader{}
	}
	return Leader{Value: st.Value, Term: st.Term, Since: time.UnixMicro(st.Since)}
}

// checkValue rejects a value that is empty or too long.
func checkValue(op, name, value string) error {
	switch {
	case value == "":
		return errs.Op(nil, nil, "%s %q: empty value", op, name)
	case len(value) > MaxValueLen:
		return errs.Op(nil, nil, "%s %q: a value of %d bytes: at most MaxValueLen (%d) are allowed", op, name, len(value), MaxValueLen)
	}
	return nil
}

func (el *Election) acquirer() *acquirer {
	if el == nil || el.a.e == nil && el.a.err == nil {
		return &acquirer{err: errors.New("dlock: nil or zero Election; get one from Client.Election")}
	}
	return &el.a
}

// Leadership is one term of leadership won by Campaign: the handle its
// leader keeps to act as leader, change its value and resign.
//
// Act as leader only within Context: it ends at the lease's local deadline
// or its loss, before Redis could let another candidate lead (on the same
// server; across a failover, only with WithWaitReplicas, else the term
// protects the resource). A leader can always be paused past that point
// without noticing: hand Term to the resource, and have it reject a term
// below the highest it has seen.
//
// A Leadership is safe for concurrent use. The methods of a nil *Leadership
// return errors, or a closed Done channel.
type Leadership struct {
	l *Lease

	mu       sync.Mutex
	value    string       // Value
	valueSeq uint64       // the Proclaim that set value; 0: Campaign
	resign   *resignation // the first Resign's release, nil before it

	proclaims atomic.Uint64 // Proclaims sent
}

var errNilLeadership = errors.New("dlock: nil *Leadership")

// hold returns ld's hold, nil for a nil *Leadership.
func (ld *Leadership) hold() *hold {
	if ld == nil || ld.l == nil {
		return nil
	}
	return ld.l.h
}

// Term returns the term: the fence of the leadership's lease, greater than
// every earlier term of the election.
func (ld *Leadership) Term() int64 {
	if ld.hold() == nil {
		return 0
	}
	return ld.l.Fence()
}

// Value returns the value the leader campaigned with, or the one of its
// latest Proclaim that succeeded.
func (ld *Leadership) Value() string {
	if ld.hold() == nil {
		return ""
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.value
}

// Done returns a channel that is closed when the leadership ends: when it
// is lost (Err then matches ErrLockLost), resigned (ErrNotHeld) or ended by
// Close (ErrClosed).
func (ld *Leadership) Done() <-chan struct{} {
	if ld.hold() == nil {
		return renew.ClosedChan
	}
	return ld.l.Done()
}

// Err returns nil while the leadership lasts, and after Done is closed, why
// it ended.
func (ld *Leadership) Err() error {
	if ld.hold() == nil {
		return errNilLeadership
	}
	return ld.l.Err()
}

// Context returns a copy of parent that is cancelled when parent is, or when
// the leadership ends (context.Cause then tells why, as Err does), at its
// lease's local deadline at the latest. Its Deadline is that local deadline,
// or parent's if earlier: the lease's deadline moves later at each renewal,
// so Deadline tells, whenever it is asked, how long the leader may count on
// leading unless renewed again (it does not return the same time at every
// call, as context.Context's documentation has it). It carries the
// leadership, so that a Campaign of the same Election with it fails at once.
// Call cancel when done. A nil parent is taken as context.Background().
func (ld *Leadership) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	h := ld.hold()
	if h == nil {
		if parent == nil {
			parent = context.Background()
		}
		ctx, cancelCause := context.WithCancelCause(parent)
		cancelCause(errNilLeadership)
		return ctx, func() {}
	}
	ctx, cancel = ld.l.Context(parent)
	return &leadershipContext{Context: ctx, h: h}, cancel
}

// leadershipContext is a Leadership's Context: a Lease's, whose deadline is
// the lease's local deadline.
type leadershipContext struct {
	context.Context
	h *hold
}

func (c *leadershipContext) Deadline() (time.Time, bool) {
	d := c.h.e.ren.DeadlineOf(c.h.t)
	if p, ok := c.Context.Deadline(); ok && p.Before(d) {
		return p, true
	}
	return d, true
}

// Proclaim makes value the leader's value, which Leader and Observe report
// from then on; the term and its start stay. One round trip. Of several
// Proclaims, Redis keeps the latest one called, whatever order they reach
// it or their replies come back in; a Proclaim run again (go-redis runs a
// request again when its reply is lost) changes nothing more. After the
// leadership ended, Proclaim sends nothing and returns an error matching
// ErrNotHeld (and ErrLockLost if it was lost); one that finds the leadership
// lost in Redis returns such an error and ends it. value follows Campaign's
// rules.
func (ld *Leadership) Proclaim(ctx context.Context, value string) error {
	const op = "proclaim"
	h := ld.hold()
	if h == nil {
		return errNilLeadership
	}
	e, t := h.e, h.t
	if ctx == nil {
		return errs.Op(nil, nil, "%s %q: nil context", op, t.K.Name)
	}
	if err := checkValue(op, t.K.Name, value); err != nil {
		return err
	}
	if err := t.EndedErr(op); err != nil {
		return err
	}
	seq := ld.proclaims.Add(1)
	code, err := within(e, ctx, func() (int64, error) {
		return e.elections.Proclaim(ctx, *t.K, t.Owner, t.Fence, seq, value)
	}, nil)
	e.heard(err)
	switch {
	case errors.Is(err, errLeftBehind):
		return errs.Op(nil, err, "%s %q", op, t.K.Name)
	case err != nil:
		return err
	case code != protocol.CodeDone:
		if err := t.EndedErr(op); err != nil {
			return err // resigned, or found lost, meanwhile
		}
		lost := t.LostErr(code)
		e.ren.Lose(t, lost)
		return errs.Op(ErrNotHeld, lost, op)
	}
	ld.mu.Lock()
	if seq > ld.valueSeq {
		ld.value, ld.valueSeq = value, seq
	}
	ld.mu.Unlock()
	return nil
}

// Resign ends the leadership. It ends it here first: Done closes and Err
// matches ErrNotHeld before anything is sent. Then the lease is released
// in Redis, which hands it at once to the next candidate in line, if any;
// Resign returns nil once Redis has confirmed that. If Redis could not be
// reached, Resign returns the error, and the Client keeps trying in the
// background until the lease's TTL has run out (Redis then ends it by
// itself); a later Resign returns nil once that has succeeded or the TTL has
// run out (or the error of its ctx if that ends first). A leadership that
// was lost is not released: Resign sends nothing and returns an error
// matching ErrLockLost. Like Unlock, Resign works when ctx is already
// cancelled: the release runs under a timeout of its own.
func (ld *Leadership) Resign(ctx context.Context) error {
	h := ld.hold()
	if h == nil {
		return errNilLeadership
	}
	e, t := h.e, h.t
	if ctx == nil {
		return errs.Op(nil, nil, "resign %q: nil context", t.K.Name)
	}
	ld.mu.Lock()
	r := ld.resign
	if r == nil {
		// Here first: whatever Redis answers, the leadership has ended.
		if !e.ren.End(t, errResigned, nil) {
			ld.mu.Unlock()
			return errs.Op(ErrNotHeld, t.Ending.Cause(), "resign %q", t.K.Name)
		}
		ld.resign = &resignation{done: make(chan struct{}), deadline: e.ren.DeadlineOf(t)}
	}
	ld.mu.Unlock()
	if r == nil {
		e.leadershipEnded(ctx, t, errResigned)
	}
	if r != nil {
		return r.wait(ctx, t.K.Name)
	}
	return ld.release(ctx, ld.resign)
}

// release releases the resigned leadership's lease for r, the first Resign.
func (ld *Leadership) release(ctx context.Context, r *resignation) error {
	h := ld.l.h
	e, t := h.e, h.t
	info := lockInfo(t)
	hk := e.hooks
	if hk != nil && hk.UnlockStart != nil {
		if c := hk.UnlockStart(ctx, info); c != nil {
			ctx = c
		}
	}
	err := ld.release1(ctx, r)
	if hk != nil && hk.UnlockEnd != nil {
		hk.UnlockEnd(ctx, info, UnlockResult{Fence: t.Fence, Last: true, Held: time.Since(t.Begun), Err: err})
	}
	return err
}

func (ld *Leadership) release1(ctx context.Context, r *resignation) error {
	h := ld.l.h
	e, t := h.e, h.t
	ttl := e.ren.TTLOf(t)
	args := protocol.ReleaseArgs{Owner: t.Owner, Fence: t.FenceArg(), Mode: protocol.ReleaseLast, TTL: ttl, Void: t.Doubt}
	release := func(ctx context.Context) error {
		_, err := e.backend.Release(ctx, *t.K, args)
		return err
	}
	cctx, cancel := cleanupContext(ctx, ttl)
	defer cancel()
	code, err := e.backend.Release(cctx, *t.K, args)
	if err != nil {
		e.log.Error("dlock: resign failed; retrying in the background", "election", t.K.Name, "term", t.Fence, "err", err)
		e.bg.doSoon(func() {
			err := timing.RetryRelease(e.closing, r.deadline, ttl, release)
			if err == nil {
				e.log.Info("dlock: resigned in the background", "election", t.K.Name, "term", t.Fence)
			}
			r.finish(err)
		})
		return errs.Op(nil, err, "resign %q (the Client keeps trying in the background until the lease's TTL has run out, when Redis ends the leadership by itself)", t.K.Name)
	}
	lost := releasedLoss(t, code, r.deadline, func() bool { return protocol.KeptData(cctx, e.backend, t.Begun) })
	r.finish(lost)
	if lost != nil {
		return errs.Op(ErrNotHeld, lost, "resign")
	}
	return nil
}

// errResigned is the cause of a leadership's end by Resign.
var errResigned = errs.Op(ErrNotHeld, nil, "the leadership was resigned")

// resignation is the release of a resigned leadership's lease.
type resignation struct {
	deadline time.Time     // the lease's local deadline: Redis ends it soon after by itself
	done     chan struct{} // closed when the release has ended, err being why
	err      error
}

func (r *resignation) finish(err error) {
	r.err = err
	close(r.done)
}

// wait waits for r, for a later Resign of the leadership called name.
func (r *resignation) wait(ctx context.Context, name string) error {
	select {
	case <-r.done:
	case <-ctx.Done():
		return errs.Op(nil, ctxErr(ctx), "resign %q: its release is still being retried in the background", name)
	}
	switch {
	case r.err == nil, errors.Is(r.err, timing.ErrReleaseLapsed):
		return nil
	case errors.Is(r.err, ErrLockLost):
		return errs.Op(ErrNotHeld, r.err, "resign")
	}
	// The last try, at Close, failed: the lease ends with its TTL.
	t := time.NewTimer(time.Until(r.deadline))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return errs.Op(nil, ctxErr(ctx), "resign %q: the lease's TTL has not run out yet, and Redis could not be told", name)
	}
}
