package dlock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/timing"
	"github.com/redis/go-redis/v9"
)

func TestSemaphore(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	s := c.Semaphore("s", 3)
	a, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if b.Fence() <= a.Fence() {
		t.Errorf("fences %d then %d", a.Fence(), b.Fence())
	}
	if n, err := s.Available(ctx); err != nil || n != 0 {
		t.Fatalf("Available = %d, %v; want 0", n, err)
	}
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire beyond the total: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Available(ctx); n != 2 {
		t.Fatalf("Available = %d after giving back 2, want 2", n)
	}
	if left, err := b.TTL(ctx); err != nil || left <= 0 || left > dlock.DefaultTTL {
		t.Errorf("TTL = %v, %v", left, err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The total given here does not change the one Redis holds.
	if n, _ := c.Semaphore("s", 10).Available(ctx); n != 3 {
		t.Errorf("Available with another total given = %d, want 3", n)
	}
	if err := s.SetPermits(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Available(ctx); n != 5 {
		t.Errorf("Available after SetPermits(5) = %d", n)
	}
	if rdb.Exists(ctx, "dlock:sem:{s}:waiters", "dlock:sem:{s}:alive").Val() != 0 {
		t.Error("queue keys left")
	}
	for _, tc := range []struct {
		name string
		f    func() error
	}{
		{"zero permits", func() error { _, err := c.Semaphore("x", 0).Acquire(ctx, 1); return err }},
		{"acquire 0", func() error { _, err := s.Acquire(ctx, 0); return err }},
		{"empty name", func() error { _, err := c.Semaphore("", 1).TryAcquire(ctx, 1); return err }},
		{"nil semaphore", func() error { _, err := (*dlock.Semaphore)(nil).Acquire(ctx, 1); return err }},
		{"zero semaphore", func() error { _, err := (&dlock.Semaphore{}).Acquire(ctx, 1); return err }},
		{"set 0 permits", func() error { return s.SetPermits(ctx, 0) }},
	} {
		if tc.f() == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

// TestSemaphoreOrderAndWakeUps: waiters are served in arrival order, a large
// request is not starved by small ones, and a release wakes only those that
// now fit.
func TestSemaphoreOrderAndWakeUps(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	c := clientOn(t, srv.Client(t))
	s := c.Semaphore("o", 2)
	full, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		who string
		l   *dlock.Lease
	}
	got := make(chan result, 3)
	rdb := srv.Client(t)
	for i, w := range []struct {
		who string
		n   int64
	}{{"big", 2}, {"small1", 1}, {"small2", 1}} {
		cw := clientOn(t, srv.Client(t))
		go func() {
			l, err := cw.Semaphore("o", 2).Acquire(ctx, w.n)
			if err != nil {
				t.Errorf("%s: %v", w.who, err)
				got <- result{w.who, nil}
				return
			}
			got <- result{w.who, l}
		}()
		inQueue(t, rdb, "dlock:sem:{o}:waiters", int64(i+1)) // they arrive in this order
	}
	if err := full.Release(ctx); err != nil {
		t.Fatal(err)
	}
	first := <-got
	if first.who != "big" {
		t.Fatalf("%s served first, want the 2-permit waiter that arrived first", first.who)
	}
	select {
	case r := <-got:
		t.Fatalf("%s served while the big one holds every permit", r.who)
	case <-time.After(200 * time.Millisecond):
	}
	if err := first.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case r := <-got:
			if r.l != nil {
				defer r.l.Release(ctx)
			}
		case <-time.After(time.Second):
			t.Fatal("the small waiters were not both woken by one release")
		}
	}
}

// TestSemaphoreNeverOverHeld: goroutines in several Clients take 1 or 2 of 3
// permits; the permits held at once never exceed 3.
func TestSemaphoreNeverOverHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	var held, peak atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		c := clientOn(t, srv.Client(t))
		for j := range 3 {
			n := int64(1 + (i+j)%2)
			wg.Go(func() {
				s := c.Semaphore("cap", 3)
				for range 15 {
					l, err := s.Acquire(ctx, n)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					now := held.Add(n)
					for {
						p := peak.Load()
						if now <= p || peak.CompareAndSwap(p, now) {
							break
						}
					}
					time.Sleep(200 * time.Microsecond)
					held.Add(-n)
					if err := l.Release(ctx); err != nil {
						t.Errorf("Release: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if p := peak.Load(); p > 3 || p < 2 {
		t.Errorf("at most %d permits held at once, want 2..3 of 3", p)
	}
}

// TestSemaphoreCancelLeavesNothing: a waiter whose context ends leaves the
// queue, and the waiters behind it are not held up.
func TestSemaphoreCancelLeavesNothing(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	s := c.Semaphore("q", 1)
	l, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(wctx, 1); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with a deadline: %v", err)
	}
	if !within(2*time.Second, func() bool {
		return rdb.Exists(ctx, "dlock:sem:{q}:waiters", "dlock:sem:{q}:alive").Val() == 0
	}) {
		t.Fatal("queue entries left after the waiter gave up")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// occupy is the resource of the semaphore hammer: it counts the holders inside
// and records the most there ever were.
//
// KEYS[1] hash: in, peak; ARGV[1] +1 to enter, -1 to leave. Returns in.
var occupy = redis.NewScript(`
local n = redis.call('HINCRBY', KEYS[1], 'in', ARGV[1])
if n > tonumber(redis.call('HGET', KEYS[1], 'peak') or '0') then
  redis.call('HSET', KEYS[1], 'peak', n)
end
return n`)

// semWorker takes one permit p.Iterations times in each of p.Goroutines
// goroutines and stays inside the resource a moment each time.
func semWorker(c *dlock.Client, resRDB *redis.Client, p workerParams) error {
	ctx := context.Background()
	s := c.Semaphore(p.Name, p.Permits)
	var acquired atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, p.Goroutines)
	for range p.Goroutines {
		wg.Go(func() {
			for range p.Iterations {
				l, err := s.Acquire(ctx, 1)
				if err != nil {
					errs <- err
					return
				}
				acquired.Add(1)
				if err := occupy.Run(ctx, resRDB, []string{"occupancy"}, 1).Err(); err != nil {
					errs <- err
					return
				}
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				if err := occupy.Run(ctx, resRDB, []string{"occupancy"}, -1).Err(); err != nil {
					errs <- err
					return
				}
				_ = l.Release(ctx) // a broken semaphore may fail here; the resource is what is checked
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(hammerReport{Acquired: acquired.Load()})
}

// semHoldWorker takes every permit, prints "held" and waits to be killed.
func semHoldWorker(c *dlock.Client, p workerParams) error {
	ctx := context.Background()
	if _, err := c.Semaphore(p.Name, p.Permits).Acquire(ctx, p.Permits); err != nil {
		return err
	}
	fmt.Println("held")
	_, err := bufio.NewReader(os.Stdin).ReadString('\n')
	return err
}

// semHammer runs procs "sem" workers and returns the peak occupancy and the
// acquisitions.
func semHammer(t *testing.T, mutant string, procs int, p workerParams) (peak, acquired int64) {
	_, resSrv, reports := runWorkers[hammerReport](t, "sem", mutant, procs, p)
	for _, rep := range reports {
		acquired += rep.Acquired
	}
	peak, _ = resSrv.Client(t).HGet(context.Background(), "occupancy", "peak").Int64()
	return peak, acquired
}

// TestSemaphoreProcesses: 4 processes x 4 goroutines share 3 permits; never
// more than 3 holders are inside the resource at once. A semaphore that hands
// out permits regardless must be caught by the same check.
func TestSemaphoreProcesses(t *testing.T) {
	t.Parallel()
	p := workerParams{Name: "procs", TTL: 10 * time.Second, Goroutines: 4, Iterations: 25, Permits: 3}
	const procs = 4
	for _, d := range deployments {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel() // servers of its own
			p := p
			p.Deploy = d
			peak, acquired := semHammer(t, "", procs, p)
			if want := int64(procs * p.Goroutines * p.Iterations); acquired != want {
				t.Errorf("acquired %d times, want %d", acquired, want)
			}
			if peak > p.Permits {
				t.Errorf("%d holders inside at once with %d permits", peak, p.Permits)
			}
			t.Logf("peak %d holders of %d permits over %d acquisitions", peak, p.Permits, acquired)
		})
	}
	t.Run("broken-semaphore-is-caught", func(t *testing.T) {
		t.Parallel()
		peak, _ := semHammer(t, "sem-ignores-count", procs, p)
		if peak <= p.Permits {
			t.Fatalf("a semaphore that ignores its count kept the peak at %d of %d permits", peak, p.Permits)
		}
		t.Logf("caught, as it must be: %d holders inside with %d permits", peak, p.Permits)
	})
}

// TestSemaphoreKilledHolder: the permits of a process killed with SIGKILL
// come back within their TTL.
func TestSemaphoreKilledHolder(t *testing.T) {
	t.Parallel()
	p := workerParams{Name: "killed", TTL: time.Second, Permits: 2}
	var killed time.Time
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	if line, killed0 := killAfterFirstLine(t, "semhold", lockSrv, resSrv, p); line != "held\n" {
		t.Fatalf("worker said %q", line)
	} else {
		killed = killed0
	}
	c := clientOn(t, lockSrv.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Semaphore(p.Name, p.Permits).Acquire(ctx, p.Permits)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(killed); took > p.TTL+300*time.Millisecond {
		t.Errorf("permits back %v after the kill, want within TTL %v + 300ms", took, p.TTL)
	}
	l.Release(ctx)
}

// BenchmarkSemaphore measures the Semaphore's hot path, next to the Mutex's
// in BenchmarkUncontended, and its hand-off under contention with one permit
// (so that benchContended's mutual-exclusion check applies).
func BenchmarkSemaphore(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	b.Run("uncontended", func(b *testing.B) {
		var rc requestCounter
		s := clientOn(b, benchRedis(b, srv, &rc, 0)).Semaphore("bench-sem", 3)
		benchTwoRequests(b, &rc, func() error {
			l, err := s.Acquire(ctx, 1)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	})
	b.Run("contended-1-permit", func(b *testing.B) {
		benchContended(b, srv, 0, func(b *testing.B, rdb *redis.Client, _ int) lockFunc {
			s := clientOn(b, rdb).Semaphore("bench-sem-contended", 1)
			return func(ctx context.Context) (func(context.Context) error, error) {
				l, err := s.Acquire(ctx, 1)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}
		})
	})
}

// TestSemaphoreDeadWaiter: a queued waiter process killed with SIGKILL holds
// up the waiters behind it for at most about half the TTL.
func TestSemaphoreDeadWaiter(t *testing.T) {
	t.Parallel()
	p := workerParams{Name: "deadwaiter", TTL: time.Second, Permits: 1}
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	ctx := context.Background()
	c := clientOn(t, lockSrv.Client(t), dlock.WithTTL(p.TTL))
	l, err := c.Semaphore(p.Name, p.Permits).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	cmd := worker(t, "semhold", "", lockSrv, resSrv, p) // queues: every permit is taken
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rdb := lockSrv.Client(t)
	if !within(5*time.Second, func() bool { return rdb.ZCard(ctx, "dlock:sem:{deadwaiter}:waiters").Val() == 1 }) {
		t.Fatal("the worker never queued")
	}
	got := make(chan time.Time, 1)
	behind := clientOn(t, lockSrv.Client(t), dlock.WithTTL(p.TTL)).Semaphore(p.Name, p.Permits)
	go func() {
		l, err := behind.Acquire(ctx, 1)
		if err != nil {
			t.Errorf("waiter behind: %v", err)
			close(got)
			return
		}
		at := time.Now()
		l.Release(ctx)
		got <- at
	}()
	time.Sleep(100 * time.Millisecond) // queued second
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at, ok := <-got:
		if !ok {
			return
		}
		if took := at.Sub(killed); took > p.TTL {
			t.Errorf("the waiter behind got its permit %v after the one ahead died, want within the TTL %v", took, p.TTL)
		}
		t.Logf("waiter behind served %v after the one ahead was killed", at.Sub(killed))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind was never served")
	}
}

// TestSemaphoreRetriedRelease: a Release whose reply is lost runs again
// (go-redis retries it), finds the permits given back, and gives back
// nothing more. If its answer comes before the lease's local deadline the
// Release succeeds; after it, or when Redis lost the semaphore's keys between
// the two runs, its error matches ErrLockLost and says that it may be a false
// alarm.
func TestSemaphoreRetriedRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	available := func(t *testing.T, s *dlock.Semaphore, want int64) {
		t.Helper()
		if n, err := s.Available(ctx); err != nil || n != want {
			t.Errorf("Available after the retried Release: %d, %v; want %d", n, err, want)
		}
	}
	t.Run("before the deadline", func(t *testing.T) {
		t.Parallel()
		c, p, _ := proxied(t)
		s := c.Semaphore("s", 3)
		kept, err := s.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Acquire(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		in := dropOnce(t, p, "sem_release")
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release whose reply was lost: %v", err)
		}
		checkHit(t, in)
		if !errors.Is(l.Err(), dlock.ErrNotHeld) || errors.Is(l.Err(), dlock.ErrLockLost) {
			t.Errorf("after Release: Err %v, want released", l.Err())
		}
		available(t, s, 2) // the other holder's permit is still held
		if err := kept.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("after the deadline", func(t *testing.T) {
		t.Parallel()
		c, p, _ := proxied(t, dlock.WithTTL(time.Second))
		s := c.Semaphore("s", 3)
		l, err := s.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		drop := dropOnce(t, p, "sem_release")
		late := p.Inject(faultproxy.Rule{Match: script("sem_release"), Fault: faultproxy.DelayReply, Delay: 1500 * time.Millisecond, Times: 1})
		err = l.Release(ctx)
		checkHit(t, drop)
		checkHit(t, late)
		if !errors.Is(err, dlock.ErrLockLost) || !strings.Contains(err.Error(), "false alarm") {
			t.Errorf("Release whose answer came after the lease's deadline: %v, want ErrLockLost that may be a false alarm", err)
		}
		available(t, s, 3)
	})
	t.Run("keys lost", func(t *testing.T) {
		t.Parallel()
		c, p, direct := proxied(t)
		s := c.Semaphore("s", 3)
		l, err := s.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		held, check := retryLate(t, p, "sem_release")
		got := make(chan error, 1)
		go func() { got <- l.Release(ctx) }()
		<-held
		if err := direct.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		err = <-got
		check()
		if !errors.Is(err, dlock.ErrLockLost) || !strings.Contains(err.Error(), "false alarm") {
			t.Errorf("Release retried after Redis lost the keys: %v, want ErrLockLost that may be a false alarm", err)
		}
	})
}

// TestSemaphoreKeysPerName: however many calls a Semaphore has had, Redis
// holds only its own keys: no acquisition, release, SetPermits or Delete
// leaves a key of its own.
func TestSemaphoreKeysPerName(t *testing.T) {
	t.Parallel()
	redistest.Full(t, "thousands of names")
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	s := c.Semaphore("n", 2)
	var own []string
	for _, suffix := range []string{"", ":fence", ":waiters", ":alive", ":holders", ":total", ":extends"} {
		own = append(own, "dlock:sem:{n}"+suffix)
	}
	const rounds = 300
	for round := range rounds {
		err := s.SetPermits(ctx, 3)
		a, err1 := s.Acquire(ctx, 2)
		b, err2 := s.TryAcquire(ctx, 1)
		_, full := s.TryAcquire(ctx, 1)
		n, err3 := s.Available(ctx)
		if err = errors.Join(err, err1, err2, err3); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		err = errors.Join(a.Extend(ctx, time.Minute), a.Release(ctx), b.Release(ctx))
		ok1, err4 := s.Delete(ctx)
		ok2, err5 := s.Delete(ctx)
		if err = errors.Join(err, err4, err5); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !errors.Is(full, dlock.ErrNotAcquired) || n != 0 || !ok1 || ok2 {
			t.Fatalf("round %d: TryAcquire of a full semaphore %v, Available %d, Delete %v %v", round, full, n, ok1, ok2)
		}
		for _, k := range allKeys(t, rdb) {
			if !slices.Contains(own, k) {
				t.Fatalf("round %d (%d calls): key %q, want only the semaphore's own %q", round, 10*(round+1), k, own)
			}
		}
	}
}

// mismatchWarnings counts the warnings in log that a Semaphore's total in
// Redis differs from the Client's, about the semaphore name.
func mismatchWarnings(log *strings.Builder, mu *sync.Mutex, name string) int {
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for line := range strings.Lines(log.String()) {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "total in Redis differs") && strings.Contains(line, " lock="+name+" ") {
			n++
		}
	}
	return n
}

// TestSemaphoreTotalMismatch: a Client that asks for another total than the
// one Redis holds is held to Redis's, and says so: TryAcquire's error tells
// how many permits are in use of what total and the total this process asked
// for, Acquire's adds it when it gives up, and the Client logs a warning once
// per name, whatever it calls after; another Client warns on its own, one
// that asks for Redis's total does not.
func TestSemaphoreTotalMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	first := clientOn(t, srv.Client(t))
	held, err := first.Semaphore("s", 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)

	var logged strings.Builder
	var mu sync.Mutex
	c := clientOn(t, srv.Client(t), dlock.WithLogger(slogTo(&logged, &mu)))
	s := c.Semaphore("s", 10)
	_, err = s.TryAcquire(ctx, 1)
	if !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "1 of 1 permits in use; this process asked for a total of 10") {
		t.Errorf("TryAcquire of a semaphore whose total in Redis is 1, by a process that asked for 10: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.Semaphore("s", 10).Acquire(wctx, 1)
	cancel()
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "this process asked for a total of 10, and Redis held 1") {
		t.Errorf("Acquire that gave up: %v", err)
	}
	if _, err := s.TryAcquire(ctx, 11); err == nil || !strings.Contains(err.Error(), "more than the semaphore's total of 1; this process asked for a total of 10") {
		t.Errorf("TryAcquire(11): %v", err)
	}
	if _, err := s.Available(ctx); err != nil {
		t.Fatal(err)
	}
	// Another name warns on its own.
	other, err := clientOn(t, srv.Client(t)).Semaphore("t", 3).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	l, err := c.Semaphore("t", 4).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := c.Close(); err != nil { // waits for what the Client does in the background
		t.Fatal(err)
	}
	if n := mismatchWarnings(&logged, &mu, "s"); n != 1 {
		t.Errorf("%d warnings about s's total, want 1:\n%s", n, logged.String())
	}
	if n := mismatchWarnings(&logged, &mu, "t"); n != 1 {
		t.Errorf("%d warnings about t's total, want 1:\n%s", n, logged.String())
	}
	mu.Lock()
	for _, want := range []string{"total=1", "this_process=10", "dlock permits s N", "total=3", "this_process=4"} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("the warnings lack %q:\n%s", want, logged.String())
		}
	}
	mu.Unlock()

	// A second Client that asks for 10 warns too; one that asks for 1 does
	// not; one that set the total with SetPermits does not either.
	u, err := first.Semaphore("u", 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Release(ctx)
	for _, tc := range []struct {
		permits int64
		set     bool
		want    int
	}{{10, false, 1}, {1, false, 0}, {10, true, 0}} {
		var logged strings.Builder
		var mu sync.Mutex
		c := clientOn(t, srv.Client(t), dlock.WithLogger(slogTo(&logged, &mu)))
		s := c.Semaphore("u", tc.permits)
		if tc.set {
			if err := s.SetPermits(ctx, 10); err != nil {
				t.Fatal(err)
			}
		}
		if l, err := s.TryAcquire(ctx, 1); err == nil {
			l.Release(ctx)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if n := mismatchWarnings(&logged, &mu, "u"); n != tc.want {
			t.Errorf("a Client asking for %d (SetPermits: %v): %d warnings, want %d:\n%s", tc.permits, tc.set, n, tc.want, logged.String())
		}
	}
}

// TestSemaphoreTotalMismatchProcesses: a process that asks for 10 permits of
// a semaphore another process made with 1 is held to 1, and TryAcquire says
// so; SetPermits then changes the total for every process at once, and wakes
// a waiter in a third process, which asked for 2.
func TestSemaphoreTotalMismatchProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	start := func(permits int64) (*exec.Cmd, *bufio.Reader) {
		t.Helper()
		cmd := worker(t, "semhold", "", lockSrv, resSrv, workerParams{Name: "shared", TTL: 30 * time.Second, Permits: permits})
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, bufio.NewReader(out)
	}
	_, one := start(1) // takes its 1 permit of 1
	if line, err := one.ReadString('\n'); line != "held\n" {
		t.Fatalf("the worker that asked for 1 permit said %q, %v", line, err)
	}
	var logged strings.Builder
	var mu sync.Mutex
	c := clientOn(t, lockSrv.Client(t), dlock.WithLogger(slogTo(&logged, &mu)))
	s := c.Semaphore("shared", 10)
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "1 of 1 permits in use; this process asked for a total of 10") {
		t.Errorf("TryAcquire in a process that asked for 10, while another holds 1 of its 1: %v", err)
	}
	if !within(5*time.Second, func() bool { return mismatchWarnings(&logged, &mu, "shared") == 1 }) {
		t.Errorf("no warning that the total differs:\n%s", logged.String())
	}

	_, two := start(2) // wants 2 of 1: waits for the total to be raised
	rdb := lockSrv.Client(t)
	if !within(5*time.Second, func() bool { return rdb.ZCard(ctx, "dlock:sem:{shared}:waiters").Val() == 1 }) {
		t.Fatal("the worker that asked for 2 permits never queued")
	}
	set := time.Now()
	if err := s.SetPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		line, _ := two.ReadString('\n')
		got <- line
	}()
	// Nothing else wakes the waiter before its keep-alive: the holder's
	// lease is 30s.
	select {
	case line := <-got:
		if line != "held\n" {
			t.Fatalf("the waiting worker said %q", line)
		}
		if took := time.Since(set); took >= timing.KeepAlive(30*time.Second) {
			t.Errorf("the waiter got its permits %v after SetPermits, not before its keep-alive: SetPermits did not wake it", took)
		}
	case <-time.After(timing.KeepAlive(30 * time.Second)):
		t.Fatal("SetPermits(3) did not wake the worker waiting for 2 permits")
	}
	if _, err := s.TryAcquire(ctx, 1); err == nil || !strings.Contains(err.Error(), "3 of 3 permits in use") {
		t.Errorf("TryAcquire with 3 of the new total 3 held by the workers: %v", err)
	}
}

// TestSemaphoreSetPermits: SetPermits changes the total for every Client at
// once. Lowered below the permits in use, it lets the holders finish and
// admits nobody until fewer than the new total are in use; raised, it wakes
// the waiters that now fit, in other Clients too, at once.
func TestSemaphoreSetPermits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	a := clientOn(t, srv.Client(t)).Semaphore("p", 3)
	b := clientOn(t, srv.Client(t)).Semaphore("p", 3)
	h2, err := a.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	h1, err := a.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if h1.Err() != nil || h2.Err() != nil {
		t.Fatalf("holders after the total was lowered: %v, %v", h1.Err(), h2.Err())
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, 1)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	rdb := srv.Client(t)
	if !within(5*time.Second, func() bool { return rdb.ZCard(ctx, "dlock:sem:{p}:waiters").Val() == 1 }) {
		t.Fatal("the Acquire never queued")
	}
	if err := h1.Release(ctx); err != nil { // 2 in use of 1
		t.Fatal(err)
	}
	select {
	case l := <-got:
		t.Fatalf("a permit handed out while 2 are in use of the total 1: %v", l)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := a.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryAcquire while 2 are in use of 1: %v", err)
	}
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var l *dlock.Lease
	select {
	case l = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter not served once nothing was in use")
	}
	if l == nil {
		t.FailNow()
	}
	defer l.Release(ctx)

	// Raised: a waiter for more than the old total, in a third Client, is
	// woken at once.
	c := clientOn(t, srv.Client(t)).Semaphore("p", 3)
	big := make(chan *dlock.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, 3)
		if err != nil {
			t.Error(err)
		}
		big <- l
	}()
	if !within(5*time.Second, func() bool { return rdb.ZCard(ctx, "dlock:sem:{p}:waiters").Val() == 1 }) {
		t.Fatal("the Acquire(3) never queued")
	}
	set := time.Now()
	if err := a.SetPermits(ctx, 4); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-big:
		if l == nil {
			t.FailNow()
		}
		defer l.Release(ctx)
		if took := time.Since(set); took >= timing.KeepAlive(dlock.DefaultTTL) {
			t.Errorf("Acquire(3) served %v after SetPermits(4), not before its keep-alive", took)
		}
	case <-time.After(timing.KeepAlive(dlock.DefaultTTL)):
		t.Fatal("SetPermits(4) did not wake the waiter for 3")
	}
	if n, err := b.Available(ctx); err != nil || n != 0 {
		t.Errorf("Available with 4 of 4 in use: %d, %v", n, err)
	}
}

// TestSemaphoreBadTotals: a total below 1 or above 2^53, an empty name, a
// nil or zero Semaphore: an error, no panic, and nothing written to Redis.
func TestSemaphoreBadTotals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, _ := newClient(t)
	for _, tc := range []struct {
		name string
		f    func() error
	}{
		{"SetPermits(0)", func() error { return c.Semaphore("b", 1).SetPermits(ctx, 0) }},
		{"SetPermits(-3)", func() error { return c.Semaphore("b", 1).SetPermits(ctx, -3) }},
		{"SetPermits(2^53+1)", func() error { return c.Semaphore("b", 1).SetPermits(ctx, 1<<53+1) }},
		{"Semaphore(b, 0)", func() error { return c.Semaphore("b", 0).SetPermits(ctx, 2) }},
		{"Semaphore(b, -1) Acquire", func() error { _, err := c.Semaphore("b", -1).Acquire(ctx, 1); return err }},
		{"Semaphore(b, 2^53+1) TryAcquire", func() error { _, err := c.Semaphore("b", 1<<53+1).TryAcquire(ctx, 1); return err }},
		{"TryAcquire(0)", func() error { _, err := c.Semaphore("b", 1).TryAcquire(ctx, 0); return err }},
		{"TryAcquire(-1)", func() error { _, err := c.Semaphore("b", 1).TryAcquire(ctx, -1); return err }},
		{"empty name SetPermits", func() error { return c.Semaphore("", 1).SetPermits(ctx, 2) }},
		{"empty name TryAcquire", func() error { _, err := c.Semaphore("", 1).TryAcquire(ctx, 1); return err }},
		{"nil SetPermits", func() error { return (*dlock.Semaphore)(nil).SetPermits(ctx, 2) }},
		{"zero SetPermits", func() error { return (&dlock.Semaphore{}).SetPermits(ctx, 2) }},
		{"nil TryAcquire", func() error { _, err := (*dlock.Semaphore)(nil).TryAcquire(ctx, 1); return err }},
		{"nil context", func() error { return c.Semaphore("b", 1).SetPermits(nil, 2) }},                           //nolint:staticcheck // the nil context is the point
		{"nil context TryAcquire", func() error { _, err := c.Semaphore("b", 1).TryAcquire(nil, 1); return err }}, //nolint:staticcheck
	} {
		if err := tc.f(); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if keys := allKeys(t, rdb); len(keys) != 0 {
		t.Errorf("keys written by calls that failed: %q", keys)
	}
}

// TestRetriedSemaphoreSetPermits: a SetPermits whose reply is lost runs again
// (go-redis retries it) and changes nothing more than its first run did: when
// the retry runs after another Client set another total, or removed it, that
// stays.
func TestRetriedSemaphoreSetPermits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	total := func(t *testing.T, rdb *redis.Client) string {
		t.Helper()
		v, err := rdb.Get(ctx, "dlock:sem:{s}:total").Result()
		if errors.Is(err, redis.Nil) {
			return "none"
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	t.Run("alone", func(t *testing.T) {
		t.Parallel()
		c, p, rdb := proxied(t)
		in := dropOnce(t, p, "sem_release")
		if err := c.Semaphore("s", 1).SetPermits(ctx, 5); err != nil {
			t.Errorf("SetPermits whose reply was lost: %v", err)
		}
		checkHit(t, in)
		if got := total(t, rdb); got != "5" {
			t.Errorf("total %s, want 5", got)
		}
	})
	for _, tc := range []struct {
		name      string
		meanwhile func(s *dlock.Semaphore) error
		want      string
	}{
		{"after another SetPermits", func(s *dlock.Semaphore) error { return s.SetPermits(ctx, 7) }, "7"},
		{"after a Delete", func(s *dlock.Semaphore) error {
			ok, err := s.Delete(ctx)
			if err == nil && !ok {
				err = errors.New("Delete found no total")
			}
			return err
		}, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, p, rdb := proxied(t)
			held, check := retryLate(t, p, "sem_release")
			got := make(chan error, 1)
			go func() { got <- c.Semaphore("s", 1).SetPermits(ctx, 5) }()
			<-held // the first run set 5; its retry is held back
			if got := total(t, rdb); got != "5" {
				t.Fatalf("total after the first run: %s, want 5", got)
			}
			if err := tc.meanwhile(clientOn(t, rdb).Semaphore("s", 1)); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Errorf("SetPermits whose retry ran late: %v", err)
			}
			check()
			if got := total(t, rdb); got != tc.want {
				t.Errorf("total after the late retry: %s, want %s: the retry set its total again", got, tc.want)
			}
		})
	}
}
