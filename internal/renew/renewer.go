// Package renew is the renewer layer: the life of every lease a Client
// holds. One goroutine keeps every lease's local deadline and schedules its
// renewals; the renewal calls themselves run on goroutines of their own, so
// that a stalled Redis delays no deadline. Renewals and Lease.Extend calls
// of one lease reach Redis one at a time, through here. What happens to
// leases is told to Events, off the renewer's goroutine.
package renew

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/timing"
)

// Term is the life of one lease: what it is, its TTL and local deadline, its
// renewal schedule, and its ending.
type Term struct {
	// Set when the lease begins, never changed.
	K     *protocol.Keys
	Owner string
	Fence int64
	// fenceArg is Fence as the acquire's reply boxed it, if it did: sent
	// back by the release without boxing it again (FenceArg).
	fenceArg protocol.FenceArg
	Begun    time.Time // when the acquire was sent: the latest Redis can have started the TTL
	// Doubt, if not 0, is the deadline (the server's time, in ms) of an
	// acquire of the owner whose outcome is unknown, which may still reach
	// Redis: the release that ends the lease passes it on
	// (protocol.ReleaseArgs.Void).
	Doubt int64

	// Ends, once, when the lease does, with the reason; safe for concurrent
	// use on its own.
	Ending ending
	// givenUp is set, before anything is sent to give the lease up, by
	// Retire (Unlock) or Stop (Close): Held is false from then on.
	givenUp atomic.Bool

	// Everything below is guarded by renewer.mu, once Begin has put the
	// term in the renewer's care: the renewer's goroutine, the renewal
	// calls' goroutines and the callers of Extend, Retire and End all read
	// and write it under that lock.

	// What the renewer does with the lease.
	renew bool
	// lengthen: the lease is a grant lease, shorter than ttl, that the
	// renewer lengthens to ttl at once, whether or not it renews.
	lengthen bool
	ttl      time.Duration
	// gen is how many Extends of the lease have been sent. Every request
	// about the lease carries it, so that Redis ignores one sent before the
	// latest Extend it ran, and the client the reply to one sent before the
	// latest Extend it sent, whenever either arrives.
	gen uint32

	// r is the renewer whose care t is in; dl is deadline, in nanoseconds
	// from monoBase, which Check reads without r.mu.
	r  *Renewer
	dl atomic.Int64

	// How it ends.
	ended bool
	// retired: its owner is giving it up (Unlock): the release's answer
	// decides how it ends, not a renewal's that Redis ran after the release.
	retired bool

	// When the renewer looks at it, and its place in the renewer's queue.
	deadline time.Time // after this, without a renewal, the lease counts as lost
	due      time.Time // the next renewal, if renew
	slack    time.Duration
	wakeDue  bool  // the renewer looks at it next at due, else at deadline
	index    int32 // in renewer.queue; -1 when not in it

	// The request about it in flight. busy is also the request's identity:
	// a renewal's reply counts as the term's current try only while t.busy
	// is still the channel made for it (stalled, renewed).
	busy    chan struct{} // while an extend is in flight: closed when its reply is in
	lastErr error         // of the last renewal, for the loss message
}

// monoBase is the time deadlines are counted from for Check: a reading of
// the monotonic clock.
var monoBase = time.Now()

// setDeadline sets t's local deadline to d. renewer.mu must be held, or t
// not yet be in the renewer's care.
func (t *Term) setDeadline(d time.Time) {
	t.deadline = d
	t.dl.Store(int64(d.Sub(monoBase)))
}

// Check returns why t ended, nil while it is held. It ends t as lost if its
// local deadline has passed and the renewer has not ended it yet: after a
// pause of the process (a SIGSTOP, a stopped VM) the goroutines wake in any
// order, and whatever asks whether the lease is held (Err, Done, a
// Context's Err, Held) must not be told yes by a term whose timer has not
// fired. Its deadline is compared with the monotonic clock when asked.
func (t *Term) Check() error {
	if cause := t.Ending.Cause(); cause != nil {
		return cause
	}
	if t.r == nil || t.givenUp.Load() || time.Since(monoBase) < time.Duration(t.dl.Load()) {
		return nil
	}
	return t.r.overdue(t)
}

// overdue ends t as lost if its deadline has passed: what the renewer's
// goroutine does at that deadline (tick). It returns why t ended; past the
// deadline, while another goroutine is ending t (the renewer's, which
// reports the loss before t's Ending ends), the deadline's error.
func (r *Renewer) overdue(t *Term) error {
	r.mu.Lock()
	if t.retired || time.Now().Before(t.deadline) {
		r.mu.Unlock()
		return t.Ending.Cause()
	}
	if t.ended {
		r.mu.Unlock()
		if cause := t.Ending.Cause(); cause != nil {
			return cause
		}
		return r.deadlineErr(t)
	}
	t.ended = true
	if t.index >= 0 {
		heap.Remove(&r.queue, int(t.index))
	}
	r.mu.Unlock()
	err := r.deadlineErr(t)
	r.lost(t, err)
	t.Ending.End(err)
	return t.Ending.Cause()
}

// setWake sets when the renewer looks at t next. renewer.mu must be held.
func (t *Term) setWake() {
	t.wakeDue = (t.renew || t.lengthen) && t.busy == nil && t.due.Before(t.deadline)
}

// wake is when the renewer looks at t next: due or deadline (setWake).
func (t *Term) wake() time.Time {
	if t.wakeDue {
		return t.due
	}
	return t.deadline
}

// Held reports whether t's lease is still its owner's: not ended, and not
// being given up. A RedLock asks it before it takes the lock again for t on
// a member that lost it (protocol.Holder): a release that follows Retire or
// Stop then finds every such retake done, or none begun.
func (t *Term) Held() bool {
	return t.Check() == nil && !t.givenUp.Load()
}

// EndedErr returns nil while t is held, else an error matching ErrNotHeld and
// the reason it ended.
func (t *Term) EndedErr(op string) error {
	cause := t.Check()
	if cause == nil {
		return nil
	}
	return errs.Op(errs.ErrNotHeld, cause, "%s %q", op, t.K.Name)
}

// FenceArg is t's fence as a script argument.
func (t *Term) FenceArg() protocol.FenceArg {
	if t.fenceArg == (protocol.FenceArg{}) {
		return protocol.BoxFence(t.Fence)
	}
	return t.fenceArg
}

// LostErr describes a script's "not yours" answer.
func (t *Term) LostErr(code int64) error {
	switch code {
	case protocol.CodeOther:
		return errs.Op(errs.ErrLockLost, nil, "%q is held by another owner", t.K.Name)
	case protocol.CodeEvicted:
		return errs.Op(errs.ErrLockLost, nil, "%q was taken away by ForceRelease", t.K.Name)
	}
	return errs.Op(errs.ErrLockLost, nil, "%q expired", t.K.Name)
}

// Renewer keeps the terms of a Client's leases, which are all on one Backend.
type Renewer struct {
	backend protocol.Backend
	shards  protocol.Sharded // backend's (protocol.ShardingOf)
	log     *slog.Logger
	events  Events

	mu      sync.Mutex
	queue   termQueue // every term not ended, by wake
	timer   *time.Timer
	armed   time.Time // when timer fires next
	started bool
	stopped bool

	ctx    context.Context // cancelled by stop: ends renewal calls in flight
	cancel context.CancelFunc
	wg     sync.WaitGroup // the loop and the renewal calls
}

// Events is what the renewer tells of leases, off its own goroutine: the
// Client hands them to its hooks.
type Events interface {
	Lost(t *Term, err error)
	Extended(t *Term)
	ExtendFailed(ts []*Term, err error)
	// Record returns a record to write with the next round (a Client's
	// name), or nil; Recorded gets it back after the round.
	Record() *protocol.Record
	Recorded(rec *protocol.Record)
}

func New(b protocol.Backend, log *slog.Logger, events Events) *Renewer {
	ctx, cancel := context.WithCancel(context.Background())
	return &Renewer{backend: b, shards: protocol.ShardingOf(b), log: log, events: events, ctx: ctx, cancel: cancel}
}

// A Start is how a lease Redis granted began.
type Start struct {
	TTL   time.Duration
	Renew bool      // renewed while held (not WithoutRenewal)
	Sent  time.Time // when the request that got it was sent
	// Grant, above 0, is the grant lease a release gave: the lease is that
	// short until the renewer lengthens it to TTL, at once.
	Grant time.Duration
	// FenceArg, if set, is the fence as the acquire's reply boxed it.
	FenceArg protocol.FenceArg
	// Doubt is the Term's.
	Doubt int64
}

// Begin starts the term of a lease just acquired: it lapses at s.Sent +
// s.TTL in Redis at the latest, and counts as lost Drift before that unless
// renewed. A lease granted by a release (s.Grant above 0) lapses at s.Sent +
// s.Grant at the latest, s.Sent being a request that reached Redis before
// the grant was made, and counts as lost Drift(s.Grant) before that.
func (r *Renewer) Begin(k *protocol.Keys, owner string, fence int64, s Start) (*Term, error) {
	t := &Term{K: k, Owner: owner, Fence: fence, fenceArg: s.FenceArg, Begun: s.Sent, Doubt: s.Doubt, r: r,
		renew: s.Renew, ttl: s.TTL,
		due: s.Sent.Add(timing.RenewEvery(s.TTL)), slack: timing.RenewSlack(s.TTL)}
	t.setDeadline(s.Sent.Add(s.TTL - timing.Drift(s.TTL)))
	if s.Grant > 0 {
		t.granted(s.Sent, s.Grant)
	}
	t.setWake()
	if err := r.admit(t); err != nil {
		return nil, err
	}
	return t, nil
}

// granted makes t's lease a grant lease of grant from sent, to be lengthened
// at once.
func (t *Term) granted(sent time.Time, grant time.Duration) {
	t.lengthen, t.due, t.slack = true, time.Now(), 0
	t.setDeadline(sent.Add(grant - timing.Drift(grant)))
}

// admit puts t, new, in the renewer's care, starting the renewer's goroutine
// with the first term.
func (r *Renewer) admit(t *Term) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return errs.Op(errs.ErrClosed, nil, "lock %q acquired while closing", t.K.Name)
	}
	heap.Push(&r.queue, t)
	if !r.started {
		r.started = true
		r.timer = time.NewTimer(time.Until(t.wake()))
		r.armed = t.wake()
		r.wg.Add(1)
		go r.run()
	} else {
		r.arm(t.wake())
	}
	return nil
}

// arm makes the timer fire at at if that is earlier than it would. Setting
// the timer from the caller's goroutine spares the loop a wake-up for every
// new lease. r.mu must be held.
func (r *Renewer) arm(at time.Time) {
	if at.Before(r.armed) {
		r.armed = at
		r.timer.Reset(time.Until(at))
	}
}

// reschedule puts t where its next wake puts it, if it is in the renewer's
// care (not retired), and arms the timer for it. r.mu must be held.
func (r *Renewer) reschedule(t *Term) {
	if t.index < 0 {
		return
	}
	t.setWake()
	heap.Fix(&r.queue, int(t.index))
	if !r.stopped {
		r.arm(t.wake())
	}
}

// Retire takes t out of the renewer's care, for its owner is giving it up:
// it is never renewed again, and no longer lost at its deadline. It returns
// t's TTL. end ends it.
func (r *Renewer) Retire(t *Term) time.Duration {
	t.givenUp.Store(true)
	r.mu.Lock()
	defer r.mu.Unlock()
	t.renew, t.lengthen, t.retired = false, false, true
	if t.index >= 0 {
		heap.Remove(&r.queue, int(t.index))
	}
	return t.ttl
}

// Landed waits, for at most ctx, until no renewal or Extend of t is in
// flight, if a release on r's backend refuses no late request
// (Traits.NoScripts): there a renewal that reached Redis after the release
// would find, and lengthen to the whole TTL, a late copy of t's acquire,
// which writes the value the renewal expects. A retired t is never renewed
// again, so once this returns the release that follows is the last request
// about t. A renewal whose reply is overdue (stalled) stops the wait too.
func (r *Renewer) Landed(ctx context.Context, t *Term) {
	if !r.backend.Traits().NoScripts {
		return
	}
	r.mu.Lock()
	if r.quiet(ctx, t) {
		r.mu.Unlock()
	}
}

// quiet waits, with r.mu held, until no renewal or Extend of t is in flight
// or t has ended. It returns true with r.mu held; false, with it released,
// if ctx ended first.
func (r *Renewer) quiet(ctx context.Context, t *Term) bool {
	for t.busy != nil && !t.ended {
		done := t.busy
		r.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return false
		}
		r.mu.Lock()
	}
	return true
}

// End ends t with cause, once, and reports whether it did. report, if not
// nil, runs before Done closes, so that whoever sees Done closed also sees
// what report recorded.
func (r *Renewer) End(t *Term, cause error, report func()) bool {
	r.mu.Lock()
	if t.ended {
		r.mu.Unlock()
		return false
	}
	t.ended = true
	if t.index >= 0 {
		heap.Remove(&r.queue, int(t.index))
	}
	r.mu.Unlock()
	if report != nil {
		report()
	}
	t.Ending.End(cause)
	return true
}

// Lose ends t as lost.
func (r *Renewer) Lose(t *Term, err error) {
	r.End(t, err, func() { r.lost(t, err) })
}

// lost logs and reports the loss of t, which has ended.
func (r *Renewer) lost(t *Term, err error) {
	r.log.Error("dlock: lease lost", "lock", t.K.Name, "fence", t.Fence, "err", err)
	r.events.Lost(t, err)
}

// Extend makes t lapse ttl from now, and ttl its TTL from then on (Lease.Extend).
// It waits for a renewal of t in flight; while it is in flight itself, t
// counts as ending no later than ttl from when it was sent. It is of a new
// generation (term.gen): no request about t sent before it, however late
// Redis runs it or its reply comes, undoes it or lengthens what the client
// counts on. If its outcome is unknown, t counts on the shorter of the two
// TTLs from then on, which holds whether or not Redis ran it.
func (r *Renewer) Extend(ctx context.Context, t *Term, ttl time.Duration) error {
	r.mu.Lock()
	if !r.quiet(ctx, t) {
		return errs.Op(nil, context.Cause(ctx), "extend %q", t.K.Name)
	}
	if t.ended {
		r.mu.Unlock()
		return t.EndedErr("extend")
	}
	if t.retired {
		r.mu.Unlock()
		return errs.Op(errs.ErrNotHeld, nil, "extend %q: it is being unlocked", t.K.Name)
	}
	t.busy = make(chan struct{})
	t.gen++
	gen := t.gen
	sent := time.Now()
	if d := sent.Add(ttl - timing.Drift(ttl)); d.Before(t.deadline) {
		t.setDeadline(d)
	}
	r.reschedule(t)
	r.mu.Unlock()

	codes, err := r.backend.Extend(ctx, []protocol.ExtendItem{{K: *t.K, Owner: t.Owner, TTL: ttl, Exact: true, Gen: gen, Fence: t.Fence, Lease: t}})

	r.mu.Lock()
	close(t.busy)
	t.busy = nil
	var lost error
	switch {
	case t.ended:
	case t.retired:
		// Unlocked meanwhile: the release decides how the lease ends.
		err = errs.Op(errs.ErrNotHeld, nil, "extend %q: unlocked while the Extend was in flight", t.K.Name)
	case err != nil:
		// Redis may or may not run it, now or later: renew soon, counting
		// on what holds either way.
		t.ttl, t.due = min(t.ttl, ttl), time.Now()
	case codes[0] == protocol.CodeStale:
		err = errs.Op(nil, nil, "extend %q: Redis has run a later Extend of the lease", t.K.Name)
	case codes[0] != protocol.CodeDone:
		lost = t.LostErr(codes[0])
	case !time.Now().Before(sent.Add(ttl - timing.Drift(ttl))):
		// The lease, shortened, ran out before the reply came.
		lost = errs.Op(errs.ErrLockLost, nil, "%q: its lease of %v ran out before the Extend's reply came", t.K.Name, ttl)
	default:
		t.ttl, t.lastErr, t.lengthen = ttl, nil, false
		t.setDeadline(sent.Add(ttl - timing.Drift(ttl)))
		t.due, t.slack = sent.Add(timing.RenewEvery(ttl)), timing.RenewSlack(ttl)
	}
	if !t.ended {
		r.reschedule(t)
	}
	r.mu.Unlock()
	switch {
	case err != nil:
		return err
	case lost != nil:
		r.Lose(t, lost)
		return errs.Op(errs.ErrNotHeld, lost, "extend")
	}
	if err := t.EndedErr("extend"); err != nil {
		return err
	}
	r.extended(t)
	return nil
}

// extended reports a renewal or extension of t.
func (r *Renewer) extended(t *Term) {
	r.events.Extended(t)
}

// Stop ends renewal, waits for the goroutine and every renewal call in
// flight, and returns the terms that have not ended, given up (Held is
// false): the caller releases them.
func (r *Renewer) Stop() []*Term {
	r.mu.Lock()
	r.stopped = true
	live := slices.Clone([]*Term(r.queue))
	for _, t := range live {
		t.givenUp.Store(true)
	}
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	return live
}

func (r *Renewer) run() {
	defer r.wg.Done()
	for {
		select {
		case <-r.ctx.Done():
			r.timer.Stop()
			return
		case <-r.timer.C:
		}
		r.tick()
	}
}

// tick ends the terms whose deadline passed and renews those that are due,
// or nearly (within their slack, to batch them with the others).
func (r *Renewer) tick() {
	now := time.Now()
	var lost, due []*Term
	r.mu.Lock()
	for len(r.queue) > 0 {
		t := r.queue[0]
		if !now.Before(t.deadline) {
			heap.Pop(&r.queue)
			t.ended = true
			lost = append(lost, t)
			continue
		}
		if !t.wakeDue || t.due.Sub(now) > t.slack {
			break
		}
		t.busy = make(chan struct{})
		due = append(due, t)
		t.setWake()
		heap.Fix(&r.queue, 0)
	}
	next := now.Add(time.Hour)
	if len(r.queue) > 0 {
		next = r.queue[0].wake()
	}
	r.armed = next
	r.timer.Reset(time.Until(next))
	r.mu.Unlock()

	for _, t := range lost {
		err := r.deadlineErr(t)
		r.lost(t, err)
		t.Ending.End(err)
	}
	if len(due) > 0 {
		r.renew(due)
	}
}

// deadlineErr is why t was lost at its deadline.
func (r *Renewer) deadlineErr(t *Term) error {
	r.mu.Lock()
	renew, lengthen, ttl, lastErr := t.renew, t.lengthen, t.ttl, t.lastErr
	r.mu.Unlock()
	switch {
	case lengthen:
		return errs.Op(errs.ErrLockLost, lastErr, "%q: granted by a release, but not lengthened before its grant lease ran out", t.K.Name)
	case !renew:
		return errs.Op(errs.ErrLockLost, nil, "%q: its lease of %v ran out", t.K.Name, ttl)
	case lastErr != nil:
		return errs.Op(errs.ErrLockLost, lastErr, "%q: not renewed before its deadline", t.K.Name)
	}
	return errs.Op(errs.ErrLockLost, nil, "%q: not renewed before its deadline", t.K.Name)
}

// renew renews due terms: those on one server (a node, or a Cluster's
// primary) one script call per maxBatch leases of one hash slot (on a
// Cluster; of any slot elsewhere), the calls in pipelines of up to maxBatch
// leases, each pipeline on a goroutine of its own: one round trip per
// maxBatch leases per server.
func (r *Renewer) renew(due []*Term) {
	slots := make(map[string]map[int][]*Term) // by server address
	for _, t := range due {
		addr, _ := r.shards.ShardOf(r.ctx, t.K.Tag) // "" if unknown: go-redis routes each call
		g := slots[addr]
		if g == nil {
			g = make(map[int][]*Term)
			slots[addr] = g
		}
		s := r.shards.Group(t.K.Tag)
		g[s] = append(g[s], t)
	}
	for _, groups := range slots {
		var pipes [][][]*Term // pipelines of script calls of terms
		var pipe [][]*Term
		size := 0
		for _, ts := range groups {
			for call := range slices.Chunk(ts, protocol.MaxBatch) {
				if size+len(call) > protocol.MaxBatch {
					pipes, pipe, size = append(pipes, pipe), nil, 0
				}
				pipe, size = append(pipe, call), size+len(call)
			}
		}
		pipes = append(pipes, pipe)
		// Each pipeline on a goroutine of its own, bounded by its leases'
		// deadlines: a call that stalls (a connection that stopped
		// answering) holds up no other lease's renewal.
		for _, calls := range pipes {
			r.wg.Go(func() { r.renewCalls(calls) })
		}
	}
}

// renewCalls renews calls, one script call each, in one pipeline, and
// schedules what follows. A pipeline without its reply after stallAfter
// frees its leases for another try on another connection (stalled), since
// go-redis may wait for a lost reply longer than the leases last; its reply,
// if it comes later, still counts for what it says (renewed).
func (r *Renewer) renewCalls(calls [][]*Term) {
	items := make([][]protocol.ExtendItem, len(calls))
	busy := make([][]chan struct{}, len(calls)) // each term's busy of this call
	var latest time.Time
	stall := time.Duration(math.MaxInt64)
	now := time.Now()
	r.mu.Lock()
	for i, batch := range calls {
		items[i] = make([]protocol.ExtendItem, len(batch))
		busy[i] = make([]chan struct{}, len(batch))
		for j, t := range batch {
			items[i][j] = protocol.ExtendItem{K: *t.K, Owner: t.Owner, TTL: t.ttl, Gen: t.gen, Fence: t.Fence, Lease: t}
			busy[i][j] = t.busy
			if t.deadline.After(latest) {
				latest = t.deadline
			}
			stall = min(stall, t.stallAfter(now))
		}
	}
	r.mu.Unlock()
	// A call that waits for replicas, or for a RedLock's nodes, takes up to
	// that wait by design.
	if slow := r.backend.Traits().Slow; slow > 0 {
		stall = max(stall, slow+stallMin)
	}
	// A reply that comes after every deadline in the batch is of no use.
	ctx, cancel := context.WithDeadline(r.ctx, latest)
	sent := time.Now()
	fired := make(chan struct{})
	timer := time.AfterFunc(stall, func() {
		defer close(fired)
		r.stalled(calls, busy)
	})
	rec := r.events.Record()
	codes, errs := r.backend.ExtendAll(ctx, items, rec)
	if !timer.Stop() {
		<-fired
	}
	cancel()
	if rec != nil {
		r.events.Recorded(rec)
	}
	for i, batch := range calls {
		r.renewed(batch, busy[i], items[i], sent, codes[i], errs[i])
	}
}

// stallAfter is how long a renewal of t may go unanswered before it is
// tried again on another request: half a renewal period, or a quarter of
// what is left of a grant lease, and at least stallMin.
func (t *Term) stallAfter(now time.Time) time.Duration {
	d := timing.RenewEvery(t.ttl) / 2
	if t.lengthen {
		d = min(d, t.deadline.Sub(now)/4)
	}
	return max(d, stallMin)
}

// stallMin is the shortest time a renewal may go unanswered before it is
// tried again.
const stallMin = 50 * time.Millisecond

// errRenewalStalled is a renewal's error while its reply is overdue.
var errRenewalStalled = errors.New("no reply to the renewal yet; trying again")

// stalled frees the leases of calls that its renewal (whose busy channels
// are busy) still holds, to be renewed again at once.
func (r *Renewer) stalled(calls [][]*Term, busy [][]chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	now := time.Now()
	r.log.Debug("dlock: renewal unanswered; trying again", "calls", len(calls), "first", calls[0][0].K.Name)
	for i, batch := range calls {
		for j, t := range batch {
			if t.ended || t.busy != busy[i][j] {
				continue
			}
			close(t.busy)
			t.busy = nil
			t.lastErr = errRenewalStalled
			t.due, t.slack = now, 0
			r.reschedule(t)
		}
	}
}

// renewed records the outcome of the renewal of batch, sent at sent; busy
// are the terms' busy channels when it was sent. A term whose renewal was
// given up as stalled meanwhile takes from it only what it proves: a lease
// renewed since sent, unless an Extend was sent since (its generation
// decides), or lost, unless its owner is unlocking it (its release decides).
func (r *Renewer) renewed(batch []*Term, busy []chan struct{}, items []protocol.ExtendItem, sent time.Time, codes []int64, err error) {
	var extended, failed []*Term
	var lost []loss
	r.mu.Lock()
	for i, t := range batch {
		mine := t.busy == busy[i]
		if mine {
			close(t.busy)
			t.busy = nil
		}
		var code int64
		if err == nil {
			code = codes[i]
		}
		switch t.renewal(mine, items[i], sent, code, err) {
		case renewalFailed:
			failed = append(failed, t)
			r.reschedule(t)
		case renewalProvesNothing:
			r.reschedule(t)
		case renewalDone:
			extended = append(extended, t)
			r.reschedule(t)
		case renewalLost:
			t.ended = true
			if t.index >= 0 {
				heap.Remove(&r.queue, int(t.index))
			}
			lost = append(lost, loss{t, t.LostErr(code)})
		}
	}
	r.mu.Unlock()
	r.report(failed, err, extended, lost)
}

// renewalOutcome is what a renewal's reply does to one of its terms.
type renewalOutcome int8

const (
	// renewalIgnored: nothing; the term ended, its owner is unlocking it,
	// or the try that replaced this one decides.
	renewalIgnored renewalOutcome = iota
	// renewalFailed: the request failed; the term is renewed again after a
	// while.
	renewalFailed
	// renewalProvesNothing: the reply is older than the lease's latest
	// Extend; the term is renewed again at once.
	renewalProvesNothing
	// renewalDone: the lease was renewed.
	renewalDone
	// renewalLost: Redis says the lease is not the owner's any more.
	renewalLost
)

// renewal decides what the reply to a renewal of t (code, or err), sent at
// sent as item, does to t, and records it in t's lease and schedule; the
// caller moves t in the queue, and ends it if lost. mine tells whether the
// renewal is t's current try: one given up as stalled is not. renewer.mu
// must be held.
func (t *Term) renewal(mine bool, item protocol.ExtendItem, sent time.Time, code int64, err error) renewalOutcome {
	switch {
	case t.ended:
		return renewalIgnored
	case t.retired:
		// Its owner is unlocking it: whatever Redis ran this renewal
		// after, the release tells whether the lease ended freed or lost.
		return renewalIgnored
	case err != nil && !mine:
		// The try that replaced this one decides; its error says more
		// than that this one was overdue.
		if t.lastErr == errRenewalStalled {
			t.lastErr = err
		}
		return renewalIgnored
	case err != nil:
		t.retryAfter(item.TTL, err)
		return renewalFailed
	case code != protocol.CodeDone && code != protocol.CodeStale:
		return renewalLost
	case item.Gen != t.gen || code == protocol.CodeStale:
		// An Extend sent since this renewal was, or run by Redis before it:
		// what this one proves of the lease's TTL, the Extend may have
		// undone.
		if !mine {
			return renewalIgnored
		}
		t.due, t.slack = time.Now(), 0
		return renewalProvesNothing
	}
	ttl := item.TTL
	d := sent.Add(ttl - timing.Drift(ttl))
	if !mine && (ttl != t.ttl || !d.After(t.deadline)) {
		// A later try renewed it already, or Lease.Extend set another TTL,
		// which Redis may have run before or after.
		return renewalIgnored
	}
	t.lastErr, t.lengthen = nil, false
	t.setDeadline(d)
	if mine || t.busy == nil {
		t.due, t.slack = sent.Add(timing.RenewEvery(ttl)), timing.RenewSlack(ttl)
	}
	return renewalDone
}

// retryAfter schedules the next renewal of t, whose renewal with ttl failed
// with err. renewer.mu must be held.
func (t *Term) retryAfter(ttl time.Duration, err error) {
	t.lastErr = err
	wait := timing.RetryDelay(ttl)
	if t.lengthen {
		// A grant lease: try again well before it runs out.
		wait = min(wait, time.Until(t.deadline)/4)
	}
	t.due, t.slack = time.Now().Add(wait), 0
}

// loss is a term lost, with why.
type loss struct {
	t   *Term
	err error
}

// report tells what a renewal did, off renewer.mu: the terms whose renewal
// failed with err, those extended, and those lost, which it ends.
func (r *Renewer) report(failed []*Term, err error, extended []*Term, lost []loss) {
	if len(failed) > 0 {
		if r.ctx.Err() != nil {
			return // stopping
		}
		r.log.Warn("dlock: renewal failed, will retry", "leases", len(failed), "first", failed[0].K.Name, "err", err)
		r.events.ExtendFailed(failed, err)
	}
	for _, t := range extended {
		r.extended(t)
	}
	for _, l := range lost {
		r.lost(l.t, l.err)
		l.t.Ending.End(l.err)
	}
}

// termQueue is a min-heap of terms by wake (container/heap).
type termQueue []*Term

func (q termQueue) Len() int           { return len(q) }
func (q termQueue) Less(i, j int) bool { return q[i].wake().Before(q[j].wake()) }
func (q termQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = int32(i), int32(j)
}
func (q *termQueue) Push(x any) {
	t := x.(*Term)
	t.index = int32(len(*q))
	*q = append(*q, t)
}
func (q *termQueue) Pop() any {
	old := *q
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*q = old[:len(old)-1]
	return t
}

// TTLOf returns t's TTL.
func (r *Renewer) TTLOf(t *Term) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return t.ttl
}

// DeadlineOf returns t's local deadline.
func (r *Renewer) DeadlineOf(t *Term) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return t.deadline
}
