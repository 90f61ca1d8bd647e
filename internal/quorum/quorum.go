// Package quorum is the protocol layer of a RedLock: a protocol.Backend made
// of N member Backends, each a Redis deployment of its own, on which a lock
// is held when a majority of them hold it. Each request (acquire, release,
// extend, ttl) goes to every member at once, each member bounded by the
// per-node timeout, and the members' answers are combined here; the layers
// above see one Backend.
package quorum

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/timing"
)

// quorum is a RedLock: a backend made of member backends.
type quorum struct {
	members []Member
	need    int           // a majority of members
	timeout time.Duration // per member and request

	// busy counts, per owner and member, requests of an acquisition still
	// in flight after the attempt that sent them returned, and the undo
	// that follows them. A later attempt of the same owner skips such a
	// member: the undo could otherwise remove a hold that attempt counts.
	mu   sync.Mutex
	busy map[busyKey]int
	// ended holds the owners that gave their lock up (or their place in
	// line) while an answer of their acquisition was still out: that part,
	// when it comes, is undone, since the release may have reached its member
	// before the acquire did.
	ended map[string]bool
	// retaking holds, per owner and member, the retake in flight
	// (retake), closed when it is done: one at a time per owner and member,
	// and the release that gives the lock up waits for them.
	retaking map[busyKey]chan struct{}
	// doubts holds, per owner and member, the deadline (that member's
	// server time) of an acquire of owner whose outcome there is unknown:
	// a copy may still reach the member until then, so every release of
	// owner there passes it on (protocol.ReleaseArgs.Void). Each member
	// keeps its own clock, so the deadlines are kept apart, and dropped once
	// they cannot matter (doubtKeep).
	doubts map[busyKey]doubt

	wg sync.WaitGroup // every request to a member; Close waits for them
	// closing is closed when the Client's Close starts: an undo retried in
	// the background then makes its last try.
	closing <-chan struct{}
}

// New returns the RedLock of members, each request to a member
// bounded by timeout; closing is closed when its Client's Close starts.
func New(members []Member, timeout time.Duration, closing <-chan struct{}) protocol.Backend {
	return &quorum{members: members, need: len(members)/2 + 1, timeout: timeout,
		busy: make(map[busyKey]int), ended: make(map[string]bool), retaking: make(map[busyKey]chan struct{}),
		doubts: make(map[busyKey]doubt), closing: closing}
}

// Member is one of a RedLock's deployments: a single primary, whose
// fence the RedLock raises to the highest its majority holds.
type Member interface {
	protocol.Backend
	// RaiseFence makes owner's fence on k at least fence.
	RaiseFence(ctx context.Context, k protocol.Keys, owner string, fence int64, ttl time.Duration) (int64, error)
}

// doubt is an acquire's deadline on one member, and when it was noted here.
type doubt struct {
	deadline int64
	noted    time.Time
}

// doubtKeep is how long a doubt is kept after it was noted: its request's
// deadline has passed on the member by then, whatever its clock.
const doubtKeep = 2 * protocol.RequestTTL

// noteDoubt notes that an acquire of owner on member i may still reach it
// until deadline (AcquireResult.Doubt), if it is not 0, and drops the
// doubts that cannot matter any more.
func (q *quorum) noteDoubt(owner string, i int, deadline int64) {
	if deadline == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for k, d := range q.doubts {
		if time.Since(d.noted) > doubtKeep {
			delete(q.doubts, k)
		}
	}
	k := busyKey{owner, i}
	if d := q.doubts[k]; d.deadline < deadline {
		q.doubts[k] = doubt{deadline, time.Now()}
	}
}

// doubtOf returns the deadline of owner's acquire on member i whose outcome
// is unknown, 0 if none.
func (q *quorum) doubtOf(owner string, i int) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.doubts[busyKey{owner, i}].deadline
}

// Traits: the quorum bounds every request by the per-node timeout and
// returns at ctx's end by itself; a waiter is only told to try again (each
// member keeps a queue of its own), and administration needs a Client of
// each member's own.
func (q *quorum) Traits() protocol.Traits {
	return protocol.Traits{What: "a RedLock Client (it runs Mutex and MultiLock only, and is administered through a Client of each member)", CtxAware: true, Slow: q.timeout}
}

var _ protocol.Kinds = (*quorum)(nil)

// KindFor: only a Mutex runs on a RedLock, whose release tells the next
// waiter instead of granting (redMutexKind).
func (q *quorum) KindFor(k *protocol.Layout) *protocol.Layout {
	if k == protocol.MutexKind {
		return protocol.RedMutexKind
	}
	return nil
}

// Settle waits for the requests to the slower members, and then for each
// member's own.
func (q *quorum) Settle() {
	q.wg.Wait()
	for _, m := range q.members {
		m.Settle()
	}
}

// Places returns where a channel is subscribed: on each member that can
// say where, a majority of which must confirm it.
func (q *quorum) Places(ctx context.Context, channel string) (protocol.Placement, error) {
	p := protocol.Placement{At: make([]protocol.Place, 0, len(q.members)), Need: q.need, Apart: true}
	for i, m := range q.members {
		mp, err := m.Places(ctx, channel)
		if err != nil {
			continue // the member is down: the others are enough, or not
		}
		for _, at := range mp.At {
			p.At = append(p.At, protocol.Place{Addr: strconv.Itoa(i) + "/" + at.Addr, Client: at.Client})
		}
	}
	if len(p.At) < q.need {
		p.Short = fmt.Errorf("%d of %d nodes reachable, a majority is %d", len(p.At), len(q.members), q.need)
	}
	return p, nil
}

// Announce writes the record on every member, each within the per-node
// timeout, and returns the first failure: a Client of a member's own, which
// Inspect needs, reads it there.
func (q *quorum) Announce(ctx context.Context, key, value string, ttl time.Duration) error {
	failed := make([]error, len(q.members))
	var wg sync.WaitGroup
	for i, m := range q.members {
		wg.Go(func() {
			mctx, cancel := context.WithTimeout(ctx, q.timeout)
			defer cancel()
			failed[i] = m.Announce(mctx, key, value, ttl)
		})
	}
	wg.Wait()
	return errors.Join(failed...)
}

// Extend extends items on a majority of the members (extendAll).
func (q *quorum) Extend(ctx context.Context, items []protocol.ExtendItem) ([]int64, error) {
	codes, errs := q.ExtendAll(ctx, [][]protocol.ExtendItem{items}, nil)
	return codes[0], errs[0]
}

type busyKey struct {
	owner  string
	member int
}

// memberReply is one member's answer to a request.
type memberReply[T any] struct {
	i   int
	v   T
	err error
}

// fan is one request to every member: call is what each member, m, the
// i-th, is sent (skip, if not nil, names members not to send it to); decide
// gets each answer as it comes, on the caller's goroutine, and returns true
// once the outcome is known. An answer that comes after fanOut returned goes to late,
// if not nil, on a goroutine Close waits for; leftBehind, if not nil, is
// called before fanOut returns for each member whose answer will go there.
type fan[T any] struct {
	skip       func(i int) bool
	call       func(ctx context.Context, i int, m Member) (T, error)
	decide     func(r memberReply[T]) bool
	late       func(r memberReply[T])
	leftBehind func(i int)
}

// fanOut sends f's request to every member at once and passes the answers
// to f.decide until it returns true, every member sent it has answered, the
// per-node timeout has passed or ctx has ended. It returns the answers
// decide saw, by member; a member not sent the request, or not heard from,
// has errs.ErrNodeTimeout, or ctx's error if ctx ended. The requests are bounded
// by the per-node timeout, not by ctx or fanOut's return: one that is still
// running when the outcome is known completes (a release or renewal reaches
// the slower members too) and its answer goes to f.late.
func fanOut[T any](ctx context.Context, q *quorum, f fan[T]) []memberReply[T] {
	g := &gathering[T]{q: q, f: f, ch: make(chan memberReply[T], len(q.members)),
		out: make([]memberReply[T], len(q.members)), called: make([]bool, len(q.members)), seen: make([]bool, len(q.members))}
	pending := g.scatter(context.WithoutCancel(ctx))
	defer g.leave()
	g.gather(ctx, pending)
	return g.out
}

// gathering is one fanOut in progress.
type gathering[T any] struct {
	q *quorum
	f fan[T]

	// Set by scatter, never changed after: which members were sent the
	// request.
	called []bool

	// Only the caller's goroutine uses these: the answers read, by member,
	// and which members' answers were read.
	out  []memberReply[T]
	seen []bool

	// mu orders returned and the sends on ch: an answer goes to ch, for the
	// caller, until the caller leaves, and to f.late after.
	mu       sync.Mutex
	returned bool
	ch       chan memberReply[T] // room for every member: a send never blocks
}

// scatter sends the request to every member not skipped, each on a
// goroutine q.wg counts, each bounded by the per-node timeout from base. It
// returns how many it sent it to.
func (g *gathering[T]) scatter(base context.Context) int {
	pending := 0
	for i := range g.q.members {
		g.out[i] = memberReply[T]{i: i, err: errs.ErrNodeTimeout}
		if g.called[i] = g.f.skip == nil || !g.f.skip(i); g.called[i] {
			pending++
		}
	}
	for i, m := range g.q.members {
		if !g.called[i] {
			continue
		}
		g.q.wg.Go(func() {
			mctx, cancel := context.WithTimeout(base, g.q.timeout)
			v, err := g.f.call(mctx, i, m)
			cancel()
			g.answer(memberReply[T]{i: i, v: v, err: err})
		})
	}
	return pending
}

// answer hands a member's answer to the caller, or, once the caller has
// left, to f.late on the member's goroutine.
func (g *gathering[T]) answer(r memberReply[T]) {
	g.mu.Lock()
	if !g.returned {
		g.ch <- r
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	if g.f.late != nil {
		g.f.late(r)
	}
}

// gather reads up to pending answers into out, passing each to f.decide,
// until it returns true, the per-node timeout passes or ctx ends (which
// marks the members not heard from with ctx's error).
func (g *gathering[T]) gather(ctx context.Context, pending int) {
	timer := time.NewTimer(g.q.timeout)
	defer timer.Stop()
	for ; pending > 0; pending-- {
		select {
		case r := <-g.ch:
			g.out[r.i] = r
			g.seen[r.i] = true
			if g.f.decide(r) {
				return
			}
		case <-timer.C:
			return
		case <-ctx.Done():
			for i := range g.out {
				if !g.seen[i] {
					g.out[i].err = ctx.Err()
				}
			}
			return
		}
	}
}

// leave ends the caller's part: from now on answers go to f.late. It tells
// f.leftBehind of each member sent the request whose answer was not read,
// and passes the answers sent before it and not read to f.late, each on a
// goroutine q.wg counts.
func (g *gathering[T]) leave() {
	g.mu.Lock()
	g.returned = true
	if g.f.leftBehind != nil {
		for i := range g.called {
			if g.called[i] && !g.seen[i] {
				g.f.leftBehind(i)
			}
		}
	}
	g.mu.Unlock()
	for {
		select {
		case r := <-g.ch:
			if g.f.late != nil {
				g.q.wg.Go(func() { g.f.late(r) })
			}
		default:
			return
		}
	}
}

// errsOf returns the errors of replies.
func errsOf[T any](replies []memberReply[T]) []error {
	var errs []error
	for _, r := range replies {
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	return errs
}

// short is the error of a request that fewer than a majority answered.
func (q *quorum) short(answered int, failed []error) error {
	return &errs.QuorumError{Answered: answered, Need: q.need, Nodes: len(q.members), Errs: failed}
}

// markBusy counts a request of owner's acquisition to member i that
// outlived its attempt; unbusy ends it.
func (q *quorum) markBusy(owner string, i int) {
	q.mu.Lock()
	q.busy[busyKey{owner, i}]++
	q.mu.Unlock()
}

func (q *quorum) unbusy(owner string, i int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := busyKey{owner, i}
	if q.busy[k]--; q.busy[k] <= 0 {
		delete(q.busy, k)
	}
	if !q.busyOwner(owner) {
		delete(q.ended, owner)
	}
}

// busyOwner reports whether an acquisition of owner has an answer out. q.mu
// must be held.
func (q *quorum) busyOwner(owner string) bool {
	for i := range q.members {
		if q.busy[busyKey{owner, i}] > 0 {
			return true
		}
	}
	return false
}

// end records that owner gave its lock, or its place in line, up.
func (q *quorum) end(owner string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.busyOwner(owner) {
		q.ended[owner] = true
	}
}

// hasEnded reports whether owner gave its lock up since its acquisition.
func (q *quorum) hasEnded(owner string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ended[owner]
}

func (q *quorum) isBusy(owner string, i int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.busy[busyKey{owner, i}] > 0
}

// undoTimeout bounds the undo of a member's part of an acquisition that did
// not reach a majority.
func (q *quorum) undoTimeout() time.Duration { return max(q.timeout, time.Second) }

// undo gives back what owner may hold on member i after an acquisition sent
// at sent: its registration and, if it holds the lock there, the lock
// (passed on to that member's next waiter). If the member does not answer,
// the undo is retried in the background (retryRelease) until it does or the
// part's TTL from sent has run out, and owner's later attempts keep off the
// member until then. It runs on a goroutine q.wg counts.
func (q *quorum) undo(k protocol.Keys, owner string, i int, ttl time.Duration, sent time.Time) {
	release := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, q.undoTimeout())
		defer cancel()
		// Once the owner has ended, its acquire still on the way there
		// must take nothing; until then, it may try again there itself.
		var void int64
		if q.hasEnded(owner) {
			void = q.doubtOf(owner, i)
		}
		_, err := q.members[i].Release(ctx, k, protocol.ReleaseArgs{Owner: owner, Fence: protocol.NoFence, Mode: protocol.ReleaseLeave, TTL: ttl, Void: void})
		return err
	}
	if release(context.Background()) == nil {
		return
	}
	// The part may be there: left alone, it would count against every other
	// owner's majority for its whole TTL.
	q.markBusy(owner, i)
	q.wg.Go(func() {
		defer q.unbusy(owner, i)
		_ = timing.RetryRelease(q.closing, sent.Add(ttl), ttl, release)
	})
}

// Acquire takes k's lock on a majority of the members, or registers owner as
// a waiter on the members where it is held. The fence is the largest of the
// majority's, written to every member that may have less (raiseFence), and
// acquire returns once a majority has it, so that every later majority,
// which shares a member with that one, hands out a larger one. The lock
// counts as taken only if a majority took it and has its fence before the
// lease's validity (TTL less elapsed time and drift) ran out; otherwise every
// member's part is undone.
func (q *quorum) Acquire(ctx context.Context, k protocol.Keys, owner string, ttl, register time.Duration, x protocol.KindArgs) (protocol.AcquireResult, error) {
	a := &acquisition{q: q, k: k, owner: owner, ttl: ttl, sent: time.Now(),
		parts: make([]part, len(q.members)), decided: make(chan struct{})}
	defer close(a.decided)
	replies := fanOut(ctx, q, fan[protocol.AcquireResult]{
		skip: func(i int) bool { return q.isBusy(owner, i) },
		call: func(ctx context.Context, _ int, m Member) (protocol.AcquireResult, error) {
			return m.Acquire(ctx, k, owner, ttl, register, x)
		},
		decide: a.count,
		leftBehind: func(i int) {
			// Its outcome is unknown until its answer comes: a copy may reach
			// the member until a deadline no later than one it would give
			// a request now.
			q.noteDoubt(owner, i, protocol.RequestDeadline(q.members[i]))
			q.markBusy(owner, i)
		},
		late: a.late,
	})
	r, err := a.conclude(ctx, replies)
	// A member's acquire whose outcome is unknown: the caller, which ends
	// the owner with a release (that records it on those members), must
	// know that a copy is out.
	q.mu.Lock()
	for i := range q.members {
		r.Doubt = max(r.Doubt, q.doubts[busyKey{owner, i}].deadline)
	}
	q.mu.Unlock()
	return r, err
}

// acquisition is one Acquire of a RedLock.
type acquisition struct {
	// Set by Acquire, never changed.
	q     *quorum
	k     protocol.Keys
	owner string
	ttl   time.Duration
	sent  time.Time

	// The count of the answers read, on the caller's goroutine (count).
	won, held, failed int
	// parts marks what the acquisition may have left on each member: a
	// part it took (its answer was a fence), or one it may have taken (its
	// reply was an error, though the script may have run). A failed
	// acquisition undoes both.
	parts []part

	// decided is closed once the outcome is known; kept, set before that,
	// tells it to the answers that come late.
	decided chan struct{}
	kept    bool
}

// count records a member's answer, and reports whether the outcome is known:
// a majority took the lock, or too few are left that could.
func (a *acquisition) count(r memberReply[protocol.AcquireResult]) bool {
	a.q.noteDoubt(a.owner, r.i, r.v.Doubt)
	switch {
	case r.err != nil:
		a.failed++
		a.parts[r.i] = partUnknown
	case r.v.Fence > 0:
		a.won++
		a.parts[r.i] = partTaken
	default:
		a.held++
	}
	return a.won >= a.q.need || a.held+a.failed > len(a.q.members)-a.q.need
}

// late handles the answer of a member that came after the outcome was
// known: a part it may have left belongs to the lock if the acquire
// succeeded (renewals and the release go to every member); otherwise it is
// undone, and the owner's later attempts keep off that member until that is
// done.
func (a *acquisition) late(r memberReply[protocol.AcquireResult]) {
	a.q.noteDoubt(a.owner, r.i, r.v.Doubt)
	<-a.decided
	if (!a.kept || a.q.hasEnded(a.owner)) && (r.err != nil || r.v.Fence > 0) {
		a.q.undo(a.k, a.owner, r.i, a.ttl, a.sent)
	}
	a.q.unbusy(a.owner, r.i)
}

// conclude turns the answers read into Acquire's result: the lock taken, if
// a majority took it and has its fence in time; else, its parts undone, the
// wait if the lock is held, or the failure.
func (a *acquisition) conclude(ctx context.Context, replies []memberReply[protocol.AcquireResult]) (protocol.AcquireResult, error) {
	q := a.q
	if a.won >= q.need {
		return a.take(ctx, replies)
	}
	q.undoAll(a.k, a.owner, a.ttl, a.sent, a.parts)
	if a.won+a.held < q.need {
		return protocol.AcquireResult{}, errs.Op(errs.ErrNotAcquired, q.short(a.won+a.held, errsOf(replies)), "acquire %q", a.k.Name)
	}
	return a.wait(replies), nil
}

// take raises the fence of a lock a majority took, and keeps the lock if
// that is done within the lease's validity; otherwise it undoes it.
func (a *acquisition) take(ctx context.Context, replies []memberReply[protocol.AcquireResult]) (protocol.AcquireResult, error) {
	fence, err := a.q.raiseFenceAll(ctx, a.k, a.owner, a.ttl, replies)
	if err == nil && time.Since(a.sent) < a.ttl-timing.Drift(a.ttl) {
		a.kept = true
		return protocol.AcquireResult{Fence: fence}, nil
	}
	a.q.undoAll(a.k, a.owner, a.ttl, a.sent, a.parts)
	if err == nil {
		err = fmt.Errorf("a majority took %v to grant it, past the lease's validity", time.Since(a.sent).Round(time.Millisecond))
	}
	return protocol.AcquireResult{}, errs.Op(errs.ErrNotAcquired, err, "acquire %q", a.k.Name)
}

// wait is the result of an acquisition that found the lock held: by another
// owner on a majority, or split between owners, none with a majority. The
// wait is the shortest the holders told (a holder that undoes its part, or
// releases, tells this waiter sooner); after a split, plus a short random
// pause, so that owners that split it do not meet again.
func (a *acquisition) wait(replies []memberReply[protocol.AcquireResult]) protocol.AcquireResult {
	r := protocol.AcquireResult{Pttl: -time.Millisecond}
	for _, rep := range replies {
		if rep.err == nil && rep.v.Fence == 0 && rep.v.Pttl >= 0 && (r.Pttl < 0 || rep.v.Pttl < r.Pttl) {
			r.Pttl = rep.v.Pttl
		}
	}
	if a.won > 0 || a.held < a.q.need {
		r.Pttl = max(r.Pttl, 0) + time.Millisecond + rand.N(10*time.Millisecond)
	}
	return r
}

// part is what an acquisition may have left on a member.
type part int8

const (
	partNone    part = iota
	partTaken        // the member answered with a fence
	partUnknown      // the member's reply was an error: the script may have run
)

// undoAll undoes owner's parts of an acquisition sent at sent: on the
// members that took it at once, waiting for each one's first try; on those
// whose reply was an error in the background, since they may not answer for
// a while, keeping owner's later attempts off them until it is done.
func (q *quorum) undoAll(k protocol.Keys, owner string, ttl time.Duration, sent time.Time, parts []part) {
	var wg sync.WaitGroup
	for i, p := range parts {
		switch p {
		case partTaken:
			q.wg.Add(1)
			wg.Go(func() {
				defer q.wg.Done()
				q.undo(k, owner, i, ttl, sent)
			})
		case partUnknown:
			q.markBusy(owner, i)
			q.wg.Go(func() {
				defer q.unbusy(owner, i)
				q.undo(k, owner, i, ttl, sent)
			})
		}
	}
	wg.Wait()
}

// raiseFenceAll returns the largest fence of the members that granted the
// lock, after writing it to every member that may have less (raise_fence.lua
// says why every one): it fails unless a majority has it.
func (q *quorum) raiseFenceAll(ctx context.Context, k protocol.Keys, owner string, ttl time.Duration, replies []memberReply[protocol.AcquireResult]) (int64, error) {
	var fence int64
	for _, r := range replies {
		if r.err == nil {
			fence = max(fence, r.v.Fence)
		}
	}
	have, has := 0, make([]bool, len(q.members))
	for _, r := range replies {
		if r.err == nil && r.v.Fence == fence {
			have++
			has[r.i] = true
		}
	}
	if have >= q.need && !slices.Contains(has, false) {
		return fence, nil
	}
	raised := fanOut(ctx, q, fan[int64]{
		skip: func(i int) bool { return has[i] },
		call: func(ctx context.Context, _ int, m Member) (int64, error) {
			return m.RaiseFence(ctx, k, owner, fence, ttl)
		},
		decide: func(r memberReply[int64]) bool {
			if r.err == nil {
				have++
			}
			return have >= q.need
		},
	})
	if have >= q.need {
		return fence, nil
	}
	var failed []error
	for i, r := range raised {
		if !has[i] && r.err != nil {
			failed = append(failed, r.err)
		}
	}
	return 0, errs.Op(nil, q.short(have, failed), "raise the fence of %q to %d", k.Name, fence)
}

// Reenter adds a hold of owner on every member; it counts when a majority
// added it.
func (q *quorum) Reenter(ctx context.Context, k protocol.Keys, owner string, ttl time.Duration, count int, x protocol.KindArgs) (protocol.AcquireResult, error) {
	var done, gone int
	n := len(q.members)
	replies := fanOut(ctx, q, fan[protocol.AcquireResult]{
		call: func(ctx context.Context, _ int, m Member) (protocol.AcquireResult, error) {
			return m.Reenter(ctx, k, owner, ttl, count, x)
		},
		decide: func(r memberReply[protocol.AcquireResult]) bool {
			switch {
			case r.err != nil:
			case r.v.Reentered:
				done++
			default:
				gone++
			}
			return done >= q.need || gone > n-q.need
		},
	})
	switch {
	case done >= q.need:
		return protocol.AcquireResult{Reentered: true}, nil
	case gone > n-q.need:
		return protocol.AcquireResult{Gone: true}, nil
	}
	return protocol.AcquireResult{}, errs.Op(nil, q.short(done+gone, errsOf(replies)), "re-enter %q", k.Name)
}

// Release gives back owner's hold on every member; a release that gives the
// lock up (not releaseOne) first waits for the retakes of owner's lease in
// flight (awaitRetakes), so that it reaches each member after them. The
// result is the code a majority answered (codeDone, or codeHeld for
// releaseOne; codeAfter if part of that majority answered it); else, if the
// members that answered otherwise leave no majority that could have,
// codeOther if one of them has another owner, codeGone if not; else an
// error: too few answered to tell.
func (q *quorum) Release(ctx context.Context, k protocol.Keys, a protocol.ReleaseArgs) (protocol.Released, error) {
	owner, mode := a.Owner, a.Mode
	if mode != protocol.ReleaseOne {
		q.awaitRetakes(ctx, owner)
		q.end(owner)
	}
	n := len(q.members)
	var ok, after, not int
	retried := false
	replies := fanOut(ctx, q, fan[protocol.Released]{
		call: func(ctx context.Context, i int, m Member) (protocol.Released, error) {
			ma := a
			if mode != protocol.ReleaseOne {
				// The member's own deadline, in its own clock.
				ma.Void = q.doubtOf(owner, i)
			}
			return m.Release(ctx, k, ma)
		},
		decide: func(r memberReply[protocol.Released]) bool {
			switch {
			case r.err != nil:
			case r.v.Code == protocol.CodeDone || r.v.Code == protocol.CodeHeld:
				ok++
			case r.v.Code == protocol.CodeAfter:
				ok++
				after++
			default:
				not++
			}
			retried = retried || (r.err == nil && r.v.Retried)
			// A member where owner holds nothing but its fence is there (one
			// the acquire only raised the fence of) tells less than one that
			// released it: the answers of all are waited for then.
			return ok-after >= q.need || not > n-q.need
		},
	})
	if mode == protocol.ReleaseLeave {
		if ok+not == 0 {
			return protocol.Released{}, errs.Op(nil, q.short(0, errsOf(replies)), "release %q", k.Name)
		}
		return protocol.Released{Code: protocol.CodeDone}, nil
	}
	want := int64(protocol.CodeDone)
	if mode == protocol.ReleaseOne {
		want = protocol.CodeHeld
	}
	failed := slices.ContainsFunc(replies, func(r memberReply[protocol.Released]) bool { return r.err != nil })
	switch {
	case ok-after >= q.need:
		return protocol.Released{Code: want, Retried: retried}, nil
	case ok >= q.need && failed:
		// Too few released it to tell, and a member that did not answer
		// may have: its answer, on a try that reaches it, decides (not a
		// loss told from what the others show).
		return protocol.Released{}, errs.Op(nil, q.short(ok-after, errsOf(replies)), "release %q (found free of its owner on %d)", k.Name, after)
	case ok >= q.need:
		// Members where the lock is free of owner with its fence still
		// there (a retry of a release that ran, or a member the acquire
		// only raised the fence of) count when the caller finds the answer
		// came from a retry before the lease's deadline.
		return protocol.Released{Code: protocol.CodeAfter, Retried: retried}, nil
	case not > n-q.need:
		for _, r := range replies {
			if r.err == nil && r.v.Code == protocol.CodeOther {
				return protocol.Released{Code: protocol.CodeOther, Retried: retried}, nil
			}
		}
		return protocol.Released{Code: protocol.CodeGone, Retried: retried}, nil
	}
	return protocol.Released{}, errs.Op(nil, q.short(ok+not, errsOf(replies)), "release %q", k.Name)
}

// ExtendAll runs every call on every member, each member in one pipeline,
// and takes each lease again on a member that answered that it is gone there
// (retakeGone), counting that member's answer once that is done.
// A lease is extended when a majority extended it; it is lost (with the code
// of a member that refused it) when the refusals leave no majority that
// could have; it is stale (codeStale) when the refusals and the members
// that ran a later Extend leave none; otherwise its call fails, to be tried
// again.
// A record is not written with the round (rec.Sent stays false): the caller
// writes it with Announce, on every member.
func (q *quorum) ExtendAll(ctx context.Context, calls [][]protocol.ExtendItem, _ *protocol.Record) ([][]int64, []error) {
	n := len(q.members)
	ok := make([][]int, len(calls))
	not := make([][]int, len(calls))
	stale := make([][]int, len(calls))
	for i, items := range calls {
		ok[i], not[i], stale[i] = make([]int, len(items)), make([]int, len(items)), make([]int, len(items))
	}
	settled := func() bool {
		for i := range calls {
			for j := range calls[i] {
				if ok[i][j] < q.need && not[i][j]+stale[i][j] <= n-q.need {
					return false
				}
			}
		}
		return true
	}
	type answer struct {
		codes [][]int64
		errs  []error
	}
	replies := fanOut(ctx, q, fan[answer]{
		call: func(ctx context.Context, i int, m Member) (answer, error) {
			codes, errs := m.ExtendAll(ctx, calls, nil)
			q.retakeGone(ctx, i, calls, codes, errs)
			return answer{codes, errs}, nil
		},
		decide: func(r memberReply[answer]) bool {
			for i := range calls {
				if r.v.errs[i] != nil {
					continue
				}
				for j, c := range r.v.codes[i] {
					switch c {
					case protocol.CodeDone:
						ok[i][j]++
					case protocol.CodeStale:
						stale[i][j]++
					default:
						not[i][j]++
					}
				}
			}
			return settled()
		},
	})
	codes, callErrs := make([][]int64, len(calls)), make([]error, len(calls))
	for i, items := range calls {
		codes[i] = make([]int64, len(items))
		for j := range items {
			switch {
			case ok[i][j] >= q.need:
				codes[i][j] = protocol.CodeDone
			case not[i][j] > n-q.need:
				codes[i][j] = protocol.CodeGone
				for _, r := range replies {
					if r.err == nil && r.v.errs[i] == nil && r.v.codes[i][j] == protocol.CodeOther {
						codes[i][j] = protocol.CodeOther
					}
				}
			case not[i][j]+stale[i][j] > n-q.need:
				codes[i][j] = protocol.CodeStale
			case callErrs[i] == nil:
				var merrs []error
				for _, r := range replies {
					switch {
					case r.err != nil:
						merrs = append(merrs, r.err)
					case r.v.errs[i] != nil:
						merrs = append(merrs, r.v.errs[i])
					}
				}
				callErrs[i] = errs.Op(nil, q.short(ok[i][j]+not[i][j], merrs), "extend %d leases", len(items))
			}
		}
	}
	return codes, callErrs
}

// TTL returns how long a majority of the members still hold owner's lease:
// the need-th longest time left among those that hold it.
func (q *quorum) TTL(ctx context.Context, k protocol.Keys, owner string) (time.Duration, int64, error) {
	type left struct {
		d    time.Duration
		code int64
	}
	replies := fanOut(ctx, q, fan[left]{
		call: func(ctx context.Context, _ int, m Member) (left, error) {
			d, code, err := m.TTL(ctx, k, owner)
			return left{d, code}, err
		},
		decide: func(memberReply[left]) bool { return false },
	})
	var lefts []time.Duration
	not, other := 0, false
	for _, r := range replies {
		switch {
		case r.err != nil:
		case r.v.code == protocol.CodeDone:
			lefts = append(lefts, r.v.d)
		default:
			not++
			other = other || r.v.code == protocol.CodeOther
		}
	}
	switch {
	case len(lefts) >= q.need:
		// Longest first; no expiry (-1ms) is the longest.
		key := func(d time.Duration) time.Duration {
			if d < 0 {
				return math.MaxInt64
			}
			return d
		}
		slices.SortFunc(lefts, func(a, b time.Duration) int { return cmp.Compare(key(b), key(a)) })
		return lefts[q.need-1], protocol.CodeDone, nil
	case not > len(q.members)-q.need && other:
		return 0, protocol.CodeOther, nil
	case not > len(q.members)-q.need:
		return 0, protocol.CodeGone, nil
	}
	return 0, 0, errs.Op(nil, q.short(len(lefts)+not, errsOf(replies)), "ttl %q", k.Name)
}

// EvictionPolicy returns the first member's policy that is not noeviction,
// or noeviction; known is false if a member would not tell.
func (q *quorum) EvictionPolicy(ctx context.Context) (string, bool, error) {
	policy, known := "noeviction", true
	for i, m := range q.members {
		p, ok, err := m.EvictionPolicy(ctx)
		switch {
		case err != nil:
			return "", false, errs.Op(nil, err, "node %d", i)
		case !ok:
			known = false
		case p != "noeviction":
			return p, true, nil
		}
	}
	return policy, known, nil
}

// retakeGone takes the lock again, on member i, for each lease whose renewal
// there found it gone (codes, errs: the member's answer to calls), and puts
// the code of each retake in codes: a lease renewed across restarts of
// members without persistence, one after the other, keeps its majority. A
// lease is taken again only while its owner holds it (ExtendItem.Lease), and
// at most retakesAtOnce at once.
func (q *quorum) retakeGone(ctx context.Context, i int, calls [][]protocol.ExtendItem, codes [][]int64, errs []error) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, retakesAtOnce)
	for c, items := range calls {
		if errs[c] != nil {
			continue
		}
		for j, it := range items {
			if codes[c][j] != protocol.CodeGone || it.Lease == nil {
				continue
			}
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				codes[c][j] = q.retake(ctx, i, it)
			})
		}
	}
	wg.Wait()
}

// retakesAtOnce bounds the retakes on one member in flight for one renewal
// answer, so that they leave the rest of the member's connections free.
const retakesAtOnce = 8

// retake takes the lock of the lease it again on member i, where its renewal
// found it gone, and returns the code to count for the renewal there:
// codeDone if the member holds the lease now, codeOther if another owner
// holds the lock there, else codeGone. It runs only while the owner holds
// the lease (Lease.Held), one at a time per owner and member (a second waits
// for the first); a release that gives the lease up waits for it
// (awaitRetakes), and so reaches the member after it. If that release
// stopped waiting (its ctx ended) and may have run first, what the retake
// took is undone.
func (q *quorum) retake(ctx context.Context, i int, it protocol.ExtendItem) int64 {
	key := busyKey{it.Owner, i}
	done := q.beginRetake(ctx, key, it.Lease)
	if done == nil {
		return protocol.CodeGone
	}
	sent := time.Now()
	code, mayHold := q.retakeOn(ctx, i, it)
	q.mu.Lock()
	ended := q.ended[it.Owner]
	delete(q.retaking, key)
	close(done)
	q.mu.Unlock()
	if ended && mayHold {
		q.undo(it.K, it.Owner, i, it.TTL, sent)
	}
	q.unbusy(it.Owner, i)
	return code
}

// beginRetake records a retake of key in flight and returns the channel to
// close when it is done, after the one in flight for key, if any, is done;
// it returns nil, recording nothing, if ctx ends first or lease is no longer
// held. The check and the record are one step under q.mu: a release that
// follows the end of lease's Held finds the retake recorded, or none
// begins.
func (q *quorum) beginRetake(ctx context.Context, key busyKey, lease protocol.Holder) chan struct{} {
	q.mu.Lock()
	for q.retaking[key] != nil {
		prev := q.retaking[key]
		q.mu.Unlock()
		select {
		case <-prev:
		case <-ctx.Done():
			return nil
		}
		q.mu.Lock()
	}
	defer q.mu.Unlock()
	if !lease.Held() {
		return nil
	}
	done := make(chan struct{})
	q.retaking[key] = done
	q.busy[key]++
	return done
}

// retakeOn takes the lock of the lease it again on member i, where its
// renewal found it gone. The member's fence key is raised to the lease's
// fence, which also tells whether the owner holds the lock there by now (a
// retake before this one took it); a free lock is taken for the owner with
// the renewal's TTL, and a fence above the lease's; then the renewal runs
// again there, and decides as it would have had the lock been there: a
// renewal lengthens the lease, an Extend sets it and its generation, and a
// request older than the lease's latest Extend changes nothing. It returns
// the code to count, and whether the owner may hold the lock there now.
func (q *quorum) retakeOn(ctx context.Context, i int, it protocol.ExtendItem) (code int64, mayHold bool) {
	m := q.members[i]
	held, err := m.RaiseFence(ctx, it.K, it.Owner, it.Fence, it.TTL)
	if err != nil {
		return protocol.CodeGone, false
	}
	took := false
	if held == 0 {
		r, err := m.Acquire(ctx, it.K, it.Owner, it.TTL, 0, protocol.KindArgs{})
		q.noteDoubt(it.Owner, i, r.Doubt)
		switch {
		case err != nil:
			return protocol.CodeGone, true // the script may have run
		case r.Fence == 0:
			return protocol.CodeOther, false // another owner holds it there
		}
		took = true
	}
	codes, err := m.Extend(ctx, []protocol.ExtendItem{it})
	switch {
	case err == nil:
		return codes[0], true
	case took:
		// Taken with the renewal's TTL, counted from after the renewal was
		// sent: the lease there lasts as long as the renewal asked.
		return protocol.CodeDone, true
	}
	return protocol.CodeGone, true
}

// awaitRetakes waits, until ctx ends, for the retakes of owner's lease in
// flight (retake), so that the release that follows reaches each member
// after them. The owner's lease is no longer held (Lease.Held): no retake of
// it begins after.
func (q *quorum) awaitRetakes(ctx context.Context, owner string) {
	var pending []chan struct{}
	q.mu.Lock()
	if len(q.retaking) > 0 {
		for i := range q.members {
			if done := q.retaking[busyKey{owner, i}]; done != nil {
				pending = append(pending, done)
			}
		}
	}
	q.mu.Unlock()
	for _, done := range pending {
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
	}
}

var _ protocol.Probed = (*quorum)(nil)

// Missing asks every member at once and returns once a majority has
// answered, waiting at most the per-node timeout (a member paused or down
// must not hold a first Lock up): a command one member that answered lacks
// is missing, since each member serves every lock. Fewer than a majority
// answering is an error: the caller tries again later.
func (q *quorum) Missing(ctx context.Context, channel string, subscribe bool) ([]string, bool, error) {
	type answer struct {
		missing []string
		hidden  bool
		err     error
	}
	answers := make(chan answer, len(q.members))
	for _, m := range q.members {
		p, ok := m.(protocol.Probed)
		if !ok {
			answers <- answer{}
			continue
		}
		q.wg.Go(func() {
			mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(q.timeout, time.Second))
			defer cancel()
			ms, h, err := p.Missing(mctx, channel, subscribe)
			answers <- answer{ms, h, err}
		})
	}
	var (
		missing []string
		hidden  bool
		failed  []error
		got     int
	)
	timer := time.NewTimer(max(q.timeout, time.Second))
	defer timer.Stop()
	for got < q.need {
		select {
		case a := <-answers:
			if a.err != nil {
				failed = append(failed, a.err)
				if len(failed) > len(q.members)-q.need {
					return nil, false, errors.Join(failed...)
				}
				continue
			}
			got++
			hidden = hidden || a.hidden
			for _, c := range a.missing {
				if !slices.Contains(missing, c) {
					missing = append(missing, c)
				}
			}
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		break
	}
	if got < q.need {
		return nil, false, fmt.Errorf("%d of %d nodes answered the probe of what they run, a majority is %d", got, len(q.members), q.need)
	}
	return missing, hidden, nil
}
