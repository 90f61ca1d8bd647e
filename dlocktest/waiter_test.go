package dlocktest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/redis/go-redis/v9"
)

// TestTakeAwayServesWaiter: with a waiter in line, Lose and Steal grant the
// lock to it at once, as a release does: its Lock returns long before the
// lost lease's TTL (30 s) could have run out, with a higher fence, and the
// waiter is the owner Redis shows. The loss is reported through Hooks.Lost.
func TestTakeAwayServesWaiter(t *testing.T) {
	srv := dlocktest.NewServer(t)
	for _, how := range []string{"Lose", "Steal"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			lost := make(chan error, 1)
			holderC := newClient(t, srv.Addr, dlock.WithHooks(dlock.Hooks{Lost: func(_ context.Context, _ dlock.LockInfo, _ int64, err error) {
				lost <- err
			}}))
			contended := make(chan struct{})
			var once sync.Once
			waiterC := newClient(t, srv.Addr, dlock.WithHooks(dlock.Hooks{Contended: func(context.Context, dlock.LockInfo) {
				once.Do(func() { close(contended) })
			}}))
			holder, err := holderC.Mutex(how).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				l   *dlock.Lease
				err error
			}
			got := make(chan result, 1)
			go func() {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a third of the TTL
				defer cancel()
				l, err := waiterC.Mutex(how).Lock(ctx)
				got <- result{l, err}
			}()
			<-contended
			// The waiter registers in Redis after its first try; wait until
			// Redis shows it in line.
			for {
				st, err := srv.Client.Inspect(ctx, dlock.KindMutex, how)
				if err != nil {
					t.Fatal(err)
				}
				if len(st.Waiters) == 1 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if how == "Lose" {
				dlocktest.Lose(t, holder)
			} else {
				dlocktest.Steal(t, holder)
			}
			r := <-got
			if r.err != nil {
				t.Fatalf("the waiter: %v", r.err)
			}
			defer r.l.Unlock(ctx)
			if r.l.Fence() <= holder.Fence() {
				t.Fatalf("the waiter's fence %d, not above %d", r.l.Fence(), holder.Fence())
			}
			st, err := srv.Client.Inspect(ctx, dlock.KindMutex, how)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Holders) != 1 || st.Holders[0].Owner != r.l.Owner() {
				t.Fatalf("holders: %+v, want the waiter %s alone", st.Holders, r.l.Owner())
			}
			if err := <-lost; !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("Hooks.Lost got %v", err)
			}
		})
	}
}

func newClient(t *testing.T, addr string, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = rdb.Close()
	})
	return c
}
