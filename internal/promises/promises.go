// Package promises holds the promise-level tests of dlock: what a user may
// count on whatever Redis client a Client was built on. Each client of the
// client seam (go-redis in the core's own tests, and each client module)
// runs the same suite, Run, with a Dial of its own; every test starts its
// own server (internal/redistest, DLOCK_REDIS_SERVER) and, where a request
// is to be lost, a fault proxy in front of it (internal/faultproxy).
package promises

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Dial returns a Client on the Redis server at addr, which the caller closes.
// password is the server's ("" if none).
type Dial func(t *testing.T, addr, password string, opts ...dlock.Option) *dlock.Client

// Run runs every promise-level test on Clients that dial makes, on one
// server of their own, each test on names of its own.
func Run(t *testing.T, dial Dial) {
	s := &suite{dial: dial, srv: redistest.Start(t)}
	t.Run("Fences", s.fences)
	t.Run("Order", s.order)
	t.Run("LostLease", s.lostLease)
	t.Run("LostAcquireReply", s.lostAcquireReply)
	t.Run("LostUnlockReply", s.lostUnlockReply)
	t.Run("LateAcquire", s.lateAcquire)
	t.Run("Election", s.election)
	t.Run("Group", s.group)
}

type suite struct {
	dial Dial
	srv  *redistest.Server
}

// client returns a Client on the suite's server (through p, if not nil),
// closed when t ends.
func (s *suite) client(t *testing.T, p *faultproxy.Proxy, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	addr := s.srv.Addr
	if p != nil {
		addr = p.Addr()
	}
	c := s.dial(t, addr, s.srv.Password, opts...)
	t.Cleanup(func() {
		// Close stops what the Client runs, its wake-up connection's
		// receive loop included: it does not wait out that connection's
		// health check (30s), nor anything else of the Client's own.
		done := make(chan struct{})
		go func() {
			_ = c.Close()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Close has not returned after 10s")
			<-done
		}
	})
	return c
}

// timeout bounds a test's waits: long enough for a loaded machine, short
// enough that a hang fails the test rather than the suite.
func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// fences: every acquisition of a name gets a larger fence than every
// earlier one, across Clients and kinds of release.
func (s *suite) fences(t *testing.T) {
	t.Parallel()
	ctx := timeout(t)
	a, b := s.client(t, nil), s.client(t, nil)
	var last int64
	for i := range 20 {
		c := a
		if i%2 == 1 {
			c = b
		}
		l, err := c.Mutex("fenced").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("acquisition %d: fence %d, want above the last, %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if i%3 == 0 {
			// Taken away rather than released.
			if _, err := c.ForceRelease(ctx, dlock.KindMutex, "fenced"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// order: waiters of a Mutex and of a FairMutex are served in the order they
// registered.
func (s *suite) order(t *testing.T) {
	for _, kind := range []dlock.Kind{dlock.KindMutex, dlock.KindFairMutex} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ctx := timeout(t)
			c := s.client(t, nil)
			lock := func(c *dlock.Client) (*dlock.Lease, error) {
				if kind == dlock.KindFairMutex {
					return c.FairMutex("line").Lock(ctx)
				}
				return c.Mutex("line").Lock(ctx)
			}
			first, err := lock(c)
			if err != nil {
				t.Fatal(err)
			}
			const n = 4
			var (
				mu     sync.Mutex
				served []int // in the order the waiters held the lock
				wg     sync.WaitGroup
			)
			for i := range n {
				w := s.client(t, nil)
				wg.Go(func() {
					l, err := lock(w)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					served = append(served, i)
					mu.Unlock()
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
					}
				})
				waitQueued(t, ctx, c, kind, "line", i+1)
			}
			if err := first.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			for want, i := range served {
				if i != want {
					t.Fatalf("served the waiters in the order %v, want the order of registration", served)
				}
			}
			if len(served) != n {
				t.Fatalf("served %d of %d waiters", len(served), n)
			}
		})
	}
}

// waitQueued waits until the lock has n waiters registered.
func waitQueued(t *testing.T, ctx context.Context, c *dlock.Client, kind dlock.Kind, name string, n int) {
	t.Helper()
	for {
		st, err := c.Inspect(ctx, kind, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Waiters) >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d waiters registered, want %d", len(st.Waiters), n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// lostLease: a lease whose lock Redis lost is told by Done and Err
// (ErrLockLost) while its holder holds it, and its Unlock does not say nil.
func (s *suite) lostLease(t *testing.T) {
	t.Parallel()
	ctx := timeout(t)
	c := s.client(t, nil, dlock.WithTTL(time.Second))
	admin := s.client(t, nil)
	l, err := c.Mutex("lost").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ForceRelease(ctx, dlock.KindMutex, "lost"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the loss was never told")
	}
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Fatalf("Err: %v, want ErrLockLost", l.Err())
	}
	if err := l.Unlock(ctx); err == nil {
		t.Fatal("Unlock of a lost lease: nil")
	}
}

// lostAcquireReply: an acquire whose reply is lost after it ran is sent
// again, and Lock returns the hold the first copy took: Redis holds it for
// the lease's owner, with the lease's fence, and Unlock frees it.
func (s *suite) lostAcquireReply(t *testing.T) {
	t.Parallel()
	ctx := timeout(t)
	p := faultproxy.Start(t, s.srv.Addr)
	c := s.client(t, p)
	admin := s.client(t, nil)
	in := p.Inject(faultproxy.Rule{Match: call(protocol.AcquireLua, "taken"), Fault: faultproxy.DropReply, Times: 1})
	l, err := c.Mutex("taken").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in.Hits() != 1 {
		t.Fatalf("the fault applied %d times, want 1", in.Hits())
	}
	st, err := admin.Inspect(ctx, dlock.KindMutex, "taken")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 1 || st.Holders[0].Owner != l.Owner() || st.Holders[0].Fence != l.Fence() {
		t.Fatalf("Redis holds %+v, want the lease's owner %s with fence %d", st.Holders, l.Owner(), l.Fence())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err = admin.Inspect(ctx, dlock.KindMutex, "taken"); err != nil || len(st.Holders) != 0 {
		t.Fatalf("after Unlock: holders %+v (%v), want none", st.Holders, err)
	}
}

// lostUnlockReply: an Unlock whose reply is lost after it ran returns nil
// (the lock was released by it), and the lock is free.
func (s *suite) lostUnlockReply(t *testing.T) {
	t.Parallel()
	ctx := timeout(t)
	p := faultproxy.Start(t, s.srv.Addr)
	c := s.client(t, p)
	admin := s.client(t, nil)
	l, err := c.Mutex("given").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in := p.Inject(faultproxy.Rule{Match: call(protocol.ReleaseLua, "given"), Fault: faultproxy.DropReply, Times: 1})
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with its reply lost: %v, want nil", err)
	}
	if in.Hits() != 1 {
		t.Fatalf("the fault applied %d times, want 1", in.Hits())
	}
	st, err := admin.Inspect(ctx, dlock.KindMutex, "given")
	if err != nil || len(st.Holders) != 0 {
		t.Fatalf("after Unlock: holders %+v (%v), want none", st.Holders, err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("the lease after Unlock: not ended")
	}
}

// lateAcquire: a copy of an acquire that reaches Redis after its owner's
// Lock returned (its reply lost, the request sent again) and after that
// owner's Unlock takes nothing: the lock stays free for the next owner.
func (s *suite) lateAcquire(t *testing.T) {
	t.Parallel()
	ctx := timeout(t)
	p := faultproxy.Start(t, s.srv.Addr)
	c := s.client(t, p, dlock.WithTTL(30*time.Second))
	admin := s.client(t, nil)
	held := p.Inject(faultproxy.Rule{Match: call(protocol.AcquireLua, "late"), Fault: faultproxy.HoldRequest, Times: 1})
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := c.Mutex("late").Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-held.Hit():
	case <-ctx.Done():
		t.Fatal("the first copy was never held")
	}
	l := <-got // sent again on a new connection after the first one's timeout
	if l == nil {
		return
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	held.Release()
	select {
	case <-held.Delivered():
	case <-ctx.Done():
		t.Fatal("the held copy was never delivered")
	}
	st, err := admin.Inspect(ctx, dlock.KindMutex, "late")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 0 {
		t.Fatalf("after the late copy: holders %+v, want none", st.Holders)
	}
	next, err := admin.Mutex("late").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the late copy: %v", err)
	}
	_ = next.Unlock(ctx)
}

// election: one leader at a time; a campaigner waits for the leader's
// Resign and then leads with a higher term; Leader tells who leads.
func (s *suite) election(t *testing.T) {
	t.Parallel()
	ctx := timeout(t)
	a, b := s.client(t, nil), s.client(t, nil)
	la, err := a.Election("e").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Leadership, 1)
	go func() {
		lb, err := b.Election("e").Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	waitQueued(t, ctx, a, dlock.KindElection, "e", 1)
	if who, err := b.Election("e").Leader(ctx); err != nil || who.Value != "a" || who.Term != la.Term() {
		t.Fatalf("Leader while a leads: %+v (%v), want a, term %d", who, err, la.Term())
	}
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil {
		return
	}
	if lb.Term() <= la.Term() {
		t.Fatalf("the next leader's term %d, want above %d", lb.Term(), la.Term())
	}
	if who, err := a.Election("e").Leader(ctx); err != nil || who.Value != "b" {
		t.Fatalf("Leader after the Resign: %+v (%v), want b", who, err)
	}
	if err := lb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// group: of the callers of a key in three Clients, one runs the function
// and the others get its result without running it, also when the reply
// of the runner's write of the result is lost and the write is sent again.
func (s *suite) group(t *testing.T) {
	t.Parallel()
	ctx := timeout(t)
	p := faultproxy.Start(t, s.srv.Addr)
	runner := s.client(t, p)
	others := []*dlock.Client{s.client(t, nil), s.client(t, nil)}
	in := p.Inject(faultproxy.Rule{Match: faultproxy.Script(protocol.GroupShareLua), Fault: faultproxy.DropReply, Times: 1})
	var runs atomic.Int64
	fn := func(ctx context.Context) ([]byte, error) {
		runs.Add(1)
		waitQueued(t, ctx, others[0], dlock.KindGroup, "g/k", len(others))
		return []byte("v"), nil
	}
	type call struct {
		v      []byte
		shared bool
		err    error
	}
	calls := make(chan call, 1+len(others))
	do := func(c *dlock.Client) {
		v, shared, err := c.Group("g").Do(ctx, "k", fn)
		calls <- call{v, shared, err}
	}
	go do(runner)
	for {
		st, err := others[0].Inspect(ctx, dlock.KindGroup, "g/k")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Holders) == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, c := range others {
		go do(c)
	}
	unshared := 0
	for range 1 + len(others) {
		c := <-calls
		if c.err != nil || string(c.v) != "v" {
			t.Errorf("a caller got %q, %v", c.v, c.err)
		}
		if !c.shared {
			unshared++
		}
	}
	if runs.Load() != 1 || unshared != 1 {
		t.Errorf("the function ran %d times and %d callers ran it; want 1 and 1", runs.Load(), unshared)
	}
	if in.Hits() != 1 {
		t.Errorf("the fault applied %d times, want 1", in.Hits())
	}
}

// call matches the calls of the script src about the Mutex called name.
func call(src, name string) faultproxy.Match {
	return faultproxy.And(faultproxy.Script(src), faultproxy.HasArg(fmt.Sprintf("dlock:{%s}", name)))
}
