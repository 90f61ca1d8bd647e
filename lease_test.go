package dlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dlock-go/dlock"
)

// TestLeaseFromContext: the function Do runs finds in its context the Lease
// it runs under, of every kind of lock that has a Do, with the fence Redis
// handed out; a nested Do's context carries its own Lease and a re-entered
// one the fence of the hold it re-entered; Lease.Context carries its Lease;
// a MultiLock's context and a context carrying none report none.
func TestLeaseFromContext(t *testing.T) {
	t.Parallel()
	c, _, _ := newClient(t)
	ctx := context.Background()

	// seen runs as a Do's function: it reads the Lease from the context and
	// checks it is the one Redis shows holding name.
	seen := func(kind dlock.Kind, name string) func(context.Context) error {
		return func(ctx context.Context) error {
			l, ok := dlock.LeaseFromContext(ctx)
			if !ok || l == nil {
				return errors.New("no Lease in the context of Do's function")
			}
			st, err := c.Inspect(ctx, kind, name)
			if err != nil {
				return err
			}
			if l.Name() != name || l.Err() != nil || len(st.Holders) == 0 || st.Holders[0].Owner != l.Owner() || st.Holders[0].Fence != l.Fence() {
				return errors.New("the context's Lease is not the hold Redis shows")
			}
			return nil
		}
	}
	for _, tc := range []struct {
		kind dlock.Kind
		name string
		do   func(context.Context, func(context.Context) error) error
	}{
		{dlock.KindMutex, "m", c.Mutex("m").Do},
		{dlock.KindFairMutex, "f", c.FairMutex("f").Do},
		{dlock.KindRWMutex, "w", c.RWMutex("w").Do},
		{dlock.KindRWMutex, "r", c.RWMutex("r").RDo},
	} {
		if err := tc.do(ctx, seen(tc.kind, tc.name)); err != nil {
			t.Errorf("%s %q: %v", tc.kind, tc.name, err)
		}
	}

	// Nested: each Do's function sees its own Lease; a re-entry has the
	// fence of the hold it re-entered.
	err := c.Mutex("outer").Do(ctx, func(octx context.Context) error {
		outer, _ := dlock.LeaseFromContext(octx)
		err := c.Mutex("inner").Do(octx, func(ictx context.Context) error {
			if inner, ok := dlock.LeaseFromContext(ictx); !ok || inner.Name() != "inner" {
				t.Errorf("nested Do: LeaseFromContext = %v, %v; want the inner Lease", inner, ok)
			}
			return c.Mutex("outer").Do(ictx, func(rctx context.Context) error {
				re, ok := dlock.LeaseFromContext(rctx)
				if !ok || re == outer || re.Name() != "outer" || re.Fence() != outer.Fence() {
					t.Errorf("re-entered Do: LeaseFromContext = %v, %v; want a Lease of its own with the outer fence %d", re, ok, outer.Fence())
				}
				return nil
			})
		})
		if l, ok := dlock.LeaseFromContext(octx); !ok || l != outer {
			t.Errorf("after the nested Do: LeaseFromContext = %v, %v; want the outer Lease", l, ok)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// Lease.Context carries its Lease, also in a context derived from it.
	held, err := c.Mutex("ctx").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := held.Context(ctx)
	dctx, dcancel := context.WithCancel(lctx)
	if got, ok := dlock.LeaseFromContext(dctx); !ok || got != held {
		t.Errorf("LeaseFromContext of a context derived from Lease.Context = %v, %v; want the Lease", got, ok)
	}
	dcancel()
	cancel()
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A MultiLock stands for several leases: none is the context's Lease,
	// but a Do within it has its own.
	err = c.MultiLock([]string{"a", "b"}).Do(ctx, func(mctx context.Context) error {
		if l, ok := dlock.LeaseFromContext(mctx); ok {
			t.Errorf("MultiLock.Do: LeaseFromContext = %v, true; want none", l)
		}
		return c.Mutex("c").Do(mctx, func(cctx context.Context) error {
			if l, ok := dlock.LeaseFromContext(cctx); !ok || l.Name() != "c" {
				t.Errorf("Do within MultiLock.Do: LeaseFromContext = %v, %v; want c's Lease", l, ok)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, bare := range []context.Context{ctx, nil} {
		if l, ok := dlock.LeaseFromContext(bare); ok || l != nil {
			t.Errorf("LeaseFromContext(%v) = %v, %v; want none", bare, l, ok)
		}
	}
}

// TestLeaseFromContextLeadership: a Leadership's context hands out no Lease:
// leadership ends by Resign, which an Unlock of the lease under it would skip.
func TestLeaseFromContextLeadership(t *testing.T) {
	t.Parallel()
	c, _, _ := newClient(t)
	ctx := context.Background()
	ld, err := c.Election("e").Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := ld.Context(ctx)
	defer cancel()
	if l, ok := dlock.LeaseFromContext(lctx); ok || l != nil {
		t.Errorf("LeaseFromContext in a Leadership's context: %v, %v; want none", l, ok)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
