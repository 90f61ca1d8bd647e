package dlock

// The engine's fast tests: a Client on a scripted Backend
// (internal/backendtest), time under testing/synctest, no server. What
// the engine decides is proved here (when a lease is renewed, lost, given
// back; how a waiter waits, gives up and rides out an outage; what a lost
// reply of an acquire leaves); that Redis keeps the rules the fake keeps is
// proved against real servers by the rest of the suite.

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-go/dlock/internal/backendtest"
	"github.com/dlock-go/dlock/internal/protocol"
)

// fakeClient returns a Client on f, closed when the test ends.
func fakeClient(t *testing.T, f *backendtest.Fake, opts ...Option) *Client {
	t.Helper()
	cfg, err := defaultConfig().with(opts, true)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newClient(f, cfg, "New", make(chan struct{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// count returns how many calls of op on name f received.
func count(f *backendtest.Fake, op, name string) int {
	n := 0
	for _, c := range f.Calls() {
		if c.Op == op && c.Name == name {
			n++
		}
	}
	return n
}

// TestEngineRenews: a lease of TTL 1 s lives 10 s while renewed, each
// renewal before it lapses, and its Unlock frees the lock.
func TestEngineRenews(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := backendtest.New()
		c := fakeClient(t, f, WithTTL(time.Second))
		l, err := c.Mutex("m").Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		if err := l.Err(); err != nil {
			t.Fatalf("lease after 10 TTLs: %v, want it held", err)
		}
		if owner, _ := f.Holder("m"); owner != l.Owner() {
			t.Fatalf("holder %q, want the lease's owner %q", owner, l.Owner())
		}
		if n := count(f, "extend", "m"); n < 10 {
			t.Fatalf("%d extends in 10 TTLs, want at least one per TTL", n)
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		if owner, _ := f.Holder("m"); owner != "" {
			t.Fatalf("holder %q after Unlock, want none", owner)
		}
		if err := l.Unlock(t.Context()); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
		}
	})
}

// TestEngineWithoutRenewal: a lease without renewal lapses at its TTL, and
// its Done tells so.
func TestEngineWithoutRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := backendtest.New()
		c := fakeClient(t, f, WithTTL(time.Second), WithoutRenewal())
		l, err := c.Mutex("m").Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		<-l.Done()
		if !errors.Is(l.Err(), ErrLockLost) {
			t.Fatalf("Err: %v, want ErrLockLost", l.Err())
		}
		if n := count(f, "extend", "m"); n != 0 {
			t.Fatalf("%d extends, want none", n)
		}
	})
}

// TestEngineLoss: a hold Redis lost is told by Done and Err at the next
// renewal, and its Unlock does not say nil.
func TestEngineLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := backendtest.New()
		c := fakeClient(t, f, WithTTL(3*time.Second))
		l, err := c.Mutex("m").Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		f.Drop("m")
		select {
		case <-l.Done():
		case <-time.After(3 * time.Second):
			t.Fatal("the loss was not told within a TTL")
		}
		if !errors.Is(l.Err(), ErrLockLost) {
			t.Fatalf("Err: %v, want ErrLockLost", l.Err())
		}
		if err := l.Unlock(t.Context()); err == nil {
			t.Fatal("Unlock of a lost hold: nil")
		}
	})
}

// TestEngineWaiterTakesFreed: a waiter on a Backend without wake-up
// channels takes the lock once its holder frees it, by asking again as the
// holder's lease runs out, with a higher fence; and its registration is
// gone once it holds.
func TestEngineWaiterTakesFreed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := backendtest.New()
		c := fakeClient(t, f, WithTTL(2*time.Second))
		a, err := c.Mutex("m").Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *Lease)
		go func() {
			b, err := c.Mutex("m").Lock(t.Context())
			if err != nil {
				t.Error(err)
			}
			got <- b
		}()
		synctest.Wait()
		if f.Waiters("m") != 1 {
			t.Fatalf("%d waiters registered, want 1", f.Waiters("m"))
		}
		if err := a.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		b := <-got
		if b == nil {
			return
		}
		if b.Fence() <= a.Fence() {
			t.Fatalf("the waiter's fence %d, want above the first holder's %d", b.Fence(), a.Fence())
		}
		if owner, _ := f.Holder("m"); owner != b.Owner() {
			t.Fatalf("holder %q, want the waiter %q", owner, b.Owner())
		}
		if err := b.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestEngineWaiterGivesUp: a waiter whose context ends returns an error
// matching ErrNotAcquired and the context's, and unregisters.
func TestEngineWaiterGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := backendtest.New()
		c := fakeClient(t, f, WithTTL(time.Minute))
		if _, err := c.Mutex("m").Lock(t.Context()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := c.Mutex("m").Lock(ctx)
		if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock past its deadline: %v, want ErrNotAcquired and DeadlineExceeded", err)
		}
		synctest.Wait()
		left := false
		for _, call := range f.Calls() {
			left = left || call.Op == "release" && call.Mode == protocol.ReleaseLeave
		}
		if !left || f.Waiters("m") != 0 {
			t.Fatalf("after giving up: leave sent %v, %d waiters registered; want sent and none", left, f.Waiters("m"))
		}
	})
}

// TestEngineLostAcquireReply: an acquire that took the lock and whose reply
// was lost is followed by one that finds the lock held by its own owner:
// Lock returns that hold (its fence, no second take), and its lease is
// dated from the first request, 3 s before the second, not from the second.
func TestEngineLostAcquireReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := backendtest.New()
		acquires := 0
		f.SetFault(func(c backendtest.Call) backendtest.Fault {
			if c.Op != "acquire" || c.Name != "m" {
				return backendtest.Pass
			}
			if acquires++; acquires == 1 {
				return backendtest.LoseReply
			}
			return backendtest.Pass
		})
		f.SetLostAfter(3 * time.Second) // a read timeout
		c := fakeClient(t, f, WithTTL(4*time.Second), WithoutRenewal())
		// The Client has reached Redis before: a failure is an outage to
		// ride out, not a wrong address.
		if _, err := c.Mutex("warm").TryLock(t.Context()); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		l, err := c.Mutex("m").Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if acquires < 2 || l.Fence() != 1 {
			t.Fatalf("%d acquires, fence %d: want the lost one and a retry that finds fence 1", acquires, l.Fence())
		}
		<-l.Done()
		if lived := time.Since(start); lived > 4*time.Second {
			t.Fatalf("the lease was held locally %v after the first request; its TTL is 4s", lived)
		}
	})
}

// TestEngineRidesOutage: a waiting Lock rides out a Backend that refuses
// every request for a while, once it has reached it before, and takes the
// lock when it answers again.
func TestEngineRidesOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := backendtest.New()
		c := fakeClient(t, f, WithTTL(time.Second))
		l, err := c.Mutex("warm").Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		down := time.Now().Add(5 * time.Second)
		f.SetFault(func(backendtest.Call) backendtest.Fault {
			if time.Now().Before(down) {
				return backendtest.Refuse
			}
			return backendtest.Pass
		})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		l, err = c.Mutex("m").Lock(ctx)
		if err != nil {
			t.Fatalf("Lock across a 5 s outage: %v", err)
		}
		if time.Now().Before(down) {
			t.Fatal("Lock returned during the outage")
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestEngineUnlockRefused: an Unlock whose request never reaches the server
// returns an error saying so, and the lease is over locally.
func TestEngineUnlockRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := backendtest.New()
		c := fakeClient(t, f, WithTTL(time.Second))
		l, err := c.Mutex("m").Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		f.SetFault(func(c backendtest.Call) backendtest.Fault {
			if c.Op == "release" {
				return backendtest.Refuse
			}
			return backendtest.Pass
		})
		err = l.Unlock(t.Context())
		if err == nil || !errors.Is(err, backendtest.ErrRefused) {
			t.Fatalf("Unlock refused: %v, want an error wrapping the refusal", err)
		}
	})
}

// TestEngineUnsupported: a Backend without a capability makes each call
// that needs it return errors.ErrUnsupported, naming the deployment, and
// sends nothing.
func TestEngineUnsupported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := backendtest.New()
		c := fakeClient(t, f)
		ctx := t.Context()
		calls := []struct {
			what string
			err  error
		}{
			{"Semaphore.Acquire", func() error { _, err := c.Semaphore("s", 1).Acquire(ctx, 1); return err }()},
			{"CountDownLatch.Count", func() error { _, err := c.CountDownLatch("l").Count(ctx); return err }()},
			{"Election.Campaign", func() error { _, err := c.Election("e").Campaign(ctx, "v"); return err }()},
			{"Inspect", func() error { _, err := c.Inspect(ctx, KindMutex, "m"); return err }()},
		}
		for _, call := range calls {
			if !errors.Is(call.err, errors.ErrUnsupported) {
				t.Errorf("%s: %v, want errors.ErrUnsupported", call.what, call.err)
			}
		}
		if n := len(f.Calls()); n != 0 {
			t.Fatalf("%d requests sent, want none", n)
		}
	})
}
