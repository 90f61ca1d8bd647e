package promises

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
)

// RunWithoutScripts runs the promises of a Client made with
// dlock.WithoutScripts on Clients that dial makes: its requests are
// MULTI/EXEC transactions and pipelines, which each client of the seam
// must carry. It needs SET … IFEQ and DELIFEQ (Valkey 9.0 or later): on
// another server it skips, unless DLOCK_PLAIN_REQUIRED is set (CI's Valkey
// 9.1 step), which makes that a failure.
func RunWithoutScripts(t *testing.T, dial Dial) {
	srv := redistest.Start(t)
	if err := srv.Client(t).Do(context.Background(), "delifeq", "probe", "x").Err(); err != nil {
		if os.Getenv("DLOCK_PLAIN_REQUIRED") != "" {
			t.Fatalf("DLOCK_PLAIN_REQUIRED is set, but the server does not run DELIFEQ: %v", err)
		}
		t.Skipf("the server does not run DELIFEQ (%v): WithoutScripts needs Valkey 9.0 or later", err)
	}
	s := &suite{dial: func(t *testing.T, addr, password string, opts ...dlock.Option) *dlock.Client {
		return dial(t, addr, password, append([]dlock.Option{dlock.WithoutScripts()}, opts...)...)
	}, srv: srv}
	t.Run("Exclusion", s.plainExclusion)
	t.Run("Lease", s.plainLease)
	t.Run("Wake", s.plainWake)
	t.Run("LostReplies", s.plainLostReplies)
}

// plainExclusion: Check passes; one Client at a time holds a name, TryLock
// of a held name fails with ErrNotAcquired, and every acquisition's fence
// is above the last.
func (s *suite) plainExclusion(t *testing.T) {
	t.Parallel()
	ctx := timeout(t)
	a, b := s.client(t, nil), s.client(t, nil)
	if err := a.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	var last int64
	for i := range 10 {
		c, other := a, b
		if i%2 == 1 {
			c, other = b, a
		}
		l, err := c.Mutex("plain").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("acquisition %d: fence %d, want above the last, %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if _, err := other.Mutex("plain").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock of a held name: %v, want ErrNotAcquired", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// plainLease: a lease is renewed past its TTL, its Extend holds through a
// renewal, and its loss (the key deleted) is told by Done and Err, and by
// Unlock.
func (s *suite) plainLease(t *testing.T) {
	t.Parallel()
	ctx := timeout(t)
	const ttl = 300 * time.Millisecond
	c := s.client(t, nil, dlock.WithTTL(ttl))
	l, err := c.Mutex("lease").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * ttl)
	if err := l.Err(); err != nil {
		t.Fatalf("after 4 TTLs: %v, want the lease renewed", err)
	}
	if err := l.Extend(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond) // a renewal every second; without one, 1.8s would be left
	if left, err := l.TTL(ctx); err != nil || left < 2*time.Second {
		t.Fatalf("TTL after the Extend and a renewal: %v, %v; want at least 2s of 3s", left, err)
	}
	if err := s.srv.Client(t).Del(ctx, "dlock:{lease}").Err(); err != nil {
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
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock of a lost lease: %v, want ErrLockLost", err)
	}
}

// plainWake: a waiter is woken by the release, long before its timer (the
// holder's TTL is 30s: it would look again after 5s).
func (s *suite) plainWake(t *testing.T) {
	t.Parallel()
	ctx := timeout(t)
	a := s.client(t, nil, dlock.WithTTL(30*time.Second))
	b := s.client(t, nil, dlock.WithTTL(30*time.Second))
	l, err := a.Mutex("wake").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		w, err := b.Mutex("wake").Lock(ctx)
		if err != nil {
			w = nil
		}
		got <- w
	}()
	admin := s.srv.Client(t)
	for admin.PubSubShardNumSub(ctx, "dlock:{wake}:wake").Val()["dlock:{wake}:wake"] == 0 {
		if ctx.Err() != nil {
			t.Fatal("the waiter never subscribed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // its attempt after subscribing is in
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-got:
		if w == nil {
			t.Fatal("the waiter's Lock failed")
		}
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
}

// plainLostReplies: an acquire whose reply is lost is sent again and finds
// the lock its own; an Unlock whose reply is lost frees the lock, and
// returns nil or ErrLockLost saying it may be a false alarm.
func (s *suite) plainLostReplies(t *testing.T) {
	t.Parallel()
	ctx := timeout(t)
	p := faultproxy.Start(t, s.srv.Addr)
	c := s.client(t, p)
	if err := c.Check(ctx); err != nil {
		t.Fatal(err)
	}
	admin := s.srv.Client(t)
	in := p.Inject(faultproxy.Rule{Match: faultproxy.CommandIs("exec"), Fault: faultproxy.DropReply, Times: 1})
	l, err := c.Mutex("lost").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in.Hits() != 1 {
		t.Fatalf("the fault applied %d times, want 1", in.Hits())
	}
	if v := admin.Get(ctx, "dlock:{lost}").Val(); v != "p1|"+l.Owner()+"|0" {
		t.Fatalf("the lock holds %q, want the owner's %s", v, l.Owner())
	}
	in = p.Inject(faultproxy.Rule{Match: faultproxy.CommandIs("exec"), Fault: faultproxy.DropReply, Times: 1})
	err = l.Unlock(ctx)
	if in.Hits() != 1 {
		t.Fatalf("the fault applied %d times, want 1", in.Hits())
	}
	if err != nil && !(errors.Is(err, dlock.ErrLockLost) && strings.Contains(err.Error(), "false alarm")) {
		t.Fatalf("Unlock after a lost reply: %v, want nil or a possible false alarm", err)
	}
	if n := admin.Exists(ctx, "dlock:{lost}").Val(); n != 0 {
		t.Fatal("the lock is still there")
	}
}
