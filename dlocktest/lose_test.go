package dlocktest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// held is a lease of any kind dlocktest takes away.
type held struct {
	lease *dlock.Lease
	ld    *dlock.Leadership
}

func (h held) done() <-chan struct{} {
	if h.ld != nil {
		return h.ld.Done()
	}
	return h.lease.Done()
}

func (h held) err() error {
	if h.ld != nil {
		return h.ld.Err()
	}
	return h.lease.Err()
}

func (h held) fence() int64 {
	if h.ld != nil {
		return h.ld.Term()
	}
	return h.lease.Fence()
}

func lose(t testing.TB, h held) {
	if h.ld != nil {
		dlocktest.Lose(t, h.ld)
		return
	}
	dlocktest.Lose(t, h.lease)
}

func steal(t testing.TB, h held) {
	if h.ld != nil {
		dlocktest.Steal(t, h.ld)
		return
	}
	dlocktest.Steal(t, h.lease)
}

// A kind of lease: how to take one, how Inspect names its lock, and how a
// rival takes the same thing (nil error: it got it).
type kind struct {
	name   string
	kind   dlock.Kind
	always bool // always renewed: WithoutRenewal is an error
	take   func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.Option) (held, error)
	rival  func(ctx context.Context, c *dlock.Client, name string) (int64, error)
}

func lease(l *dlock.Lease, err error) (held, error) { return held{lease: l}, err }

func fenceOf(l *dlock.Lease, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return l.Fence(), nil
}

var kinds = []kind{
	{"Mutex", dlock.KindMutex, false,
		func(ctx context.Context, c *dlock.Client, n string, o ...dlock.Option) (held, error) {
			return lease(c.Mutex(n, o...).Lock(ctx))
		},
		func(ctx context.Context, c *dlock.Client, n string) (int64, error) {
			return fenceOf(c.Mutex(n).TryLock(ctx))
		}},
	{"FairMutex", dlock.KindFairMutex, false,
		func(ctx context.Context, c *dlock.Client, n string, o ...dlock.Option) (held, error) {
			return lease(c.FairMutex(n, o...).Lock(ctx))
		},
		func(ctx context.Context, c *dlock.Client, n string) (int64, error) {
			return fenceOf(c.FairMutex(n).TryLock(ctx))
		}},
	{"RWMutex read", dlock.KindRWMutex, false,
		func(ctx context.Context, c *dlock.Client, n string, o ...dlock.Option) (held, error) {
			return lease(c.RWMutex(n, o...).RLock(ctx))
		},
		// A writer: it gets the lock only if no reader holds it.
		func(ctx context.Context, c *dlock.Client, n string) (int64, error) {
			return fenceOf(c.RWMutex(n).TryLock(ctx))
		}},
	{"RWMutex write", dlock.KindRWMutex, false,
		func(ctx context.Context, c *dlock.Client, n string, o ...dlock.Option) (held, error) {
			return lease(c.RWMutex(n, o...).Lock(ctx))
		},
		// A reader: it gets a hold only if no writer holds the lock.
		func(ctx context.Context, c *dlock.Client, n string) (int64, error) {
			return fenceOf(c.RWMutex(n).TryRLock(ctx))
		}},
	{"Semaphore", dlock.KindSemaphore, false,
		func(ctx context.Context, c *dlock.Client, n string, o ...dlock.Option) (held, error) {
			return lease(c.Semaphore(n, 3, o...).Acquire(ctx, 3))
		},
		func(ctx context.Context, c *dlock.Client, n string) (int64, error) {
			return fenceOf(c.Semaphore(n, 3).TryAcquire(ctx, 1))
		}},
	{"Election", dlock.KindElection, true,
		func(ctx context.Context, c *dlock.Client, n string, o ...dlock.Option) (held, error) {
			ld, err := c.Election(n, o...).Campaign(ctx, "me")
			return held{ld: ld}, err
		},
		func(ctx context.Context, c *dlock.Client, n string) (int64, error) {
			ld, err := c.Election(n).Campaign(ctx, "rival") // waits in line; ctx bounds it
			if err != nil {
				return 0, err
			}
			return ld.Term(), nil
		}},
}

// rivalOf returns a second Client of srv, closed when the test ends.
func rivalOf(t *testing.T, srv *dlocktest.Server) *dlock.Client { return newClient(t, srv.Addr) }

// shortCtx is for a rival's Election Campaign, which waits in line: it
// returns once it leads, or fails when ctx ends.
func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestLose: for every kind, renewed or not, Lose returns with the lease
// ended as lost, and the lock free in Redis: a rival takes it with a higher
// fence. The TTL is dlock's default (30 s), so nothing expired by itself.
func TestLose(t *testing.T) {
	srv := dlocktest.NewServer(t)
	rival := rivalOf(t, srv)
	ctx := context.Background()
	for _, k := range kinds {
		for _, renew := range []bool{true, false} {
			if !renew && k.always {
				continue
			}
			name := k.name
			var opts []dlock.Option
			if !renew {
				name += " WithoutRenewal"
				opts = append(opts, dlock.WithoutRenewal())
			}
			t.Run(name, func(t *testing.T) {
				h, err := k.take(ctx, srv.Client, name, opts...)
				if err != nil {
					t.Fatal(err)
				}
				lose(t, h)
				select {
				case <-h.done():
				default:
					t.Fatal("Done still open after Lose returned")
				}
				if !errors.Is(h.err(), dlock.ErrLockLost) {
					t.Fatalf("Err = %v, want ErrLockLost", h.err())
				}
				st, err := srv.Client.Inspect(ctx, k.kind, name)
				if err != nil {
					t.Fatal(err)
				}
				if len(st.Holders) != 0 {
					t.Fatalf("holders after Lose: %+v", st.Holders)
				}
				if k.kind == dlock.KindElection {
					if l, err := srv.Client.Election(name).Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
						t.Fatalf("leader after Lose: %+v, %v; want ErrNoLeader", l, err)
					}
				}
				fence, err := k.rival(shortCtx(t), rival, name)
				if err != nil {
					t.Fatalf("rival after Lose: %v", err)
				}
				if fence <= h.fence() {
					t.Fatalf("rival's fence %d not above the lost lease's %d", fence, h.fence())
				}
			})
		}
	}
}

// TestSteal: for every kind, Steal returns with the lease ended as lost to
// another owner, which Inspect shows holding the lock with a higher fence;
// a rival that would need the lease's hold gets nothing.
func TestSteal(t *testing.T) {
	srv := dlocktest.NewServer(t)
	rival := rivalOf(t, srv)
	ctx := context.Background()
	for _, k := range kinds {
		for _, renew := range []bool{true, false} {
			if !renew && k.always {
				continue
			}
			name := k.name
			var opts []dlock.Option
			if !renew {
				name += " WithoutRenewal"
				opts = append(opts, dlock.WithoutRenewal())
			}
			t.Run(name, func(t *testing.T) {
				h, err := k.take(ctx, srv.Client, name, opts...)
				if err != nil {
					t.Fatal(err)
				}
				steal(t, h)
				select {
				case <-h.done():
				default:
					t.Fatal("Done still open after Steal returned")
				}
				if !errors.Is(h.err(), dlock.ErrLockLost) || !strings.Contains(h.err().Error(), "another owner") {
					t.Fatalf("Err = %v, want ErrLockLost saying another owner holds it", h.err())
				}
				st, err := srv.Client.Inspect(ctx, k.kind, name)
				if err != nil {
					t.Fatal(err)
				}
				if len(st.Holders) != 1 || st.Holders[0].Client != "dlocktest.Steal" || st.Holders[0].Fence <= h.fence() {
					t.Fatalf("holders after Steal: %+v, want one dlocktest.Steal holder with a fence above %d", st.Holders, h.fence())
				}
				ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				if _, err := k.rival(ctx, rival, name); !errors.Is(err, dlock.ErrNotAcquired) {
					t.Fatalf("rival after Steal: %v, want ErrNotAcquired", err)
				}
			})
		}
	}
}
