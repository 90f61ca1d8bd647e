package dlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// DefaultMaxResultLen is the largest result a Group shares when
// WithMaxResultLen is not given: 1 MiB.
const DefaultMaxResultLen = 1 << 20

// Group runs a function once for the callers of one key, across processes:
// a distributed singleflight. Of the callers of a key, in every process, one
// at a time runs the function (the runner, which holds the key's lease);
// the callers that wait for it meanwhile get its result without running it.
// Each key is a lock of its own, granted in order of arrival, as a
// FairMutex's. Get one from Client.Group; it is safe for concurrent use.
type Group struct {
	c    *Client
	name string
	cfg  config
	err  error // of every call: a bad name or option, a nil Client
}

// flights are a Client's Group calls in flight, by lock name: every Group
// value of one name shares them.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

// flight is one process's wait for a key's result: its callers share it,
// and one registration in Redis.
type flight struct {
	done chan struct{} // closed when the result is in
	// The result, set before done closes. ran tells whether this process
	// ran the function.
	val []byte
	err error
	ran bool

	callers int                // the callers still waiting, under the flights' mu
	cancel  context.CancelFunc // ends the flight once no caller waits
}

// ResultError is the error a Group's Do returns when the function, run by
// another process, returned an error: its message is that error's.
type ResultError struct {
	Msg string
}

func (e *ResultError) Error() string { return e.Msg }

// Group returns the group called name, whose keys are the locks
// "name/key" of kind KindGroup. name must not be empty, nor contain '/', and
// name, '/' and a key together must be at most MaxNameLen bytes. WithTTL sets
// the runner's lease; WithResultTTL and WithMaxResultLen apply to a Group
// only; WithoutRenewal does not apply (a runner's lease is renewed while its
// function runs) and is an error, given here or to the Client. These errors,
// and an unusable Client, are returned by every call. On a RedLock Client,
// or one made WithoutScripts, every call returns an error matching
// errors.ErrUnsupported.
func (c *Client) Group(name string, opts ...Option) *Group {
	g := &Group{c: c, name: name}
	if c == nil || c.e == nil {
		g.err = errs.Op(nil, nil, "Group of a nil or zero Client")
		return g
	}
	if err := nameErr("Group", name); err != nil {
		g.err = err
		return g
	}
	if strings.Contains(name, "/") {
		g.err = errs.Op(nil, nil, "Group %q: a name must not contain '/', which separates it from a key", name)
		return g
	}
	cfg, err := c.cfg.apply(opts, false, true)
	switch {
	case err != nil:
		g.err = errs.Op(nil, err, "Group %q", name)
	case !cfg.renew:
		g.err = errs.Op(nil, nil, "Group %q: WithoutRenewal (given to it or to its Client) does not apply: a runner's lease is renewed while its function runs", name)
	}
	g.cfg = cfg
	return g
}

// Name returns the group's name.
func (g *Group) Name() string {
	if g == nil {
		return ""
	}
	return g.name
}

// Do returns the result of fn for key: run by this caller, or by another
// caller of key, in this process or another, that ran it while this one
// waited. shared is false for the caller that ran fn itself.
//
// Among the callers of key, at most one runs fn at a time, holding key's
// lease: fn's ctx is the lease's (LeaseFromContext gives its fence), and
// ends if the lease is lost. The callers waiting when fn returns get its
// value or error without running fn, woken by Redis in the order they
// came; an error from another process is a *ResultError. If the runner
// dies, is paused past its lease or loses it, or its Client is closed,
// nothing is shared and the next caller in line runs fn; the runner's own
// callers do not wait for an fn whose lease has ended: they get in line
// again (lease lost) or return the error (Client closed). A caller that
// arrives after fn returned runs it again, unless WithResultTTL keeps
// results for later callers.
//
// Callers of key in one process (of the Groups of one name and Client)
// share one wait in Redis, and the options of the Group whose call came
// first; they return when the result is in, or when their own ctx ends (an
// error matching ErrNotAcquired and ctx.Err()). fn runs on a goroutine of
// its own; its ctx also ends once no caller in this process waits for it.
// A value longer than WithMaxResultLen is an error for this process's
// callers and is not shared. The callers of a key in one process get
// copies of one value.
func (g *Group) Do(ctx context.Context, key string, fn func(ctx context.Context) ([]byte, error)) (val []byte, shared bool, err error) {
	if err := g.check(ctx, key, fn); err != nil {
		return nil, false, err
	}
	fl, name := &g.c.e.flights, g.lockName(key)
	fl.mu.Lock()
	f, joined := fl.m[name]
	if !joined {
		f = &flight{done: make(chan struct{})}
		// The flight outlives a caller that leaves: it ends when the last
		// one does (wait).
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f.cancel = cancel
		if fl.m == nil {
			fl.m = map[string]*flight{}
		}
		fl.m[name] = f
		go g.run(fctx, f, key, fn)
	}
	f.callers++
	fl.mu.Unlock()
	return g.wait(ctx, f, key, !joined)
}

// check rejects a call Do cannot make, before anything is sent.
func (g *Group) check(ctx context.Context, key string, fn func(context.Context) ([]byte, error)) error {
	switch {
	case g == nil || g.c == nil && g.err == nil:
		return errs.Op(nil, nil, "Group.Do of a nil or zero Group; get one from Client.Group")
	case g.err != nil:
		return g.err
	case ctx == nil:
		return errs.Op(nil, nil, "Group %q: Do: nil context", g.name)
	case fn == nil:
		return errs.Op(nil, nil, "Group %q: Do: nil function", g.name)
	case key == "":
		return errs.Op(nil, nil, "Group %q: Do: empty key", g.name)
	case len(g.name)+1+len(key) > MaxNameLen:
		return errs.Op(nil, nil, "Group %q: Do: a key of %d bytes: the name, '/' and the key must be at most MaxNameLen (%d) bytes", g.name, len(key), MaxNameLen)
	}
	for h := heldIn(ctx); h != nil; h = h.next {
		if h.l != nil && h.l.h.e == g.c.e && h.l.h.t.K.Kind == protocol.GroupKind && h.l.h.t.K.Name == g.lockName(key) {
			return errs.Op(ErrNotAcquired, nil, "Group %q: Do %q within its own function: it would wait for itself", g.name, key)
		}
	}
	return nil
}

// lockName is the name of key's lock.
func (g *Group) lockName(key string) string { return g.name + "/" + key }

// wait returns f's result to one of its callers, or the caller's own
// ctx's error; the last caller to leave ends the flight.
func (g *Group) wait(ctx context.Context, f *flight, key string, first bool) ([]byte, bool, error) {
	fl := &g.c.e.flights
	select {
	case <-f.done:
		fl.mu.Lock()
		f.callers--
		fl.mu.Unlock()
		val := f.val
		if !first && val != nil {
			val = bytes.Clone(val)
		}
		return val, !(first && f.ran), f.err
	case <-ctx.Done():
		fl.mu.Lock()
		f.callers--
		if f.callers == 0 {
			f.cancel()
			fl.drop(g.lockName(key), f)
		}
		fl.mu.Unlock()
		return nil, false, errs.Op(ErrNotAcquired, ctx.Err(), "Group %q: Do %q", g.name, key)
	}
}

// drop forgets f, the flight of the lock name, if it is still the one in
// flight; the caller holds fl.mu.
func (fl *flights) drop(name string, f *flight) {
	if fl.m[name] == f {
		delete(fl.m, name)
	}
}

// run gets f's result: from Redis, if a run that ended after f asked left
// one there, else by running fn once the key's lease is f's.
func (g *Group) run(ctx context.Context, f *flight, key string, fn func(context.Context) ([]byte, error)) {
	defer func() {
		fl := &g.c.e.flights
		fl.mu.Lock()
		fl.drop(g.lockName(key), f)
		fl.mu.Unlock()
		f.cancel()
		close(f.done)
	}()
	f.val, f.ran, f.err = g.run1(ctx, key, fn)
}

// run1 is run's work: it returns the value, whether this process ran fn,
// and the error.
func (g *Group) run1(ctx context.Context, key string, fn func(context.Context) ([]byte, error)) ([]byte, bool, error) {
	a := g.c.acquirerWith(protocol.GroupKind, g.lockName(key), g.cfg, nil)
	if err := a.check(ctx, "Group.Do"); err != nil {
		return nil, false, err
	}
	groups, _ := a.e.backend.(protocol.Groups)
	op := func(err error) error { return errs.Op(nil, err, "Group %q: Do %q", g.name, key) }
	// A result whose run's fence is above asked was made by a run that
	// ended after this call got in line: the runs of a key take turns.
	asked := int64(-1)
	if g.cfg.resultTTL == 0 {
		// The key free and nobody in line: this call waited for no run, so
		// it runs fn at once, with no read of the result (which serves only
		// the callers that were in line when a run ended).
		l, err := a.acquire(ctx, "Group.Do", false, protocol.KindArgs{})
		switch {
		case err == nil:
			val, again, err := g.runLeased(ctx, l, &a, fn, op)
			if !again {
				return val, true, err
			}
			asked = l.Fence() // the runs after this one's lost lease
		case ctx.Err() != nil || a.e.closed():
			return nil, false, err
		}
		// Held, or in doubt: in line, as below.
	}
	if asked < 0 {
		r, err := groups.GroupResult(ctx, a.k)
		a.e.heard(err)
		if err != nil {
			return nil, false, op(err)
		}
		if g.cfg.resultTTL > 0 && r.Fence > 0 && r.Age < g.cfg.resultTTL {
			return g.result(r)
		}
		asked = r.Fence
	}
	for {
		l, err := a.acquire(ctx, "Group.Do", true, protocol.KindArgs{})
		if err != nil {
			return nil, false, err
		}
		r, err := groups.GroupResult(ctx, a.k)
		a.e.heard(err)
		if err != nil {
			return nil, false, errors.Join(op(err), l.Unlock(context.WithoutCancel(ctx)))
		}
		if r.Fence > asked {
			// The release passes the lease on to the next caller in line,
			// which is waiting for the same result.
			l.Unlock(context.WithoutCancel(ctx))
			return g.result(r)
		}
		val, again, err := g.runLeased(ctx, l, &a, fn, op)
		if !again {
			return val, true, err
		}
	}
}

// runLeased runs fn under the lease l and shares its result. again is true
// if the lease was lost while fn ran and the flight's callers still wait:
// the flight gets in line again at once, without waiting for fn, whose
// context has ended and whose result nobody takes.
func (g *Group) runLeased(ctx context.Context, l *Lease, a *acquirer, fn func(context.Context) ([]byte, error), op func(error) error) (val []byte, again bool, err error) {
	lctx, cancel := l.Context(ctx)
	defer cancel()
	type ran struct {
		val []byte
		err error
	}
	done := make(chan ran, 1)
	go func() {
		v, err := fn(lctx)
		done <- ran{v, err}
	}()
	var r ran
	select {
	case r = <-done:
	case <-lctx.Done():
	}
	uctx := context.WithoutCancel(ctx)
	if lctx.Err() != nil {
		// The lease ended (lost, or the Client closed) or the flight's
		// callers all left before fn returned: nothing of fn's is shared,
		// and nobody waits for fn.
		lost := errors.Is(l.Err(), ErrLockLost)
		uerr := l.Unlock(uctx)
		if lost && ctx.Err() == nil && !a.e.closed() {
			return nil, true, nil
		}
		return nil, false, errors.Join(context.Cause(lctx), uerr)
	}
	val, err = r.val, r.err
	if err == nil && len(val) > g.cfg.maxResultLen {
		err = op(fmt.Errorf("a result of %d bytes: at most %d are shared (WithMaxResultLen)", len(val), g.cfg.maxResultLen))
		return nil, false, errors.Join(err, l.Unlock(uctx))
	}
	res := protocol.Result{Value: string(val)}
	if err != nil {
		res = protocol.Result{Failed: true, Value: err.Error()}
	}
	groups := a.e.backend.(protocol.Groups)
	if _, serr := groups.Share(uctx, a.k, l.Owner(), l.Fence(), res, g.keep()); serr != nil {
		a.e.log.Warn("dlock: a Group's result was not shared; the callers waiting run the function again", "group", g.name, "key", a.k.Name, "err", serr)
	}
	if uerr := l.Unlock(uctx); uerr != nil {
		err = errors.Join(err, uerr)
	}
	return val, false, err
}

// keep is how long Redis keeps a result: for WithResultTTL, and at least a
// lease's TTL, within which the callers waiting in line read it.
func (g *Group) keep() time.Duration {
	return max(g.cfg.resultTTL, g.cfg.ttl)
}

// result is what Do returns for r, another run's result.
func (g *Group) result(r protocol.Result) ([]byte, bool, error) {
	if r.Failed {
		return nil, false, &ResultError{Msg: r.Value}
	}
	return []byte(r.Value), false, nil
}
