package promises

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// DialSentinel returns a Client on the primary that the sentinels at addrs
// monitor under the name master, which the caller closes.
type DialSentinel func(t *testing.T, addrs []string, master string, opts ...dlock.Option) *dlock.Client

// RunSentinel runs the promises of a Sentinel set-up (a primary, a replica,
// three sentinels): Check, a lock handed to its waiter by a grant, and
// after a failover, a lock taken on the new primary with a fence above every
// one given out before.
func RunSentinel(t *testing.T, dial DialSentinel) {
	redistest.Full(t, "a Sentinel set-up")
	s := redistest.StartSentinel(t, 1, 3)
	ctx := timeout(t)
	client := func(opts ...dlock.Option) *dlock.Client {
		c := dial(t, s.SentinelAddrs(), redistest.SentinelMaster, opts...)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b := client(dlock.WithTTL(5*time.Minute)), client(dlock.WithTTL(5*time.Minute))
	if err := a.Check(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := a.Mutex("s").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		wl, err := b.Mutex("s").Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- wl
	}()
	waitQueued(t, ctx, a, dlock.KindMutex, "s", 1)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wl := <-got
	if wl == nil {
		return
	}
	if err := wl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := a.Mutex("s").Lock(ctx) // rides out the failover
	if err != nil {
		t.Fatalf("Lock after the failover: %v", err)
	}
	if after.Fence() <= wl.Fence() {
		t.Fatalf("fence %d after the failover, want above %d", after.Fence(), wl.Fence())
	}
	if err := after.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
