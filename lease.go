package dlock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Lease is one successful acquisition of a lock: the handle its holder keeps
// to release it, read its fence and learn whether it is still held.
//
// A Lease is safe for concurrent use. Unlock may be called from any goroutine,
// not only the one that acquired it; ownership is not tied to goroutines.
//
// While a Lease is held its lock is renewed in the background (unless the
// lock was made WithoutRenewal). If the lease is lost anyway (another owner
// took the lock after it expired, or renewal failed until the local deadline)
// Done is closed and Err matches ErrLockLost. A lease can always be lost
// without the holder noticing in time (a paused process notices nothing); use
// Fence to let the protected resource reject a stale holder.
type Lease struct {
	h         *hold
	reentered bool // re-entered an existing hold; Unlock gives back one hold count
	unlocked  atomic.Bool
}

// Name returns the lock's name.
func (l *Lease) Name() string { return l.h.k.name }

// Fence returns the lease's fencing token: a number that is strictly greater
// than that of every earlier acquisition of the same lock name, by any holder,
// in any process. A re-entered Lease has the fence of the hold it re-entered.
// Hand it to the resource the lock protects, and have the resource reject any
// write whose fence is lower than the highest it has accepted.
func (l *Lease) Fence() int64 { return l.h.fence }

// Done returns a channel that is closed when the lease ends: when it is lost,
// when its last hold is unlocked, or when the Client is closed.
func (l *Lease) Done() <-chan struct{} { return l.h.ctx.Done() }

// Err returns nil while the lease is held. After Done is closed it returns why:
// an error matching ErrLockLost if the lease was lost, ErrNotHeld if it was
// unlocked, ErrClosed if the Client was closed.
func (l *Lease) Err() error {
	if l.h.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.h.ctx)
}

// Context returns a copy of parent that is cancelled when parent is, or when
// the lease ends (context.Cause then tells why, as Err does), and that carries
// the lease for re-entry: a Lock or TryLock of the same name on the same Client
// with this context (or one derived from it) re-enters the held lock instead
// of waiting for it. Call cancel when done, as with context.WithCancel. A nil
// parent is taken as context.Background().
func (l *Lease) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancelCause := context.WithCancelCause(parent)
	stop := context.AfterFunc(l.h.ctx, func() { cancelCause(context.Cause(l.h.ctx)) })
	ctx = context.WithValue(ctx, heldKey{}, &heldEntry{h: l.h, next: heldIn(parent)})
	return ctx, func() {
		stop()
		cancelCause(context.Canceled)
	}
}

// Unlock gives the lock back: the hold this Lease stands for is released, and
// when it was the last hold of its owner the lock becomes free and one waiter
// is woken. Renewal has stopped before Unlock sends anything to Redis, so a
// lock given up is never renewed again, whatever happens next.
//
// Unlock still works when ctx is already cancelled: the release runs with ctx's
// values under a timeout of its own. A second Unlock of the same Lease, or an
// Unlock after the lease ended, returns an error matching ErrNotHeld (and
// ErrLockLost if the lease had been lost) and changes nothing in Redis. If
// Redis could not be reached, the error says so; the Lease counts as unlocked
// all the same, and the Client keeps trying to release the lock in the
// background until it succeeds or the lease's TTL has run out (after which
// Redis has freed the lock by itself), so there is nothing to retry.
func (l *Lease) Unlock(ctx context.Context) error {
	if l == nil || l.h == nil {
		return errors.New("dlock: Unlock of a nil Lease")
	}
	h := l.h
	if ctx == nil {
		return fmt.Errorf("dlock: unlock %q: nil context", h.k.name)
	}
	if !l.unlocked.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: unlock %q: already unlocked", ErrNotHeld, h.k.name)
	}
	return h.unlock(ctx)
}

// Release gives the lease back, as Unlock does; it reads better for the
// permits of a Semaphore.
func (l *Lease) Release(ctx context.Context) error { return l.Unlock(ctx) }

// Extend sets the lease to expire ttl from now, and makes ttl the lease's TTL
// for the renewals that follow. It is one round trip. For a lease made
// WithoutRenewal, it is how the holder asks for more time; a ttl shorter than
// what is left shortens the lease. If the lease was found lost, the error
// matches ErrNotHeld and ErrLockLost.
//
// Extends of one lease, and its renewals, reach Redis one at a time, so the
// newest intent is what Redis keeps; while one is in flight the lease counts
// as ending no later than the shorter of the old and the new TTL allow.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil || l.h == nil {
		return errors.New("dlock: Extend of a nil Lease")
	}
	h := l.h
	if ctx == nil {
		return fmt.Errorf("dlock: extend %q: nil context", h.k.name)
	}
	if ttl < MinTTL {
		return fmt.Errorf("dlock: extend %q by %v: the TTL must be at least %v", h.k.name, ttl, MinTTL)
	}
	h.extMu.Lock()
	defer h.extMu.Unlock()
	if err := h.endedErr("extend"); err != nil {
		return err
	}
	sent := time.Now()
	h.sending(sent, ttl)
	codes, err := h.c.extend(ctx, []extendItem{{k: h.k, owner: h.owner, ttl: ttl, exact: true}})
	if err != nil {
		// The renewer may have passed h over while this was in flight.
		h.c.ren.requeue(h, time.Now(), 0)
		return err
	}
	if codes[0] != codeDone {
		lost := h.lostErr(codes[0])
		h.lose(lost)
		return fmt.Errorf("%w: extend: %w", ErrNotHeld, lost)
	}
	if !h.extended(sent, ttl) {
		return h.endedErr("extend")
	}
	h.c.ren.requeue(h, sent.Add(ttl/3), ttl/6)
	h.report(func(f *Hooks) {
		if f.Extended != nil {
			f.Extended(h.k.name)
		}
	})
	return nil
}

// TTL returns how long the lock has left before it expires, as Redis sees it.
// If the lease is no longer held, the error matches ErrNotHeld.
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil || l.h == nil {
		return 0, errors.New("dlock: TTL of a nil Lease")
	}
	h := l.h
	if ctx == nil {
		return 0, fmt.Errorf("dlock: ttl %q: nil context", h.k.name)
	}
	if err := h.endedErr("ttl"); err != nil {
		return 0, err
	}
	ms, err := scripts.ttl.Run(ctx, h.c.cmd, h.k.leaseKeys[:1], h.owner, h.k.kind.leaseType()).Int64()
	if err != nil {
		return 0, fmt.Errorf("dlock: ttl %q: %w", h.k.name, err)
	}
	switch {
	case ms == -3:
		return 0, fmt.Errorf("%w: ttl: %w", ErrNotHeld, h.lostErr(codeOther))
	case ms == -2:
		return 0, fmt.Errorf("%w: ttl: %w", ErrNotHeld, h.lostErr(codeGone))
	case ms < 0:
		return 0, fmt.Errorf("dlock: ttl %q: lock key has no expiry", h.k.name)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// heldLock is what doLocked needs of a Lease or a MultiLease.
type heldLock interface {
	Context(parent context.Context) (context.Context, context.CancelFunc)
	Unlock(ctx context.Context) error
}

// doLocked is every primitive's Do: it acquires with acquire, runs fn with a
// context derived from the lease (cancelled on loss, carrying it for
// re-entry), and unlocks, also when fn panics. It returns fn's error joined
// with Unlock's. what names the lock in the error for a nil fn.
func doLocked[L heldLock](ctx context.Context, what string, fn func(context.Context) error, acquire func(context.Context) (L, error)) (err error) {
	if fn == nil {
		return fmt.Errorf("dlock: Do %s: nil function", what)
	}
	l, err := acquire(ctx)
	if err != nil {
		return err
	}
	lctx, cancel := l.Context(ctx)
	defer func() {
		cancel()
		err = errors.Join(err, l.Unlock(ctx))
	}()
	return fn(lctx)
}

// errUnlocked is the cause of a lease's end by Unlock.
var errUnlocked = fmt.Errorf("%w: the lease was unlocked", ErrNotHeld)

// hold is the state shared by every Lease of one owner on one lock: the
// original acquisition and the re-entries made under it. It ends once, when
// its last hold is released, when it is lost, or when the Client closes.
type hold struct {
	c        *Client
	k        keys
	owner    string
	fence    int64
	renew    bool
	acquired time.Time

	ctx    context.Context // cancelled, with the reason as cause, when the hold ends
	cancel context.CancelCauseFunc
	timer  *time.Timer // fires at the local deadline

	// opMu serialises the round trips that change the hold count in Redis
	// (re-entry and release), so that the local count below stays exact.
	opMu sync.Mutex
	// extMu serialises the round trips that lengthen the lease (renewals and
	// Lease.Extend), so that replies cannot come back out of order and the
	// newest intent is the one Redis keeps.
	extMu sync.Mutex

	mu       sync.Mutex // guards the fields below
	holds    int        // the authoritative hold count
	ttl      time.Duration
	deadline time.Time // after this, without a renewal, the lease counts as lost
	lastErr  error     // the last renewal error, for the loss message
	ended    bool

	// Renewal schedule, guarded by the renewer's mutex.
	due   time.Time
	slack time.Duration // a renewal may run this much before due, to batch it with others
	index int           // position in the renewer's queue; -1 when not queued
}

// currentTTL returns the lease's TTL.
func (h *hold) currentTTL() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ttl
}

// drift is the allowance for the difference between the client's and Redis's
// clocks and for timer lateness: the Redlock rule of 1% of the TTL plus 2ms.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// newHold registers a freshly acquired lock: it starts the deadline timer and,
// if the lock renews, schedules its renewal. sent is when the acquire was sent,
// the latest moment Redis can have started the TTL.
func (c *Client) newHold(k keys, owner string, fence int64, ttl time.Duration, renew bool, sent time.Time) (*hold, error) {
	ctx, cancel := context.WithCancelCause(context.Background())
	h := &hold{
		c: c, k: k, owner: owner, fence: fence, renew: renew, acquired: sent,
		ctx: ctx, cancel: cancel,
		holds: 1, ttl: ttl, deadline: sent.Add(ttl - drift(ttl)),
		index: -1,
	}
	h.mu.Lock() // expire reads h.timer, and may run before the assignment
	h.timer = time.AfterFunc(time.Until(h.deadline), h.expire)
	h.mu.Unlock()
	if err := c.ren.add(h); err != nil {
		h.timer.Stop()
		cancel(err)
		return nil, err
	}
	return h, nil
}

// unlock releases one hold; the last one frees the lock.
func (h *hold) unlock(ctx context.Context) error {
	h.opMu.Lock()
	defer h.opMu.Unlock()
	if err := h.endedErr("unlock"); err != nil {
		return err
	}
	h.mu.Lock()
	holds, ttl := h.holds, h.ttl
	h.mu.Unlock()
	cctx, cancel := cleanupContext(ctx, ttl)
	defer cancel()

	if holds > 1 {
		// The client's count is the one that decides when the lock is freed:
		// this hold is given back whatever Redis answers, and a count that
		// failed to reach Redis is set right by the next one that does.
		h.mu.Lock()
		h.holds--
		h.mu.Unlock()
		code, err := h.c.release(cctx, h.k, h.owner, releaseOne, ttl, holds-1)
		switch {
		case err != nil:
			return fmt.Errorf("%w (the hold was given back; the lock stays held by its other holds)", err)
		case code == codeHeld:
			return nil
		}
		lost := h.lostErr(code)
		h.lose(lost)
		return fmt.Errorf("%w: unlock: %w", ErrNotHeld, lost)
	}

	// The last hold: the owner gives the lock up, so it is never renewed
	// again, whatever Redis answers.
	h.c.ren.remove(h)
	sent := time.Now()
	code, err := h.c.release(cctx, h.k, h.owner, releaseLast, ttl, 0)
	switch {
	case err != nil:
		h.c.log.Error("dlock: release failed; retrying in the background", "lock", h.k.name, "fence", h.fence, "err", err)
		h.end(errUnlocked, nil)
		h.c.behindOrNow(func() { h.releaseLater(ttl) })
		return fmt.Errorf("%w (the Client keeps trying in the background; Redis frees the lock by itself when its TTL runs out)", err)
	case code == codeDone:
		h.end(errUnlocked, func() {
			held := time.Since(h.acquired)
			h.c.log.Debug("dlock: released", "lock", h.k.name, "fence", h.fence, "held", held)
			if f := h.c.cfg.hooks; f != nil && f.Released != nil {
				f.Released(h.k.name, held)
			}
		})
		return nil
	case time.Since(sent) >= markerTrust:
		// The reply may come from a retry that ran after this release's
		// marker lapsed: whether this call freed the lock is unknown.
		err := fmt.Errorf("%w: unlock %q: the lock is free of this owner, but the reply took %v, too long to tell whether this call freed it or its lease had expired before",
			ErrNotHeld, h.k.name, time.Since(sent).Round(time.Millisecond))
		h.end(errUnlocked, nil)
		return err
	}
	lost := h.lostErr(code)
	h.lose(lost)
	return fmt.Errorf("%w: unlock: %w", ErrNotHeld, lost)
}

// releaseLater retries the release of an ended hold whose Unlock could not
// reach Redis, every retryDelay, until it succeeds, Redis says the lock is no
// longer this owner's, or the lease's local deadline passes (Redis then frees
// the lock by itself). Once the Client closes, it makes one last attempt.
func (h *hold) releaseLater(ttl time.Duration) {
	h.mu.Lock()
	deadline := h.deadline
	h.mu.Unlock()
	timer := time.NewTimer(retryDelay(ttl))
	defer timer.Stop()
	for {
		closing := false
		select {
		case <-timer.C:
		case <-h.c.closing:
			closing = true
		}
		if !time.Now().Before(deadline) {
			h.c.log.Info("dlock: release not retried: the lease has expired by now", "lock", h.k.name, "fence", h.fence)
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		_, err := h.c.release(ctx, h.k, h.owner, releaseLast, ttl, 0)
		cancel()
		if err == nil {
			h.c.log.Info("dlock: released in the background", "lock", h.k.name, "fence", h.fence)
			return
		}
		if closing {
			h.c.log.Warn("dlock: release failed; Redis frees the lock when its TTL runs out", "lock", h.k.name, "fence", h.fence, "err", err)
			return
		}
		timer.Reset(retryDelay(ttl))
	}
}

// reenter adds one hold in Redis for a Lock made with a context carrying h.
func (h *hold) reenter(ctx context.Context) (*Lease, error) {
	h.opMu.Lock()
	defer h.opMu.Unlock()
	if err := h.endedErr("re-enter"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotAcquired, err)
	}
	h.mu.Lock()
	ttl, holds := h.ttl, h.holds
	h.mu.Unlock()
	r, err := h.c.reenter(ctx, h.k, h.owner, ttl, holds+1)
	if err != nil {
		// If the reply was lost the count in Redis may be one too high; the
		// next count sent, or the last release, sets it right.
		return nil, err
	}
	if !r.reentered {
		lost := h.lostErr(codeGone)
		h.lose(lost)
		return nil, fmt.Errorf("%w: re-enter: %w", ErrNotAcquired, lost)
	}
	h.mu.Lock()
	h.holds++
	h.mu.Unlock()
	return &Lease{h: h, reentered: true}, nil
}

// endedErr returns nil while h is held, else an error matching ErrNotHeld and
// the reason h ended.
func (h *hold) endedErr(op string) error {
	if h.ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("%w: %s %q: %w", ErrNotHeld, op, h.k.name, context.Cause(h.ctx))
}

// sending records that a request to make the lease lapse ttl from now is
// being sent at sent. Redis may carry it out at any moment from now on, so
// until its reply tells otherwise the lease counts as ending no later than it
// would under the request: a request that shortens the lease shortens the
// local deadline at once. h.extMu must be held.
func (h *hold) sending(sent time.Time, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d := sent.Add(ttl - drift(ttl)); !h.ended && d.Before(h.deadline) {
		h.deadline = d
		h.timer.Reset(time.Until(d))
	}
}

// extended records a successful renewal or extension sent at sent with ttl.
// It reports false if the hold had ended. h.extMu must be held, so that no
// other extension is in flight: this one is what Redis holds now.
func (h *hold) extended(sent time.Time, ttl time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return false
	}
	h.ttl = ttl
	h.deadline = sent.Add(ttl - drift(ttl))
	h.lastErr = nil
	h.timer.Reset(time.Until(h.deadline))
	return true
}

// expire runs at the local deadline: unless a renewal moved it meanwhile, the
// lease is lost.
func (h *hold) expire() {
	h.mu.Lock()
	if h.ended || time.Now().Before(h.deadline) {
		h.mu.Unlock()
		return
	}
	ttl, lastErr := h.ttl, h.lastErr
	h.mu.Unlock()
	var err error
	switch {
	case !h.renew:
		err = fmt.Errorf("%w: %q: its fixed lease of %v ran out", ErrLockLost, h.k.name, ttl)
	case lastErr != nil:
		err = fmt.Errorf("%w: %q: not renewed before its deadline: %w", ErrLockLost, h.k.name, lastErr)
	default:
		err = fmt.Errorf("%w: %q: not renewed before its deadline", ErrLockLost, h.k.name)
	}
	h.lose(err)
}

// lostErr describes a script's "not yours" answer.
func (h *hold) lostErr(code int64) error {
	if code == codeOther {
		return fmt.Errorf("%w: %q is held by another owner", ErrLockLost, h.k.name)
	}
	return fmt.Errorf("%w: %q expired", ErrLockLost, h.k.name)
}

// lose ends h as lost, once, and tells the log and the hooks.
func (h *hold) lose(err error) {
	h.end(err, func() {
		h.c.log.Error("dlock: lease lost", "lock", h.k.name, "fence", h.fence, "err", err)
		h.report(func(f *Hooks) {
			if f.Lost != nil {
				f.Lost(h.k.name, err)
			}
		})
	})
}

// report hands call to the Client's hook dispatcher, if the Client has hooks:
// hooks of events that the Client's background work may observe run off the
// goroutines that do that work.
func (h *hold) report(call func(*Hooks)) {
	if f := h.c.cfg.hooks; f != nil {
		h.c.events.post(func() { call(f) })
	}
}

// end ends h with cause, once: it stops the deadline timer and the renewal,
// runs report (if not nil), and then closes Done, so that whoever sees Done
// closed also sees what report recorded.
func (h *hold) end(cause error, report func()) {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended = true
	h.timer.Stop()
	h.mu.Unlock()
	h.c.ren.remove(h)
	if report != nil {
		report()
	}
	h.cancel(cause)
}

// heldKey is the context key under which Lease.Context stores held leases.
type heldKey struct{}

// heldEntry is one lease carried by a context, linked to those of the
// contexts it was derived from.
type heldEntry struct {
	h    *hold
	next *heldEntry
}

func heldIn(ctx context.Context) *heldEntry {
	e, _ := ctx.Value(heldKey{}).(*heldEntry)
	return e
}

// find returns the live hold of lock k on Client c carried by e's chain, if
// any: a hold that has ended is no longer anyone's to re-enter. The kind must
// match too: an RWMutex's read and write holds share its keys.
func (e *heldEntry) find(c *Client, k keys) *hold {
	for ; e != nil; e = e.next {
		if e.h.c == c && e.h.k.tag == k.tag && e.h.k.kind == k.kind && e.h.ctx.Err() == nil {
			return e.h
		}
	}
	return nil
}

// maxBatch is the most leases renewed by one script call.
const maxBatch = 100

// renewer keeps every hold of a Client: it renews those that renew, all with
// one goroutine, batching the leases that are due into one script call per
// maxBatch leases, and it hands Close the holds still live.
type renewer struct {
	c *Client

	mu      sync.Mutex
	live    map[*hold]struct{} // every hold not yet ended
	queue   holdQueue          // holds that renew, by due time
	armed   time.Time          // when the goroutine's timer fires next
	started bool
	stopped bool

	kick   chan struct{} // the queue's head changed
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine exits
}

func newRenewer(c *Client) *renewer {
	ctx, cancel := context.WithCancel(context.Background())
	return &renewer{
		c: c, live: make(map[*hold]struct{}),
		kick: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{}),
	}
}

// add registers h, and schedules its first renewal at TTL/3.
func (r *renewer) add(h *hold) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return fmt.Errorf("%w: lock %q acquired while closing", ErrClosed, h.k.name)
	}
	r.live[h] = struct{}{}
	if !h.renew {
		return nil
	}
	h.due, h.slack = h.acquired.Add(h.ttl/3), h.ttl/6
	heap.Push(&r.queue, h)
	if !r.started {
		r.started = true
		r.armed = h.due
		go r.run()
	}
	r.wakeFor(h)
	return nil
}

// remove forgets h.
func (r *renewer) remove(h *hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.live, h)
	if h.index >= 0 {
		heap.Remove(&r.queue, h.index)
	}
}

// wakeFor wakes the goroutine if h is due before its timer fires; otherwise
// the timer finds h in time and nobody needs waking (the common case, which
// keeps Lock from waking a second thread). r.mu must be held.
func (r *renewer) wakeFor(h *hold) {
	if !h.due.Before(r.armed) {
		return
	}
	r.armed = h.due
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// stop ends renewal, waits for the goroutine, and returns the holds still live.
func (r *renewer) stop() []*hold {
	r.mu.Lock()
	r.stopped = true
	started := r.started
	holds := make([]*hold, 0, len(r.live))
	for h := range r.live {
		holds = append(holds, h)
	}
	r.mu.Unlock()
	r.cancel()
	if started {
		<-r.done
	}
	return holds
}

func (r *renewer) run() {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		wait := time.Hour
		if len(r.queue) > 0 {
			wait = time.Until(r.queue[0].due)
		}
		r.armed = time.Now().Add(wait)
		r.mu.Unlock()
		timer.Reset(max(wait, 0))
		select {
		case <-r.ctx.Done():
			return
		case <-r.kick:
			continue
		case <-timer.C:
		}
		r.renewDue()
	}
}

// renewDue renews every queued hold that is due, or nearly due, in batches.
// A hold whose Lease.Extend is in flight is left to it: Extend requeues it.
func (r *renewer) renewDue() {
	now := time.Now()
	var due []*hold
	r.mu.Lock()
	for len(r.queue) > 0 && r.queue[0].due.Sub(now) <= r.queue[0].slack {
		h := heap.Pop(&r.queue).(*hold)
		if h.extMu.TryLock() {
			due = append(due, h)
		}
	}
	r.mu.Unlock()
	for len(due) > 0 {
		n := min(len(due), maxBatch)
		r.renewBatch(due[:n])
		due = due[n:]
	}
}

// renewBatch extends a batch of holds with one script call and requeues them.
// The caller holds each hold's extMu; renewBatch releases them.
func (r *renewer) renewBatch(batch []*hold) {
	defer func() {
		for _, h := range batch {
			h.extMu.Unlock()
		}
	}()
	items := make([]extendItem, len(batch))
	var latest time.Time
	for i, h := range batch {
		h.mu.Lock()
		items[i] = extendItem{k: h.k, owner: h.owner, ttl: h.ttl}
		latest = later(latest, h.deadline)
		h.mu.Unlock()
	}
	// A reply that comes after every deadline in the batch is of no use.
	ctx, cancel := context.WithDeadline(r.ctx, latest)
	defer cancel()
	sent := time.Now()
	codes, err := r.c.extend(ctx, items)
	if err != nil && r.ctx.Err() != nil {
		return // closing
	}
	for i, h := range batch {
		ttl := items[i].ttl
		switch {
		case err != nil:
			h.mu.Lock()
			h.lastErr = err
			h.mu.Unlock()
			r.c.log.Warn("dlock: renewal failed, will retry", "lock", h.k.name, "fence", h.fence, "err", err)
			h.report(func(f *Hooks) {
				if f.ExtendFailed != nil {
					f.ExtendFailed(h.k.name, err)
				}
			})
			r.requeue(h, time.Now().Add(retryDelay(ttl)), 0)
		case codes[i] == codeDone:
			if h.extended(sent, ttl) {
				h.report(func(f *Hooks) {
					if f.Extended != nil {
						f.Extended(h.k.name)
					}
				})
				r.requeue(h, sent.Add(ttl/3), ttl/6)
			}
		default:
			h.lose(h.lostErr(codes[i]))
		}
	}
}

// retryDelay is the pause before retrying a failed renewal.
func retryDelay(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 10*time.Millisecond), time.Second)
}

// requeue schedules h's next renewal at due (or up to slack before, to batch
// it with others), unless h ended or does not renew.
func (r *renewer) requeue(h *hold, due time.Time, slack time.Duration) {
	if !h.renew {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if _, ok := r.live[h]; !ok {
		return
	}
	h.due, h.slack = due, slack
	if h.index >= 0 {
		heap.Fix(&r.queue, h.index)
	} else {
		heap.Push(&r.queue, h)
	}
	r.wakeFor(h)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// holdQueue is a min-heap of holds by due time (container/heap).
type holdQueue []*hold

func (q holdQueue) Len() int           { return len(q) }
func (q holdQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q holdQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *holdQueue) Push(x any) {
	h := x.(*hold)
	h.index = len(*q)
	*q = append(*q, h)
}
func (q *holdQueue) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.index = -1
	*q = old[:len(old)-1]
	return h
}
