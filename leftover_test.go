package dlock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// abandonWorker holds p.Abandon names of each kind ("km:i" Mutex, "kf:i"
// FairMutex, "kr:i" RWMutex, read for even i and write for odd, "ks:i"
// Semaphore of 2), waits for p.Waits names of each kind that the test holds
// ("wm:i", "wf:i", "wr:i", "ws:i"), prints the fences it got as JSON, and
// blocks until it is killed.
func abandonWorker(c *dlock.Client, p workerParams) error {
	ctx := context.Background()
	fences := make(map[string]int64)
	var mu sync.Mutex
	err := forEach(p.Abandon, func(i int) error {
		for kind, lock := range map[string]func(string) (*dlock.Lease, error){
			"km": func(n string) (*dlock.Lease, error) { return c.Mutex(n).Lock(ctx) },
			"kf": func(n string) (*dlock.Lease, error) { return c.FairMutex(n).Lock(ctx) },
			"kr": func(n string) (*dlock.Lease, error) {
				if i%2 == 0 {
					return c.RWMutex(n).RLock(ctx)
				}
				return c.RWMutex(n).Lock(ctx)
			},
			"ks": func(n string) (*dlock.Lease, error) { return c.Semaphore(n, 2).Acquire(ctx, 1) },
		} {
			name := fmt.Sprintf("%s:%d", kind, i)
			l, err := lock(name)
			if err != nil {
				return err
			}
			mu.Lock()
			fences[name] = l.Fence()
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := range p.Waits {
		for _, wait := range []func() (*dlock.Lease, error){
			func() (*dlock.Lease, error) { return c.Mutex(fmt.Sprintf("wm:%d", i)).Lock(ctx) },
			func() (*dlock.Lease, error) { return c.FairMutex(fmt.Sprintf("wf:%d", i)).Lock(ctx) },
			func() (*dlock.Lease, error) { return c.RWMutex(fmt.Sprintf("wr:%d", i)).Lock(ctx) },
			func() (*dlock.Lease, error) { return c.Semaphore(fmt.Sprintf("ws:%d", i), 1).Acquire(ctx, 1) },
		} {
			go func() { _, _ = wait() }()
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(fences); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until killed
	return nil
}

// forEach runs f(0) to f(n-1), eight at a time, and returns the first error.
func forEach(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// TestNothingLeftBehind: 10,000 names used once and abandoned (holders
// killed, waiters killed or cancelled, locks released, latches opened) leave
// nothing in Redis after their TTLs and the 10s of the records of the
// latches' openings, but the state set on purpose: Semaphore totals set with
// SetPermits and armed latches, which Delete removes. A name used again gets
// a higher fence.
func TestNothingLeftBehind(t *testing.T) {
	t.Parallel()
	const (
		ttl      = time.Second
		abandon  = 1500 // held by the killed worker, per kind: 6,000 names
		waits    = 100  // waited for by the killed worker, per kind: 400 names
		unlocked = 525  // taken and released, per kind: 2,100 names
		cancel   = 100  // waited for and given up, per kind: 400 names
		multi    = 250  // MultiLocks over two names: 500 names
		opened   = 400  // latches counted down to zero
		armed    = 100  // latches left armed: stay until Delete
		totals   = 100  // Semaphores with SetPermits: stay until Delete
	)
	ctx := context.Background()
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	rdb := lockSrv.Client(t)
	c := clientOn(t, lockSrv.Client(t), dlock.WithTTL(ttl))
	c2 := clientOn(t, lockSrv.Client(t), dlock.WithTTL(ttl))

	// The names the worker is to wait for, held here by a Client of a
	// longer TTL: 400 leases of 1s, renewed every 333ms, can all lapse on a
	// loaded machine, and the worker would then take the names instead of
	// waiting for them.
	holder := clientOn(t, lockSrv.Client(t), dlock.WithTTL(5*time.Second))
	var held []*dlock.Lease
	var heldMu sync.Mutex
	hold := func(l *dlock.Lease, err error) error {
		if err != nil {
			return err
		}
		heldMu.Lock()
		held = append(held, l)
		heldMu.Unlock()
		return nil
	}
	if err := forEach(waits, func(i int) error {
		return errorsJoin(
			hold(holder.Mutex(fmt.Sprintf("wm:%d", i)).Lock(ctx)),
			hold(holder.FairMutex(fmt.Sprintf("wf:%d", i)).Lock(ctx)),
			hold(holder.RWMutex(fmt.Sprintf("wr:%d", i)).RLock(ctx)),
			hold(holder.Semaphore(fmt.Sprintf("ws:%d", i), 1).Acquire(ctx, 1)))
	}); err != nil {
		t.Fatal(err)
	}

	cmd := worker(t, "abandon", "", lockSrv, resSrv, workerParams{TTL: ttl, Abandon: abandon, Waits: waits})
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var fences map[string]int64
	if err := json.NewDecoder(bufio.NewReader(stdout)).Decode(&fences); err != nil {
		t.Fatalf("read the worker's fences: %v", err)
	}
	if len(fences) != 4*abandon {
		t.Fatalf("the worker holds %d names, want %d", len(fences), 4*abandon)
	}
	queued := func() int {
		n := 0
		for i := range waits {
			for _, k := range []string{"dlock:{wm:%d}:waiters", "dlock:fair:{wf:%d}:waiters", "dlock:rw:{wr:%d}:waiters", "dlock:sem:{ws:%d}:waiters"} {
				n += int(rdb.ZCard(ctx, fmt.Sprintf(k, i)).Val())
			}
		}
		return n
	}
	// 400 calls subscribe and register at once: on a loaded machine that
	// takes seconds.
	if !within(30*time.Second, func() bool { return queued() == 4*waits }) {
		t.Fatalf("%d of the worker's %d waits queued", queued(), 4*waits)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Names taken and released here, and their fences.
	mine := make(map[string]int64)
	var mineMu sync.Mutex
	use := func(name string, l *dlock.Lease, err error) error {
		if err != nil {
			return err
		}
		mineMu.Lock()
		mine[name] = l.Fence()
		mineMu.Unlock()
		return l.Unlock(ctx)
	}
	if err := forEach(unlocked, func(i int) error {
		um, uf, ur, us := fmt.Sprintf("um:%d", i), fmt.Sprintf("uf:%d", i), fmt.Sprintf("ur:%d", i), fmt.Sprintf("us:%d", i)
		l1, err1 := c.Mutex(um).Lock(ctx)
		l2, err2 := c.FairMutex(uf).Lock(ctx)
		l3, err3 := c.RWMutex(ur).Lock(ctx)
		l4, err4 := c.Semaphore(us, 3).Acquire(ctx, 2)
		return errorsJoin(use(um, l1, err1), use(uf, l2, err2), use(ur, l3, err3), use(us, l4, err4))
	}); err != nil {
		t.Fatal(err)
	}

	// Waits given up: c holds, c2 waits 100ms and gives up.
	if err := forEach(cancel, func(i int) error {
		type pair struct {
			hold func() (*dlock.Lease, error)
			wait func(context.Context) (*dlock.Lease, error)
		}
		cm, cf, cr, cs := fmt.Sprintf("cm:%d", i), fmt.Sprintf("cf:%d", i), fmt.Sprintf("cr:%d", i), fmt.Sprintf("cs:%d", i)
		for _, p := range []pair{
			{func() (*dlock.Lease, error) { return c.Mutex(cm).Lock(ctx) }, c2.Mutex(cm).Lock},
			{func() (*dlock.Lease, error) { return c.FairMutex(cf).Lock(ctx) }, c2.FairMutex(cf).Lock},
			{func() (*dlock.Lease, error) { return c.RWMutex(cr).Lock(ctx) }, c2.RWMutex(cr).RLock},
			{func() (*dlock.Lease, error) { return c.Semaphore(cs, 1).Acquire(ctx, 1) }, func(ctx context.Context) (*dlock.Lease, error) {
				return c2.Semaphore(cs, 1).Acquire(ctx, 1)
			}},
		} {
			l, err := p.hold()
			if err != nil {
				return err
			}
			wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err = p.wait(wctx)
			wcancel()
			if err == nil {
				return fmt.Errorf("a wait for a held lock succeeded")
			}
			if err := l.Unlock(ctx); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// MultiLocks, latches, Semaphores with a total set on purpose.
	if err := forEach(multi, func(i int) error {
		l, err := c.MultiLock([]string{fmt.Sprintf("ma:%d", i), fmt.Sprintf("mb:%d", i)}).Lock(ctx)
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	}); err != nil {
		t.Fatal(err)
	}
	if err := forEach(opened, func(i int) error {
		l := c.CountDownLatch(fmt.Sprintf("lz:%d", i))
		if _, err := l.TrySetCount(ctx, 2); err != nil {
			return err
		}
		return errorsJoin(l.CountDown(ctx), l.CountDown(ctx))
	}); err != nil {
		t.Fatal(err)
	}
	if err := forEach(armed, func(i int) error {
		_, err := c.CountDownLatch(fmt.Sprintf("la:%d", i)).TrySetCount(ctx, 3)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := forEach(totals, func(i int) error {
		s := c.Semaphore(fmt.Sprintf("sp:%d", i), 1)
		if err := s.SetPermits(ctx, 5); err != nil {
			return err
		}
		l, err := s.Acquire(ctx, 4)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}); err != nil {
		t.Fatal(err)
	}
	names := 4*abandon + 4*waits + 4*unlocked + 4*cancel + 2*multi + opened + armed + totals
	if names != 10000 {
		t.Fatalf("the test uses %d names, want 10,000", names)
	}

	// What must stay: the totals and the armed latches.
	var want []string
	for i := range totals {
		want = append(want, fmt.Sprintf("dlock:sem:{sp:%d}:total", i))
	}
	for i := range armed {
		want = append(want, fmt.Sprintf("dlock:latch:{la:%d}", i))
	}
	slices.Sort(want)
	t.Logf("%d keys right after use", len(allKeys(t, rdb)))
	// The records of the latches' openings live 10s; every other key its
	// TTL (1s; 5s for the names the worker waited for) or a waiter's
	// registration (3 keep-alives of TTL/6).
	if !within(10*time.Second+3*time.Second, func() bool { return slices.Equal(allKeys(t, rdb), want) }) {
		left := allKeys(t, rdb)
		extra := slices.DeleteFunc(slices.Clone(left), func(k string) bool { return slices.Contains(want, k) })
		if len(extra) > 10 {
			extra = extra[:10]
		}
		t.Fatalf("%d keys left, want the %d set on purpose; some of the others: %q", len(left), len(want), extra)
	}

	// A name used again gets a higher fence.
	for name, fence := range fences {
		if !strings.HasSuffix(name, ":7") && !strings.HasSuffix(name, ":8") {
			continue
		}
		var l *dlock.Lease
		var err error
		switch name[:2] {
		case "km":
			l, err = c.Mutex(name).Lock(ctx)
		case "kf":
			l, err = c.FairMutex(name).Lock(ctx)
		case "kr":
			l, err = c.RWMutex(name).Lock(ctx)
		case "ks":
			l, err = c.Semaphore(name, 2).Acquire(ctx, 2)
		}
		if err != nil {
			t.Fatalf("%s again: %v", name, err)
		}
		if l.Fence() <= fence {
			t.Errorf("%s: fence %d after the expired %d", name, l.Fence(), fence)
		}
		l.Unlock(ctx)
	}
	l, err := c.Mutex("um:3").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() <= mine["um:3"] {
		t.Errorf("um:3: fence %d after the expired %d", l.Fence(), mine["um:3"])
	}
	l.Unlock(ctx)

	// Delete removes the state set on purpose.
	if err := forEach(totals, func(i int) error {
		ok, err := c.Semaphore(fmt.Sprintf("sp:%d", i), 1).Delete(ctx)
		if err == nil && !ok {
			err = fmt.Errorf("sp:%d: no total to delete", i)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := forEach(armed, func(i int) error {
		ok, err := c.CountDownLatch(fmt.Sprintf("la:%d", i)).Delete(ctx)
		if err == nil && !ok {
			err = fmt.Errorf("la:%d: no count to delete", i)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, k := range latchKeys(t, rdb) {
		if strings.Contains(k, ":total") || strings.HasPrefix(k, "dlock:latch:") {
			t.Errorf("%s left after Delete", k)
		}
	}
}

func errorsJoin(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// TestEvictionPolicy: Check reports a maxmemory-policy that may evict locks,
// and a Client logs it on first use; noeviction passes.
func TestEvictionPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, "--maxmemory-policy", "volatile-lru")
	var logged strings.Builder
	var mu sync.Mutex
	c := clientOn(t, srv.Client(t), dlock.WithLogger(slogTo(&logged, &mu)))
	if err := c.Check(ctx); err == nil || !strings.Contains(err.Error(), "volatile-lru") || !strings.Contains(err.Error(), "noeviction") {
		t.Errorf("Check under volatile-lru: %v", err)
	}
	l, err := c.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock(ctx)
	if !within(2*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logged.String(), "volatile-lru")
	}) {
		t.Errorf("no warning logged on first use: %s", logged.String())
	}
	srv.Client(t).ConfigSet(ctx, "maxmemory-policy", "noeviction")
	if err := c.Check(ctx); err != nil {
		t.Errorf("Check under noeviction: %v", err)
	}
}
