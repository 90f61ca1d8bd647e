package dlock_test

// The fault matrix: every request kind dlock sends, crossed with every fault
// that can happen to a request on its way (its reply lost and the request
// sent again; its first copy held back and delivered after the owner's next
// request, or after another owner's; dropped, with no copy sent again), and
// with each next step that matters (Unlock, Extend, giving up, another
// owner's acquire, Redis restarted empty and the name taken again). Each
// cell runs through the fault proxy in front of a real server and checks
// what the docs promise: a stale request takes nothing and lengthens
// nothing, the newest intent wins, and the errors say what happened.
//
// The rows come from a table of request kinds this file owns (requests),
// each saying how the test makes the request, what the owner's next
// request is, and what must hold after; the cells are generated. A fast
// subset runs in the ordinary suite; make faults runs all of them
// (DLOCK_FAULTS=all) and prints the matrix.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/timing"
	"github.com/redis/go-redis/v9"
)

// mxFault is what happens to the request a cell is about.
type mxFault string

const (
	// Its reply is lost after Redis ran it; the Client sends it again.
	mxLost mxFault = "reply lost, sent again"
	// Its first copy is held back; the Client gives up on it and sends it
	// again; the first copy reaches Redis after the owner's next request.
	mxLateOwn mxFault = "late, after its owner's next request"
	// As mxLateOwn, after another owner's acquire too.
	mxLateOther mxFault = "late, after another owner's acquire"
	// It never reaches Redis, and is not sent again.
	mxDropped mxFault = "dropped, not sent again"
)

var mxFaults = []mxFault{mxLost, mxLateOwn, mxLateOther, mxDropped}

// mxNext is the step after the request that a late copy must not undo.
type mxNext string

const (
	mxUnlock  mxNext = "Unlock"           // the owner releases (Resign, Release)
	mxExtend  mxNext = "Extend"           // the owner shortens its lease
	mxGiveUp  mxNext = "give up"          // a waiter's context ends
	mxRestart mxNext = "restart, retaken" // Redis restarts empty, another owner takes the name
	mxNone    mxNext = "-"
)

// mxEnv is one cell's world: a server behind a proxy, the Client whose
// request is faulted (through the proxy), another Client straight to the
// server, and a name of the cell's own.
type mxEnv struct {
	t      *testing.T
	ctx    context.Context
	srv    *redistest.Server
	p      *faultproxy.Proxy
	c      *dlock.Client // through the proxy
	other  *dlock.Client // straight to the server
	direct *redis.Client
	name   string
}

// restartTaken restarts the server empty and has the other Client take the
// name: the lost hold's owner must learn it lost it.
func (e *mxEnv) restartTaken(k mxKind) func() {
	e.t.Helper()
	if err := e.srv.Restart(); err != nil {
		e.t.Fatal(err)
	}
	loadScripts(e.t, e.srv.Client(e.t))
	h, err := k.try(e.ctx, e.other, e.name)
	if err != nil {
		e.t.Fatalf("another owner after the restart: %v", err)
	}
	return func() { _ = h.release(e.ctx) }
}

// mxHold is what the matrix needs of a Lease or a Leadership.
type mxHold struct {
	release func(context.Context) error
	extend  func(context.Context, time.Duration) error
	err     func() error
	fence   int64
}

func mxLease(l *dlock.Lease, err error) (mxHold, error) {
	if err != nil {
		return mxHold{}, err
	}
	return mxHold{release: l.Unlock, extend: l.Extend, err: l.Err, fence: l.Fence()}, nil
}

// mxKind is a kind of lock as the matrix takes it: its scripts, a waiting
// acquire and a try, and whether the name is free (a new owner gets it at
// once).
type mxKind struct {
	name             string
	acquire, release string // the scripts' names (dlock.ScriptHash)
	lock             func(ctx context.Context, c *dlock.Client, name string) (mxHold, error)
	try              func(ctx context.Context, c *dlock.Client, name string) (mxHold, error)
	extends          bool // has Extend
}

var mxKinds = []mxKind{
	{name: "Mutex", acquire: "acquire", release: "release", extends: true,
		lock: func(ctx context.Context, c *dlock.Client, n string) (mxHold, error) {
			return mxLease(c.Mutex(n).Lock(ctx))
		},
		try: func(ctx context.Context, c *dlock.Client, n string) (mxHold, error) {
			return mxLease(c.Mutex(n).TryLock(ctx))
		}},
	{name: "FairMutex", acquire: "acquire", release: "release", extends: true,
		lock: func(ctx context.Context, c *dlock.Client, n string) (mxHold, error) {
			return mxLease(c.FairMutex(n).Lock(ctx))
		},
		try: func(ctx context.Context, c *dlock.Client, n string) (mxHold, error) {
			return mxLease(c.FairMutex(n).TryLock(ctx))
		}},
	{name: "RWMutex", acquire: "rw_acquire", release: "rw_release", extends: true,
		lock: func(ctx context.Context, c *dlock.Client, n string) (mxHold, error) {
			return mxLease(c.RWMutex(n).Lock(ctx))
		},
		try: func(ctx context.Context, c *dlock.Client, n string) (mxHold, error) {
			return mxLease(c.RWMutex(n).TryLock(ctx))
		}},
	{name: "RWMutex read", acquire: "rw_acquire", release: "rw_release", extends: true,
		lock: func(ctx context.Context, c *dlock.Client, n string) (mxHold, error) {
			return mxLease(c.RWMutex(n).RLock(ctx))
		},
		// A writer's try: a read hold left behind refuses it.
		try: func(ctx context.Context, c *dlock.Client, n string) (mxHold, error) {
			return mxLease(c.RWMutex(n).TryLock(ctx))
		}},
	{name: "Semaphore", acquire: "sem_acquire", release: "sem_release", extends: true,
		lock: func(ctx context.Context, c *dlock.Client, n string) (mxHold, error) {
			return mxLease(c.Semaphore(n, 1).Acquire(ctx, 1))
		},
		try: func(ctx context.Context, c *dlock.Client, n string) (mxHold, error) {
			return mxLease(c.Semaphore(n, 1).TryAcquire(ctx, 1))
		}},
	{name: "Election", acquire: "acquire", release: "release",
		lock: func(ctx context.Context, c *dlock.Client, n string) (mxHold, error) {
			ld, err := c.Election(n).Campaign(ctx, "v")
			if err != nil {
				return mxHold{}, err
			}
			return mxHold{release: ld.Resign, err: ld.Err, fence: ld.Term()}, nil
		},
		try: func(ctx context.Context, c *dlock.Client, n string) (mxHold, error) {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			ld, err := c.Election(n).Campaign(cctx, "w")
			if err != nil {
				return mxHold{}, err
			}
			return mxHold{release: ld.Resign, err: ld.Err, fence: ld.Term()}, nil
		}},
}

// mxRequest is a row: a request kind, for one kind of lock.
type mxRequest struct {
	name  string
	kind  mxKind
	match func(k mxKind) faultproxy.Match
	// nexts are the steps after the request the cells try.
	nexts []mxNext
	// run makes the request, with the fault applied to it (cp), and the
	// step after it, in a cell of the common set-up: a server behind a
	// proxy; it delivers a held copy after that step, and checks what must
	// hold.
	run func(e *mxEnv, f mxFault, next mxNext, cp *mxCopies) error
	// cell, instead of run, runs a cell that needs a set-up of its own (a
	// RedLock's members, a Cluster).
	cell func(t *testing.T, f mxFault, next mxNext) error
	// ttl, if not 0, is the faulted Client's TTL (mxTTL otherwise).
	ttl time.Duration
}

// mxCopies is how a cell's fault is applied to its request: inject it
// before the request is made; deliver a held copy at the right moment.
type mxCopies struct {
	e     *mxEnv
	in    *faultproxy.Injection
	f     mxFault
	kind  mxKind
	match func(mxKind) faultproxy.Match
}

// deliverLate delivers the held copy, for the late faults; the others have
// nothing held.
func (cp *mxCopies) deliverLate() {
	if cp.f == mxLateOwn || cp.f == mxLateOther {
		deliver(cp.e.t, cp.in)
	}
}

// ran checks that the fault met the request.
func (cp *mxCopies) ran() error {
	if cp.in.Hits() == 0 {
		return errors.New("the injected fault never applied")
	}
	return nil
}

// mxRequests are the rows.
func mxRequests() []mxRequest {
	var rows []mxRequest
	for _, k := range mxKinds {
		acquire := func(k mxKind) faultproxy.Match { return script(k.acquire) }
		release := func(k mxKind) faultproxy.Match { return script(k.release) }
		nexts := []mxNext{mxUnlock, mxRestart}
		if k.extends {
			nexts = append(nexts, mxExtend)
		}
		rows = append(rows,
			mxRequest{name: "acquire", kind: k, match: acquire, nexts: nexts, run: mxAcquire},
			mxRequest{name: "release", kind: k, match: release, nexts: []mxNext{mxNone, mxRestart}, run: mxRelease},
		)
		if k.name != "RWMutex read" {
			// A waiting attempt carries its registration's length.
			registers := func(k mxKind) faultproxy.Match {
				return faultproxy.And(script(k.acquire), faultproxy.HasArg(strconv.FormatInt(timing.RegisterFor(mxTTL).Milliseconds(), 10)))
			}
			rows = append(rows, mxRequest{name: "registration", kind: k, match: registers, nexts: []mxNext{mxGiveUp, mxUnlock}, run: mxRegistration})
		}
		if k.extends {
			rows = append(rows, mxRequest{name: "Extend", kind: k, match: func(mxKind) faultproxy.Match {
				return faultproxy.And(script("extend"), faultproxy.HasArg("set"))
			}, nexts: []mxNext{mxUnlock, mxExtend}, run: mxExtendRow})
		}
	}
	return rows
}

// mxAcquire: the owner takes the lock with the request faulted, then does
// next; a late copy arrives after that. After: the owner's errors are
// honest, and what the late copy did is nothing: the name is free once the
// owner let it go, and an Extend's shortened lease stays short.
func mxAcquire(e *mxEnv, f mxFault, next mxNext, cp *mxCopies) error {
	k := cp.kindOf()
	h, err := k.lock(e.ctx, e.c, e.name)
	if err := cp.ran(); err != nil {
		return err
	}
	if f == mxDropped {
		// Dropped and not sent again: the acquire fails, and nothing is
		// left behind.
		if err == nil {
			return errors.New("an acquire whose only request never reached Redis succeeded")
		}
		return mxFree(e, k)
	}
	if err != nil {
		return fmt.Errorf("acquire: %v", err)
	}
	var o mxHold
	var otherHeld bool
	switch next {
	case mxUnlock:
		if err := h.release(e.ctx); err != nil {
			return fmt.Errorf("release: %v", err)
		}
		if f == mxLateOther {
			if o, err = k.try(e.ctx, e.other, e.name); err != nil {
				return fmt.Errorf("another owner after the release: %v", err)
			}
			otherHeld = true
		}
		cp.deliverLate()
		if otherHeld {
			if err := o.err(); err != nil {
				return fmt.Errorf("the other owner's hold after the late copy: %v", err)
			}
			if err := o.release(e.ctx); err != nil {
				return fmt.Errorf("the other owner's release after the late copy: %v", err)
			}
		}
		return mxFree(e, k)
	case mxExtend:
		return mxShortened(e, k, h, cp, 3*time.Second, "Extend", "another owner could not take the lock long after the shortened lease ran out")
	case mxRestart:
		cp.deliverLate()
		done := e.restartTaken(k)
		defer done()
		if err := h.release(e.ctx); !errors.Is(err, dlock.ErrLockLost) {
			return fmt.Errorf("release of a hold Redis lost and another owner took: %v, want ErrLockLost", err)
		}
		return nil
	}
	return fmt.Errorf("no cell for %s", next)
}

// mxRelease: the owner releases with the request faulted. After: the
// release's answer is honest, and a late copy frees nothing of another
// owner's.
func mxRelease(e *mxEnv, f mxFault, next mxNext, cp *mxCopies) error {
	k := cp.kindOf()
	// The fault applies to the release only.
	cp.in.Remove()
	h, err := k.lock(e.ctx, e.c, e.name)
	if err != nil {
		return fmt.Errorf("acquire: %v", err)
	}
	if next == mxRestart {
		done := e.restartTaken(k)
		defer done()
	}
	cp.in = e.p.Inject(cp.rule(cp.e, k))
	err = h.release(e.ctx)
	if err := cp.ran(); err != nil {
		return err
	}
	switch {
	case next == mxRestart:
		if f != mxDropped && !errors.Is(err, dlock.ErrLockLost) {
			return fmt.Errorf("release of a hold Redis lost and another owner took: %v, want ErrLockLost", err)
		}
		cp.deliverLate()
		return nil
	case f == mxDropped:
		// Not sent again by the Redis client: Unlock says it could not
		// reach Redis, and the Client releases the lock in the background.
		if err == nil {
			return errors.New("a release whose only request never reached Redis returned nil")
		}
	case err != nil:
		return fmt.Errorf("release: %v", err)
	}
	var o mxHold
	otherHeld := false
	if f == mxLateOther || f == mxLateOwn {
		if !within(3*time.Second, func() bool {
			o, err = k.try(e.ctx, e.other, e.name)
			return err == nil
		}) {
			return fmt.Errorf("another owner after the release: %v", err)
		}
		otherHeld = true
	}
	cp.deliverLate()
	if otherHeld {
		if err := o.err(); err != nil {
			return fmt.Errorf("the other owner's hold after the late release: %v", err)
		}
		if n, err := mxHeldBy(e, k); err == nil && n == 0 {
			return errors.New("the late copy of a release freed another owner's hold")
		}
		if err := o.release(e.ctx); err != nil {
			return fmt.Errorf("the other owner's release after the late copy: %v", err)
		}
	}
	return mxFree(e, k)
}

// mxRegistration: the owner waits in line behind another owner, its
// registration faulted; then gives up (or gets the lock and unlocks it).
// After: nobody is queued, and the name is free.
func mxRegistration(e *mxEnv, f mxFault, next mxNext, cp *mxCopies) error {
	k := cp.kindOf()
	cp.in.Remove()
	o, err := k.lock(e.ctx, e.other, e.name)
	if err != nil {
		return fmt.Errorf("the other owner's acquire: %v", err)
	}
	cp.in = e.p.Inject(cp.rule(e, k))
	wctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	got := make(chan error, 1)
	var h mxHold
	go func() {
		var err error
		h, err = k.lock(wctx, e.c, e.name)
		got <- err
	}()
	if !within(5*time.Second, func() bool { return cp.in.Hits() > 0 }) {
		return errors.New("the waiter never registered")
	}
	switch next {
	case mxGiveUp:
		time.Sleep(400 * time.Millisecond) // past the Redis client's read timeout: it sends the registration again
		cancel()
		if err := <-got; !errors.Is(err, dlock.ErrNotAcquired) {
			return fmt.Errorf("the waiter that gave up: %v", err)
		}
		cp.deliverLate()
		if err := o.release(e.ctx); err != nil {
			return fmt.Errorf("the other owner's release: %v", err)
		}
	case mxUnlock:
		time.Sleep(400 * time.Millisecond)
		if err := o.release(e.ctx); err != nil {
			return fmt.Errorf("the other owner's release: %v", err)
		}
		if err := <-got; err != nil {
			if f == mxDropped {
				return nil
			}
			return fmt.Errorf("the waiter: %v", err)
		}
		if err := h.release(e.ctx); err != nil {
			return fmt.Errorf("the waiter's release: %v", err)
		}
		cp.deliverLate()
	}
	if !within(3*time.Second, func() bool { n, _ := mxQueued(e, k); return n == 0 }) {
		return errors.New("a waiter is still queued after the last one gave up or was served")
	}
	return mxFree(e, k)
}

// mxExtendRow: the owner's Extend is faulted, then the owner extends again
// or unlocks. After: the newest intent wins: a late Extend does not undo a
// later one, and nothing is left after Unlock.
func mxExtendRow(e *mxEnv, f mxFault, next mxNext, cp *mxCopies) error {
	k := cp.kindOf()
	cp.in.Remove()
	h, err := k.lock(e.ctx, e.c, e.name)
	if err != nil {
		return fmt.Errorf("acquire: %v", err)
	}
	cp.in = e.p.Inject(cp.rule(e, k))
	err = h.extend(e.ctx, 20*time.Second)
	if err := cp.ran(); err != nil {
		return err
	}
	if f == mxDropped {
		if err == nil {
			return errors.New("an Extend whose only request never reached Redis returned nil")
		}
	} else if err != nil {
		return fmt.Errorf("Extend: %v", err)
	}
	switch next {
	case mxUnlock:
		if err := h.release(e.ctx); err != nil {
			return fmt.Errorf("release: %v", err)
		}
		cp.deliverLate()
		return mxFree(e, k)
	case mxExtend:
		return mxShortened(e, k, h, cp, 3*time.Second, "the second Extend", "the earlier, longer Extend undid the later, shorter one")
	}
	return fmt.Errorf("no cell for %s", next)
}

// mxShortened is the next step Extend: the owner shortens its lease to
// 500ms, the late copies are delivered, and the owner is cut off from
// Redis, so that only what Redis keeps holds the lock: within wait, well
// before the TTL, another owner must take it. step names the Extend, undone
// what it means if the other owner cannot.
func mxShortened(e *mxEnv, k mxKind, h mxHold, cp *mxCopies, wait time.Duration, step, undone string) error {
	if err := h.extend(e.ctx, 500*time.Millisecond); err != nil {
		return fmt.Errorf("%s: %v", step, err)
	}
	cp.deliverLate()
	e.p.Refuse(true)
	e.p.Cut()
	if !within(wait, func() bool {
		o, err := k.try(e.ctx, e.other, e.name)
		if err != nil {
			return false
		}
		_ = o.release(e.ctx)
		return true
	}) {
		return errors.New(undone)
	}
	return nil
}

// kindOf is the kind of the cell's row.
func (cp *mxCopies) kindOf() mxKind { return cp.kind }

// rule is the cell's fault as a proxy rule on the row's request.
func (cp *mxCopies) rule(e *mxEnv, k mxKind) faultproxy.Rule {
	m := cp.match(k)
	switch cp.f {
	case mxLost:
		return faultproxy.Rule{Match: m, Fault: faultproxy.DropReply, Times: 1}
	case mxDropped:
		return faultproxy.Rule{Match: m, Fault: faultproxy.DropRequest, Times: 1}
	}
	return faultproxy.Rule{Match: m, Fault: faultproxy.HoldRequest, Times: 1}
}

// mxFree reports whether the name is free: another owner takes it at once.
func mxFree(e *mxEnv, k mxKind) error {
	var err error
	if !within(2*time.Second, func() bool {
		var o mxHold
		if o, err = k.try(e.ctx, e.other, e.name); err != nil {
			return false
		}
		_ = o.release(e.ctx)
		return true
	}) {
		return fmt.Errorf("the name is not free: %v", err)
	}
	return nil
}

// mxHeldBy returns how many holders Redis shows for the cell's name.
func mxHeldBy(e *mxEnv, k mxKind) (int, error) {
	st, err := e.other.Inspect(e.ctx, mxAdminKind(k), e.name)
	if err != nil {
		return 0, err
	}
	return len(st.Holders), nil
}

// mxQueued returns how many waiters Redis shows for the cell's name.
func mxQueued(e *mxEnv, k mxKind) (int, error) {
	st, err := e.other.Inspect(e.ctx, mxAdminKind(k), e.name)
	if err != nil {
		return 0, err
	}
	return st.Queued, nil
}

func mxAdminKind(k mxKind) dlock.Kind {
	switch k.name {
	case "FairMutex":
		return dlock.KindFairMutex
	case "RWMutex", "RWMutex read":
		return dlock.KindRWMutex
	case "Semaphore":
		return dlock.KindSemaphore
	case "Election":
		return dlock.KindElection
	}
	return dlock.KindMutex
}

// mxTTL is the TTL of the faulted Client's locks.
const mxTTL = 10 * time.Second

// mxCell is one cell: a row, a fault, a next step.
type mxCell struct {
	row   mxRequest
	fault mxFault
	next  mxNext
}

func (c mxCell) String() string {
	return fmt.Sprintf("%s %s/%s/%s", c.row.kind.name, c.row.name, c.fault, c.next)
}

// mxCells generates the cells: every row with every fault and each of its
// next steps; a fault that sends nothing late has nothing to deliver after
// another owner's acquire, which the late-after-own cell covers too.
func mxCells(fast bool) []mxCell {
	var cells []mxCell
	for _, r := range append(mxRequests(), mxMoreRequests()...) {
		for _, f := range mxFaults {
			for _, n := range r.nexts {
				if f == mxLateOther && (r.cell != nil || !(r.name == "acquire" && n == mxUnlock) && r.name != "release") {
					continue // another owner's acquire matters where the late copy could take or free its hold
				}
				if n == mxRestart && f != mxLost {
					continue // a restart loses every copy's work alike: one fault says it
				}
				if fast && !mxFast(r, f, n) {
					continue
				}
				cells = append(cells, mxCell{r, f, n})
			}
		}
	}
	return cells
}

// mxFast picks the ordinary suite's subset: every request kind of a Mutex,
// and the late acquire after Unlock of every kind.
func mxFast(r mxRequest, f mxFault, n mxNext) bool {
	if r.cell != nil || r.name == "renewal" {
		return false // servers of their own, or renewal periods: make faults
	}
	return r.kind.name == "Mutex" || (r.name == "acquire" && f == mxLateOwn && n == mxUnlock)
}

// mxResult is a cell's outcome.
type mxResult struct {
	cell mxCell
	err  error
}

// TestFaultMatrix runs the matrix's cells (the fast subset unless
// DLOCK_FAULTS=all), each on a server of its own behind a fault proxy, and
// prints the matrix.
func TestFaultMatrix(t *testing.T) {
	t.Parallel()
	all := os.Getenv("DLOCK_FAULTS") == "all"
	cells := mxCells(!all)
	var mu sync.Mutex
	var results []mxResult
	for _, c := range cells {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			err := runCell(t, c)
			mu.Lock()
			results = append(results, mxResult{c, err})
			mu.Unlock()
			if err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(func() {
		sort.Slice(results, func(i, j int) bool { return results[i].cell.String() < results[j].cell.String() })
		passed := 0
		var b strings.Builder
		for _, r := range results {
			verdict := "pass"
			if r.err != nil {
				verdict = "FAIL: " + r.err.Error()
			} else {
				passed++
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.cell.row.kind.name, r.cell.row.name, r.cell.fault, r.cell.next, verdict)
		}
		server := os.Getenv("DLOCK_REDIS_SERVER")
		if server == "" {
			server = "redis-server"
		}
		t.Logf("fault matrix on %s: %d cells, %d passed\n| kind | request | fault | then | outcome |\n|---|---|---|---|---|\n%s", server, len(results), passed, b.String())
	})
}

// runCell runs one cell on a server of its own.
func runCell(t *testing.T, c mxCell) error {
	if c.row.cell != nil {
		return c.row.cell(t, c.fault, c.next)
	}
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	direct := srv.Client(t)
	loadScripts(t, direct)
	opts := &redis.Options{Addr: p.Addr(), ReadTimeout: 300 * time.Millisecond}
	if c.fault == mxDropped {
		opts.MaxRetries = -1 // the request is not sent again
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	ttl := mxTTL
	if c.row.ttl != 0 {
		ttl = c.row.ttl
	}
	c0, err := dlock.New(rdb, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// With the Redis client's retries off (a dropped request), the
		// release Close sends may meet a connection the proxy closed, and
		// fail: the Redis client sends nothing again, by the cell's design.
		// What the cell proves was checked before.
		if err := c0.Close(); err != nil && (c.fault != mxDropped || !dlock.Transient(err)) {
			t.Errorf("Close: %v", err)
		}
	})
	e := &mxEnv{t: t, ctx: context.Background(), srv: srv, p: p, c: c0,
		other: clientOn(t, direct), direct: direct, name: "cell"}
	cp := &mxCopies{e: e, f: c.fault, kind: c.row.kind, match: c.row.match}
	cp.in = p.Inject(cp.rule(e, c.row.kind))
	return c.row.run(e, c.fault, c.next, cp)
}
