package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// redLockNodes starts n independent redis-servers and returns them with a
// client of each. The clients give up a request after 500ms, so that one
// sent to a paused server does not hold a connection for long.
func redLockNodes(t *testing.T, n int) ([]*redistest.Server, []*redis.Client) {
	t.Helper()
	srvs := redistest.StartN(t, n)
	rdbs := make([]*redis.Client, n)
	for i, s := range srvs {
		o := s.Options()
		o.ReadTimeout, o.WriteTimeout, o.DialTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
		rdbs[i] = redis.NewClient(o)
		t.Cleanup(func() { _ = rdbs[i].Close() })
	}
	return srvs, rdbs
}

// redLockOn returns a RedLock Client over rdbs, closed when the test ends.
func redLockOn(t *testing.T, rdbs []*redis.Client, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	nodes := make([]redis.UniversalClient, len(rdbs))
	for i, r := range rdbs {
		nodes[i] = r
	}
	c, err := dlock.NewRedLock(nodes, opts...)
	if err != nil {
		t.Fatalf("NewRedLock: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Logf("Close: %v", err) // a node may be down by design
		}
	})
	return c
}

// holders counts the nodes whose lock key of name has a holder.
func holders(t *testing.T, rdbs []*redis.Client, name string) int {
	t.Helper()
	n := 0
	for _, r := range rdbs {
		if r.HLen(context.Background(), "dlock:{"+name+"}").Val() > 0 {
			n++
		}
	}
	return n
}

func TestRedLockBadInput(t *testing.T) {
	_, rdbs := redLockNodes(t, 3)
	other := redis.NewClient(rdbs[0].Options())
	t.Cleanup(func() { _ = other.Close() })
	u := func(rs ...*redis.Client) []redis.UniversalClient {
		out := make([]redis.UniversalClient, len(rs))
		for i, r := range rs {
			if r != nil {
				out[i] = r
			}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		nodes []redis.UniversalClient
		opts  []dlock.Option
		want  string
	}{
		{"no nodes", nil, nil, "0 nodes"},
		{"one node", u(rdbs[0]), nil, "1 nodes"},
		{"two nodes", u(rdbs[0], rdbs[1]), nil, "2 nodes"},
		{"four nodes", u(rdbs[0], rdbs[1], rdbs[2], other), nil, "4 nodes"},
		{"nil node", u(rdbs[0], nil, rdbs[2]), nil, "node 1 is nil"},
		{"the same client twice", u(rdbs[0], rdbs[1], rdbs[0]), nil, "same client"},
		{"the same server twice", u(rdbs[0], rdbs[1], other), nil, "nodes 0 and 2 are both"},
		{"WithWaitReplicas", u(rdbs...), []dlock.Option{dlock.WithWaitReplicas(1, time.Second)}, "WithWaitReplicas"},
		{"zero node timeout", u(rdbs...), []dlock.Option{dlock.WithNodeTimeout(0)}, "must be positive"},
		{"TTL too small", u(rdbs...), []dlock.Option{dlock.WithTTL(time.Millisecond)}, "at least"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := dlock.NewRedLock(tc.nodes, tc.opts...)
			if err == nil {
				c.Close()
				t.Fatalf("NewRedLock succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
	if _, err := dlock.New(rdbs[0], dlock.WithNodeTimeout(time.Second)); err == nil {
		t.Error("New with WithNodeTimeout succeeded")
	}

	c := redLockOn(t, rdbs)
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"FairMutex.Lock":           func() error { _, err := c.FairMutex("x").Lock(ctx); return err },
		"FairMutex.TryLock":        func() error { _, err := c.FairMutex("x").TryLock(ctx); return err },
		"RWMutex.Lock":             func() error { _, err := c.RWMutex("x").Lock(ctx); return err },
		"RWMutex.RLock":            func() error { _, err := c.RWMutex("x").RLock(ctx); return err },
		"Semaphore.Acquire":        func() error { _, err := c.Semaphore("x", 2).Acquire(ctx, 1); return err },
		"Semaphore.SetPermits":     func() error { return c.Semaphore("x", 2).SetPermits(ctx, 3) },
		"CountDownLatch.SetCount":  func() error { _, err := c.CountDownLatch("x").TrySetCount(ctx, 1); return err },
		"CountDownLatch.Wait":      func() error { return c.CountDownLatch("x").Wait(ctx) },
		"CountDownLatch.CountDown": func() error { return c.CountDownLatch("x").CountDown(ctx) },
	} {
		if err := call(); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s on a RedLock: %v, want an error matching errors.ErrUnsupported", name, err)
		}
	}
	for _, r := range rdbs {
		if keys := r.Keys(ctx, "*").Val(); len(keys) > 0 {
			t.Errorf("unsupported calls wrote %v", keys)
		}
	}
}

// TestRedLockMutex: the Mutex contract on five nodes: Lock holds a majority
// (here all five), TryLock of a held lock fails, re-entry, Extend, TTL, the
// fence on a majority of fence keys and rising, Do, and nothing left after
// Unlock.
func TestRedLockMutex(t *testing.T) {
	_, rdbs := redLockNodes(t, 5)
	c := redLockOn(t, rdbs, dlock.WithTTL(2*time.Second))
	other := redLockOn(t, rdbs)
	ctx := context.Background()
	m := c.Mutex("job")

	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := holders(t, rdbs, "job"); n < 3 {
		t.Errorf("held on %d nodes after Lock, want a majority", n)
	}
	atFence := 0
	for _, r := range rdbs {
		if f, _ := r.Get(ctx, "dlock:{job}:fence").Int64(); f >= l.Fence() {
			atFence++
		}
	}
	if atFence < 3 {
		t.Errorf("%d nodes have a fence key at least the lease's fence %d, want a majority", atFence, l.Fence())
	}
	if _, err := other.Mutex("job").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock of a held lock: %v, want ErrNotAcquired", err)
	}
	lctx, cancel := l.Context(ctx)
	l2, err := m.Lock(lctx)
	if err != nil {
		t.Fatalf("re-enter: %v", err)
	}
	if l2.Fence() != l.Fence() {
		t.Errorf("re-entered fence %d, want %d", l2.Fence(), l.Fence())
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatalf("unlock the re-entry: %v", err)
	}
	cancel()
	if n := holders(t, rdbs, "job"); n < 3 {
		t.Errorf("held on %d nodes after the re-entry's Unlock, want a majority", n)
	}
	if err := l.Extend(ctx, 5*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	left, err := l.TTL(ctx)
	if err != nil || left <= 2*time.Second || left > 5*time.Second {
		t.Errorf("TTL after Extend(5s) = %v, %v", left, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if n := holders(t, rdbs, "job"); n != 0 {
		t.Errorf("held on %d nodes after Unlock", n)
	}
	var fences []int64
	for range 5 {
		if err := other.Mutex("job").Do(ctx, func(ctx context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fences = append(fences, l.Fence())
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Errorf("fences %v do not rise", fences)
		}
	}
}

// TestRedLockWaiters: eight goroutines of four Clients take turns on one
// lock: every Lock returns, each critical section runs alone, and the waits
// end on wake-ups, not on the holders' TTL running out.
func TestRedLockWaiters(t *testing.T) {
	_, rdbs := redLockNodes(t, 5)
	const ttl = 10 * time.Second
	var clients []*dlock.Client
	for range 4 {
		clients = append(clients, redLockOn(t, rdbs, dlock.WithTTL(ttl)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var inside, overlaps, done int32
	var mu sync.Mutex
	start := time.Now()
	var wg sync.WaitGroup
	var errs []error
	for g := range 8 {
		m := clients[g%len(clients)].Mutex("turns")
		wg.Go(func() {
			for range 10 {
				l, err := m.Lock(ctx)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				mu.Lock()
				inside++
				if inside > 1 {
					overlaps++
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				inside--
				done++
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, the first: %v", len(errs), errs[0])
	}
	if overlaps > 0 {
		t.Errorf("%d critical sections overlapped", overlaps)
	}
	if elapsed := time.Since(start); elapsed > ttl {
		t.Errorf("80 critical sections took %v: waiters waited for TTLs, not wake-ups", elapsed)
	}
	t.Logf("80 critical sections by 8 goroutines of 4 Clients in %v", time.Since(start).Round(time.Millisecond))
}

var _ = fmt.Sprint
var _ = strconv.Itoa
