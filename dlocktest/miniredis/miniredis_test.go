package miniredis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/redis/go-redis/v9"
)

// What dlock says on miniredis (v2.40.0): it has neither SPUBLISH nor
// SSUBSCRIBE, by which releases wake waiters (Redis 7.0), so a Client's
// first acquisition or wait there, and its Check, fail with
// errors.ErrUnsupported naming SPUBLISH, before anything is written.
const refused = "Redis does not run SPUBLISH"

// scenario is one use of dlock, run on a real server and on miniredis: want
// is "" where it works, else a part of the error it fails with.
type scenario struct {
	name      string
	run       func(ctx context.Context, t *testing.T, env env) error
	redis     string
	miniredis string
}

type env struct {
	addr string
	mini *miniredis.Miniredis // nil on a real server
}

// client returns a dlock Client of the server, closed when the test ends.
func (e env) client(t *testing.T, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: e.addr})
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

// unlocked unlocks l if it was acquired, and returns the first error.
func unlocked(ctx context.Context, l *dlock.Lease, err error) error {
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

var scenarios = []scenario{
	{name: "Mutex TryLock, TTL, Extend, Unlock", miniredis: refused, run: func(ctx context.Context, t *testing.T, e env) error {
		l, err := e.client(t).Mutex("m").TryLock(ctx)
		if err != nil {
			return err
		}
		if _, err := l.TTL(ctx); err != nil {
			return err
		}
		if err := l.Extend(ctx, time.Minute); err != nil {
			return err
		}
		return l.Unlock(ctx)
	}},
	{name: "TryLock of a held lock", miniredis: refused, run: func(ctx context.Context, t *testing.T, e env) error {
		c := e.client(t)
		l, err := c.Mutex("held").Lock(ctx)
		if err != nil {
			return err
		}
		defer l.Unlock(ctx)
		if _, err := e.client(t).Mutex("held").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			return fmt.Errorf("TryLock of a held lock: %v, want ErrNotAcquired", err)
		}
		return nil
	}},
	{name: "uncontended FairMutex, RWMutex, Semaphore, MultiLock", miniredis: refused, run: func(ctx context.Context, t *testing.T, e env) error {
		c := e.client(t)
		var errs []error
		for _, lock := range []func() (*dlock.Lease, error){
			func() (*dlock.Lease, error) { return c.FairMutex("f").Lock(ctx) },
			func() (*dlock.Lease, error) { return c.RWMutex("rw").RLock(ctx) },
			func() (*dlock.Lease, error) { return c.RWMutex("rw").Lock(ctx) },
			func() (*dlock.Lease, error) { return c.Semaphore("s", 2).Acquire(ctx, 2) },
		} {
			l, err := lock()
			errs = append(errs, unlocked(ctx, l, err))
		}
		ml, err := c.MultiLock([]string{"a", "b"}).Lock(ctx)
		if err == nil {
			err = ml.Unlock(ctx)
		}
		return errors.Join(append(errs, err)...)
	}},
	{name: "renewal", miniredis: refused, run: func(ctx context.Context, t *testing.T, e env) error {
		l, err := e.client(t, dlock.WithTTL(300*time.Millisecond)).Mutex("renewed").Lock(ctx)
		if err != nil {
			return err
		}
		time.Sleep(time.Second) // three TTLs: only renewals keep it
		return unlocked(ctx, l, l.Err())
	}},
	{name: "Lock woken by the release", miniredis: refused, run: func(ctx context.Context, t *testing.T, e env) error {
		holder, err := e.client(t).Mutex("woken").Lock(ctx)
		if err != nil {
			return err
		}
		contended := make(chan struct{})
		var once sync.Once
		waiter := e.client(t, dlock.WithHooks(dlock.Hooks{Contended: func(context.Context, dlock.LockInfo) {
			once.Do(func() { close(contended) })
		}}))
		got := make(chan error, 1)
		go func() {
			// Far below the holder's TTL (30 s): only the release can
			// let it in.
			ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			l, err := waiter.Mutex("woken").Lock(ctx)
			got <- unlocked(ctx, l, err)
		}()
		<-contended
		if err := holder.Unlock(ctx); err != nil {
			return err
		}
		return <-got
	}},
	{name: "CountDownLatch.CountDown", miniredis: refused, run: func(ctx context.Context, t *testing.T, e env) error {
		l := e.client(t).CountDownLatch("latch")
		if _, err := l.TrySetCount(ctx, 1); err != nil {
			return err
		}
		return l.CountDown(ctx)
	}},
	{name: "Election.Campaign", miniredis: refused, run: func(ctx context.Context, t *testing.T, e env) error {
		ld, err := e.client(t).Election("e").Campaign(ctx, "node-1")
		if err != nil {
			return err
		}
		return ld.Resign(ctx)
	}},
	{name: "Election.Observe", miniredis: refused, run: func(ctx context.Context, t *testing.T, e env) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		for l, err := range e.client(t).Election("observed").Observe(ctx) {
			if err != nil || l.Term != 0 {
				return fmt.Errorf("first state: %+v, %v; want no leader", l, err)
			}
			return nil
		}
		return errors.New("Observe yielded nothing before its context ended")
	}},
	{name: "Client.Inspect", miniredis: refused, run: func(ctx context.Context, t *testing.T, e env) error {
		c := e.client(t)
		l, err := c.Mutex("inspected").Lock(ctx)
		if err != nil {
			return err
		}
		defer l.Unlock(ctx)
		_, err = c.Inspect(ctx, dlock.KindMutex, "inspected")
		return err
	}},
	{name: "Client.ForceRelease", miniredis: refused, run: func(ctx context.Context, t *testing.T, e env) error {
		l, err := e.client(t).Mutex("forced").Lock(ctx)
		if err != nil {
			return err
		}
		defer l.Unlock(ctx)
		_, err = e.client(t).ForceRelease(ctx, dlock.KindMutex, "forced")
		return err
	}},
	{name: "dlocktest.Lose", miniredis: refused, run: func(ctx context.Context, t *testing.T, e env) error {
		l, err := e.client(t).Mutex("lost").Lock(ctx)
		if err != nil {
			return err
		}
		dlocktest.Lose(t, l)
		if !errors.Is(l.Err(), dlock.ErrLockLost) {
			return fmt.Errorf("after Lose: %v", l.Err())
		}
		return nil
	}},
}

func TestMiniredis(t *testing.T) {
	envs := []struct {
		name string
		env  env
	}{
		{"redis", env{addr: dlocktest.NewServer(t).Addr}},
		{"miniredis", func() env { m := miniredis.RunT(t); return env{addr: m.Addr(), mini: m} }()},
	}
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			for _, en := range envs {
				want := s.redis
				if en.env.mini != nil {
					want = s.miniredis
				}
				t.Run(en.name, func(t *testing.T) {
					err := s.run(context.Background(), t, en.env)
					switch {
					case want == "" && err != nil:
						t.Fatalf("failed: %v", err)
					case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
						t.Fatalf("got %v, want an error saying %q", err, want)
					case err != nil:
						t.Logf("fails, as documented: %v", err)
					}
				})
			}
		})
	}
}

// TestMiniredisRefused: the refusal matches errors.ErrUnsupported, Check
// says the same, and nothing was written.
func TestMiniredisRefused(t *testing.T) {
	m := miniredis.RunT(t)
	c := env{addr: m.Addr(), mini: m}.client(t)
	ctx := context.Background()
	if _, err := c.Mutex("m").Lock(ctx); !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), refused) {
		t.Fatalf("Lock: %v, want ErrUnsupported saying %q", err, refused)
	}
	if err := c.Check(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Check: %v, want ErrUnsupported", err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Fatalf("keys written: %v", keys)
	}
}
