package promises

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// DialCluster returns a Client on the Redis Cluster whose nodes are at
// addrs, which the caller closes.
type DialCluster func(t *testing.T, addrs []string, opts ...dlock.Option) *dlock.Client

// RunCluster runs the promise-level tests that a Cluster adds, on Clients
// that dial makes, on a Cluster of three primaries with a replica each of
// their own: locks on every primary, wake-ups on the shard that serves
// each lock's channel, renewals grouped per server, Locks over every
// primary, and WAIT on the primary of each lock.
func RunCluster(t *testing.T, dial DialCluster) {
	redistest.Full(t, "a Cluster")
	cl := redistest.StartCluster(t, 3, 1)
	client := func(t *testing.T, opts ...dlock.Option) *dlock.Client {
		c := dial(t, cl.Addrs(), opts...)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	// names spread over the slots, and so over the primaries.
	names := make([]string, 24)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i)
	}

	t.Run("EveryPrimary", func(t *testing.T) {
		ctx := timeout(t)
		c := client(t, dlock.WithTTL(time.Second))
		var held []*dlock.Lease
		for _, n := range names {
			l, err := c.Mutex(n).Lock(ctx)
			if err != nil {
				t.Fatalf("Lock %q: %v", n, err)
			}
			held = append(held, l)
		}
		// Renewed, server by server, past three TTLs.
		time.Sleep(3 * time.Second)
		for _, l := range held {
			if err := l.Err(); err != nil {
				t.Fatalf("lease of %q: %v, want it renewed", l.Name(), err)
			}
		}
		var listed []string
		for id, err := range c.Locks(ctx, "n*") {
			if err != nil {
				t.Fatal(err)
			}
			listed = append(listed, id.Name)
		}
		for _, n := range names {
			if !slices.Contains(listed, n) {
				t.Fatalf("Locks lists %v, without %q", listed, n)
			}
		}
		for _, l := range held {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("WokenByGrant", func(t *testing.T) {
		ctx := timeout(t)
		// A TTL far beyond the test's deadline: only a grant can hand
		// each lock over in time.
		a, b := client(t, dlock.WithTTL(5*time.Minute)), client(t, dlock.WithTTL(5*time.Minute))
		for _, n := range names[:6] {
			l, err := a.Mutex(n).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				wl, err := b.Mutex(n).Lock(ctx)
				if err == nil {
					err = wl.Unlock(ctx)
				}
				got <- err
			}()
			waitQueued(t, ctx, a, dlock.KindMutex, n, 1)
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("the waiter of %q: %v", n, err)
			}
		}
	})

	t.Run("WaitReplicas", func(t *testing.T) {
		ctx := timeout(t)
		c := client(t, dlock.WithWaitReplicas(1, 2*time.Second))
		if err := c.Check(ctx); err != nil {
			t.Fatal(err)
		}
		for _, n := range names[:6] {
			l, err := c.Mutex(n).Lock(ctx)
			if err != nil {
				t.Fatalf("Lock %q waiting for a replica: %v", n, err)
			}
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Fatalf("Extend %q waiting for a replica: %v", n, err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}
