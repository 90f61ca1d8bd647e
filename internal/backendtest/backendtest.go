// Package backendtest is a scripted Backend for the fast tests of the
// layers above internal/protocol: it keeps Mutex and FairMutex locks in
// memory, by the rules the scripts keep them in Redis (one holder, its hold
// count, its lease lapsing TTL after it was taken or extended, a fence that
// rises with every take), and lets a test script what each request meets on
// the way: a refusal before it runs, or a reply lost after it ran. It has no
// wake-up channels (Places answers none), so waiters ask again as the
// holder's lease runs out, and none of the capabilities beyond
// protocol.Backend. Time is the process's, so that a test under
// testing/synctest runs a lease's life in no time.
package backendtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/protocol"
)

// Fault is what a request meets on its way, as Fake.SetFault scripts it.
type Fault int

const (
	// Pass: the request runs and its reply arrives.
	Pass Fault = iota
	// Refuse: the request does not reach the server (a connection that
	// could not be made): nothing runs, and the error says so.
	Refuse
	// LoseReply: the request runs, and its reply is lost on the way back.
	LoseReply
)

// ErrRefused is the error of a request that did not reach the server: the
// connection could not be made.
var ErrRefused error = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

// ErrLostReply is the error of a request whose reply was lost: it may have
// run.
var ErrLostReply = fmt.Errorf("read reply: %w", io.ErrUnexpectedEOF)

// Call is a request the Fake received, in the order it received them.
type Call struct {
	Op    string // "acquire", "reenter", "release", "extend", "ttl", "announce"
	Name  string // the lock's name ("" for announce)
	Owner string
	Mode  protocol.ReleaseMode // a release's
	Fault Fault
}

// Fake is a Backend that keeps Mutex and FairMutex locks in memory. Its
// zero value is not usable: make one with New.
type Fake struct {
	mu        sync.Mutex
	locks     map[string]*lock // by the lock's name
	calls     []Call
	fault     func(c Call) Fault // SetFault's
	lostAfter time.Duration      // SetLostAfter's
}

// SetFault has fault tell what each request meets from now on (Pass if nil).
// It is called with the Fake's lock held: it must not call the Fake.
func (f *Fake) SetFault(fault func(c Call) Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = fault
}

// SetLostAfter sets how long an acquire whose reply is lost takes to fail
// (a read timeout, say); 0 by default.
func (f *Fake) SetLostAfter(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lostAfter = d
}

// lock is one lock's state, as the scripts keep it.
type lock struct {
	holder string
	holds  int
	fence  int64 // the last fence handed out; kept after the lock is freed
	until  time.Time
	// waiters are the registered waiters, and when each registration
	// lapses.
	waiters map[string]time.Time
}

// New returns an empty Fake.
func New() *Fake { return &Fake{locks: make(map[string]*lock)} }

var _ protocol.Backend = (*Fake)(nil)

// Calls returns the requests received so far.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Holder returns who holds the lock name now, and its fence; "" if no one.
func (f *Fake) Holder(name string) (owner string, fence int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.live(name)
	if l.holder == "" {
		return "", 0
	}
	return l.holder, l.fence
}

// Waiters returns how many waiters of the lock name are registered now.
func (f *Fake) Waiters(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.live(name)
	n := 0
	for _, until := range l.waiters {
		if time.Now().Before(until) {
			n++
		}
	}
	return n
}

// Drop loses the lock name's holder, as a Redis that lost its keys would:
// the fence stays.
func (f *Fake) Drop(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.live(name)
	l.holder, l.holds = "", 0
}

// live returns the lock name, its lapsed lease dropped. f.mu must be held.
func (f *Fake) live(name string) *lock {
	l := f.locks[name]
	if l == nil {
		l = &lock{waiters: make(map[string]time.Time)}
		f.locks[name] = l
	}
	if l.holder != "" && !time.Now().Before(l.until) {
		l.holder, l.holds = "", 0
	}
	return l
}

// receive notes the call c and returns what it meets, and the error of one
// that does not run. f.mu must be held.
func (f *Fake) receive(c Call) (Fault, error) {
	if f.fault != nil {
		c.Fault = f.fault(c)
	}
	f.calls = append(f.calls, c)
	if c.Fault == Refuse {
		return c.Fault, ErrRefused
	}
	return c.Fault, nil
}

// deadline stands for the server's deadline of an acquire whose reply was
// lost (AcquireResult.Doubt): any value above 0 does, here.
func deadline() int64 { return time.Now().Add(protocol.RequestTTL).UnixMilli() }

func (f *Fake) kind(k protocol.Keys) error {
	if k.Kind != protocol.MutexKind && k.Kind != protocol.FairKind {
		return fmt.Errorf("backendtest: a %s: only Mutex and FairMutex are kept", k.Kind.Name)
	}
	return nil
}

// Acquire takes the lock for owner if it is free, answers a copy that finds
// owner holding it as the scripts do (Already, with what is left), and
// registers owner as a waiter otherwise.
func (f *Fake) Acquire(_ context.Context, k protocol.Keys, owner string, ttl, register time.Duration, _ protocol.KindArgs) (protocol.AcquireResult, error) {
	if err := f.kind(k); err != nil {
		return protocol.AcquireResult{}, err
	}
	r, fault, err := f.acquire(k, owner, ttl, register)
	if fault == LoseReply {
		f.mu.Lock()
		d := f.lostAfter
		f.mu.Unlock()
		time.Sleep(d)
		return protocol.AcquireResult{Doubt: deadline()}, ErrLostReply
	}
	return r, err
}

func (f *Fake) acquire(k protocol.Keys, owner string, ttl, register time.Duration) (protocol.AcquireResult, Fault, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fault, err := f.receive(Call{Op: "acquire", Name: k.Name, Owner: owner})
	if err != nil {
		return protocol.AcquireResult{}, fault, err
	}
	l := f.live(k.Name)
	var r protocol.AcquireResult
	switch {
	case l.holder == owner:
		left := time.Until(l.until).Truncate(time.Millisecond)
		r = protocol.AcquireResult{Fence: l.fence, Already: true, Left: left}
	case l.holder == "":
		l.fence++
		l.holder, l.holds, l.until = owner, 1, time.Now().Add(ttl)
		delete(l.waiters, owner)
		r = protocol.AcquireResult{Fence: l.fence}
	default:
		if register > 0 {
			l.waiters[owner] = time.Now().Add(register)
		}
		r = protocol.AcquireResult{Pttl: time.Until(l.until)}
	}
	r.FenceArg = protocol.BoxFence(r.Fence)
	return r, fault, nil
}

// Reenter sets owner's hold count to count, if it holds the lock.
func (f *Fake) Reenter(_ context.Context, k protocol.Keys, owner string, ttl time.Duration, count int, _ protocol.KindArgs) (protocol.AcquireResult, error) {
	if err := f.kind(k); err != nil {
		return protocol.AcquireResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fault, err := f.receive(Call{Op: "reenter", Name: k.Name, Owner: owner})
	if err != nil {
		return protocol.AcquireResult{}, err
	}
	l := f.live(k.Name)
	r := protocol.AcquireResult{Gone: true}
	if l.holder == owner {
		l.holds = count
		r = protocol.AcquireResult{Reentered: true, Fence: l.fence, FenceArg: protocol.BoxFence(l.fence)}
	}
	if fault == LoseReply {
		return protocol.AcquireResult{}, ErrLostReply
	}
	return r, nil
}

// Release gives back a hold of a.Owner, frees the lock at the last, or
// unregisters a waiter that gives up.
func (f *Fake) Release(_ context.Context, k protocol.Keys, a protocol.ReleaseArgs) (protocol.Released, error) {
	if err := f.kind(k); err != nil {
		return protocol.Released{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fault, err := f.receive(Call{Op: "release", Name: k.Name, Owner: a.Owner, Mode: a.Mode})
	if err != nil {
		return protocol.Released{}, err
	}
	l := f.live(k.Name)
	code := int64(protocol.CodeGone)
	switch {
	case a.Mode == protocol.ReleaseLeave:
		delete(l.waiters, a.Owner)
		code = protocol.CodeDone
		if l.holder == a.Owner { // granted meanwhile: passed on
			l.holder, l.holds = "", 0
		}
	case l.holder == a.Owner && a.Mode == protocol.ReleaseOne:
		l.holds = a.Count
		code = protocol.CodeHeld
	case l.holder == a.Owner:
		l.holder, l.holds = "", 0
		code = protocol.CodeDone
	case l.holder != "":
		code = protocol.CodeOther
	}
	if fault == LoseReply {
		return protocol.Released{}, ErrLostReply
	}
	return protocol.Released{Code: code}, nil
}

// Extend lengthens each item's lease if its owner holds it.
func (f *Fake) Extend(ctx context.Context, items []protocol.ExtendItem) ([]int64, error) {
	codes, errs := f.ExtendAll(ctx, [][]protocol.ExtendItem{items}, nil)
	return codes[0], errs[0]
}

// ExtendAll runs Extend per call, and writes rec.
func (f *Fake) ExtendAll(_ context.Context, calls [][]protocol.ExtendItem, rec *protocol.Record) ([][]int64, []error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	codes, errs := make([][]int64, len(calls)), make([]error, len(calls))
	for i, items := range calls {
		codes[i] = make([]int64, len(items))
		for j, it := range items {
			fault, err := f.receive(Call{Op: "extend", Name: it.K.Name, Owner: it.Owner})
			if err != nil {
				errs[i] = err
				break
			}
			l := f.live(it.K.Name)
			switch {
			case l.holder == it.Owner:
				if until := time.Now().Add(it.TTL); it.Exact || until.After(l.until) {
					l.until = until
				}
				codes[i][j] = protocol.CodeDone
			case l.holder == "":
				codes[i][j] = protocol.CodeGone
			default:
				codes[i][j] = protocol.CodeOther
			}
			if fault == LoseReply {
				errs[i] = ErrLostReply
				break
			}
		}
	}
	if rec != nil {
		rec.Sent = true
	}
	return codes, errs
}

// TTL tells whether owner holds the lock k, and for how long yet.
func (f *Fake) TTL(_ context.Context, k protocol.Keys, owner string) (time.Duration, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.receive(Call{Op: "ttl", Name: k.Name, Owner: owner}); err != nil {
		return 0, 0, err
	}
	l := f.live(k.Name)
	switch l.holder {
	case owner:
		return time.Until(l.until), protocol.CodeDone, nil
	case "":
		return 0, protocol.CodeGone, nil
	}
	return 0, protocol.CodeOther, nil
}

// Announce keeps nothing: the Fake has no keys to read it back from.
func (f *Fake) Announce(context.Context, string, string, time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := f.receive(Call{Op: "announce"})
	return err
}

// Places: the Fake has no wake-up channels.
func (f *Fake) Places(context.Context, string) (protocol.Placement, error) {
	return protocol.Placement{}, nil
}

// EvictionPolicy is Redis's safe one.
func (f *Fake) EvictionPolicy(context.Context) (string, bool, error) {
	return "noeviction", true, nil
}

func (f *Fake) Settle() {}

// Traits: each request returns at once, and no grant message is sent.
func (f *Fake) Traits() protocol.Traits {
	return protocol.Traits{What: "a backendtest.Fake", CtxAware: true}
}

// Is reports whether err is one of the Fake's injected failures.
func Is(err error) bool { return errors.Is(err, ErrRefused) || errors.Is(err, ErrLostReply) }
