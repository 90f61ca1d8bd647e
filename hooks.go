package dlock

import (
	"context"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/renew"
	"sync"
	"time"
)

// Hooks are optional functions called on lock events, for metrics and
// traces, in the manner of net/http/httptrace.ClientTrace. A nil field is
// skipped. Every hook gets a context and the lock it is about; Start hooks
// may return a context derived from theirs (one that carries a span, say),
// which the call then makes its requests with and hands to its End hook.
//
// LockStart, Contended, LockEnd, UnlockStart and UnlockEnd are called on the
// goroutine of the call they are about, possibly from many goroutines at
// once. Extended, ExtendFailed and Lost, which the Client's background work
// observes (renewal, the lease's deadline), are called with a context of
// their own from a goroutine of their own, one at a time, in the order the
// events happened, so that a slow hook delays no renewal; Lost may therefore
// come a moment after the lease's Done has closed. A hook slower than the
// events it is called for builds up a backlog, which Client.Close waits for,
// as it does for every hook call in flight. Hooks must be safe for concurrent
// use.
type Hooks struct {
	// LockStart is called when an acquisition starts: Lock, TryLock, RLock,
	// TryRLock, Acquire, TryAcquire or an Election's Campaign, which op names
	// ("lock", "trylock", "rlock", "tryrlock", "acquire", "tryacquire",
	// "campaign"); a MultiLock makes one per name. A re-entry is an
	// acquisition too.
	LockStart func(ctx context.Context, l LockInfo, op string) context.Context
	// Contended is called when the acquisition finds the lock held and
	// starts waiting for it.
	Contended func(ctx context.Context, l LockInfo)
	// LockEnd is called when the acquisition ends, acquired or not.
	LockEnd func(ctx context.Context, l LockInfo, r LockResult)
	// UnlockStart is called when Unlock (or Release) of a Lease starts, or
	// the release of a Leadership's lease by Resign.
	UnlockStart func(ctx context.Context, l LockInfo) context.Context
	// UnlockEnd is called when it ends.
	UnlockEnd func(ctx context.Context, l LockInfo, r UnlockResult)
	// Extended is called after a lease was renewed, or extended with
	// Lease.Extend.
	Extended func(ctx context.Context, l LockInfo, fence int64)
	// ExtendFailed is called when a renewal failed for a reason that may pass
	// (Redis unreachable, say); renewal is retried until the lease's deadline.
	ExtendFailed func(ctx context.Context, l LockInfo, fence int64, err error)
	// Lost is called when a lease is lost; err matches ErrLockLost.
	Lost func(ctx context.Context, l LockInfo, fence int64, err error)
	// LeadershipEnded is called when a Leadership of an Election ends, with
	// its term and why (what Leadership.Err returns): resigned (ErrNotHeld),
	// lost (ErrLockLost) or ended by Client.Close (ErrClosed); once per
	// Leadership. It is called on the goroutine of the Resign or the Close
	// that ended the Leadership (Resign: before it sends anything), and for a
	// loss as Lost is, right after it. A Leadership begins where LockEnd
	// of a "campaign" has a nil Err, its Fence being the term.
	LeadershipEnded func(ctx context.Context, l LockInfo, term int64, err error)
}

// LockInfo names the lock an event is about.
type LockInfo struct {
	Kind string // "Mutex", "FairMutex", "RWMutex", "Semaphore" or "Election"
	Name string // as the caller gave it
}

// LockResult is how an acquisition ended.
type LockResult struct {
	Fence     int64         // the lease's fence if acquired, else 0
	Reentered bool          // the acquisition re-entered a lease carried by its context
	HandedOff bool          // a release handed the lock to this waiter, which took it on that message alone
	Waited    time.Duration // from LockStart until now
	Err       error         // why it was not acquired, nil if it was
}

// UnlockResult is how an Unlock ended.
type UnlockResult struct {
	Fence int64
	Last  bool          // the lease's last hold was given back: the lock was given up
	Held  time.Duration // since the lease was acquired
	Err   error
}

// dispatcher runs the hook calls of background work on a goroutine of its
// own, one at a time and in the order they came, so that a slow hook delays
// no renewal. The goroutine runs while there are calls to make; close waits
// for it.
type dispatcher struct {
	mu      sync.Mutex
	queue   []func()
	running bool
	closed  bool
	idle    *sync.Cond // signalled when running turns false
}

// post queues f. After close, f runs on the caller's goroutine.
func (d *dispatcher) post(f func()) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		f()
		return
	}
	d.queue = append(d.queue, f)
	if !d.running {
		d.running = true
		go d.run()
	}
	d.mu.Unlock()
}

func (d *dispatcher) run() {
	for {
		d.mu.Lock()
		batch := d.queue
		d.queue = nil
		if len(batch) == 0 {
			d.running = false
			if d.idle != nil {
				d.idle.Broadcast()
			}
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		for _, f := range batch {
			f()
		}
	}
}

// close waits until every queued call has been made.
func (d *dispatcher) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.idle == nil {
		d.idle = sync.NewCond(&d.mu)
	}
	for d.running {
		d.idle.Wait()
	}
}

// leaseEvents hands the renewer's events to the hooks, through the
// dispatcher.
type leaseEvents struct {
	hooks *Hooks // nil if none
	d     *dispatcher
	e     *engine // whose record (its name) renewal rounds keep
}

// Record is the Client's record, if it is due: the round writes it.
func (e leaseEvents) Record() *protocol.Record { return e.e.dueRecord() }

// Recorded handles the write of the Client's record by a round.
func (e leaseEvents) Recorded(rec *protocol.Record) { e.e.recorded(rec) }

func (e leaseEvents) Lost(t *renew.Term, err error) {
	if h := e.hooks; h != nil && h.Lost != nil {
		e.d.post(func() { h.Lost(context.Background(), lockInfo(t), t.Fence, err) })
	}
	if h := e.hooks; h != nil && h.LeadershipEnded != nil && t.K.Kind == protocol.ElectionKind {
		e.d.post(func() { e.e.leadershipEnded(context.Background(), t, err) })
	}
}

// leadershipEnded calls the LeadershipEnded hook for t, which has ended with
// cause, if t is a Leadership's term. A loss calls it through Lost; Resign and
// Close, which end a term otherwise, call it themselves.
func (e *engine) leadershipEnded(ctx context.Context, t *renew.Term, cause error) {
	if h := e.hooks; h != nil && h.LeadershipEnded != nil && t.K.Kind == protocol.ElectionKind {
		h.LeadershipEnded(ctx, lockInfo(t), t.Fence, cause)
	}
}

func (e leaseEvents) Extended(t *renew.Term) {
	if h := e.hooks; h != nil && h.Extended != nil {
		e.d.post(func() { h.Extended(context.Background(), lockInfo(t), t.Fence) })
	}
}

func (e leaseEvents) ExtendFailed(ts []*renew.Term, err error) {
	if h := e.hooks; h != nil && h.ExtendFailed != nil {
		e.d.post(func() {
			for _, t := range ts {
				h.ExtendFailed(context.Background(), lockInfo(t), t.Fence, err)
			}
		})
	}
}

// lockInfo names t's lock, for hooks.
func lockInfo(t *renew.Term) LockInfo { return LockInfo{Kind: t.K.Kind.Name, Name: t.K.Name} }
