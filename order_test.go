package dlock_test

// Waiting order: waiters are served in the order they came, also when it
// matters most: a holder that dies, a waiter or a grantee that is paused. Holders and waiters are worker processes ("hold": Lock, print
// the fence, hold until told), killed with SIGKILL and stopped with SIGSTOP.

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// holder is a "hold" worker: its first line, once it has the lock, comes on
// line; signal stops, continues or kills it.
type holder struct {
	cmd  *exec.Cmd
	line chan string
	// stdin is held open (and referenced, so that no finalizer closes
	// it): the worker holds the lock until a line or EOF comes.
	stdin io.WriteCloser
}

func startHoldWorker(t *testing.T, lockSrv, resSrv *redistest.Server, p workerParams) *holder {
	t.Helper()
	cmd := worker(t, "hold", "", lockSrv, resSrv, p)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, line: make(chan string, 1), stdin: stdin}
	go func() {
		if l, err := bufio.NewReader(stdout).ReadString('\n'); err == nil {
			h.line <- l
		}
	}()
	t.Cleanup(func() {
		_ = h.stdin.Close()
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return h
}

func (h *holder) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := h.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// TestOrderAfterHolderDies: waiters A then B queue behind a holder, in three
// processes; the holder is killed. At its lease's end the lock goes to A,
// the waiter registered longest ago, for a Mutex as for a FairMutex: B gets
// nothing while A holds.
func TestOrderAfterHolderDies(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "Mutex", true: "FairMutex"}[fair], func(t *testing.T) {
			t.Parallel()
			lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
			rdb := lockSrv.Client(t)
			queue := map[bool]string{false: "dlock:{dies}:waiters", true: "dlock:fair:{dies}:waiters"}[fair]
			p := workerParams{Name: "dies", TTL: time.Second, Fair: fair}
			h := startHoldWorker(t, lockSrv, resSrv, p)
			<-h.line
			a := startHoldWorker(t, lockSrv, resSrv, p)
			inQueue(t, rdb, queue, 1)
			b := startHoldWorker(t, lockSrv, resSrv, p)
			inQueue(t, rdb, queue, 2)
			h.signal(t, syscall.SIGKILL)
			select {
			case <-a.line:
			case <-b.line:
				t.Fatal("the waiter registered later took the lock of a holder that died")
			case <-time.After(10 * time.Second):
				t.Fatal("no waiter took the lock of a holder that died")
			}
		})
	}
}

// TestNoBargingPastPausedWaiter: a waiter is registered when its process is
// stopped; the holder dies. While the stopped waiter's registration lives
// (three keep-alives of its TTL, 3s here), the lock stays its: a newcomer's
// TryLock fails with ErrNotAcquired, though nobody holds the lock. Continued,
// the waiter takes it.
func TestNoBargingPastPausedWaiter(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "Mutex", true: "FairMutex"}[fair], func(t *testing.T) {
			t.Parallel()
			lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
			rdb := lockSrv.Client(t)
			lock := map[bool]string{false: "dlock:{barge}", true: "dlock:fair:{barge}"}[fair]
			h := startHoldWorker(t, lockSrv, resSrv, workerParams{Name: "barge", TTL: 500 * time.Millisecond, Fair: fair})
			<-h.line
			w := startHoldWorker(t, lockSrv, resSrv, workerParams{Name: "barge", TTL: 6 * time.Second, Fair: fair})
			inQueue(t, rdb, lock+":waiters", 1)
			w.signal(t, syscall.SIGSTOP)
			h.signal(t, syscall.SIGKILL)
			if !within(5*time.Second, func() bool { return !readLock(t, rdb, lock).Held() }) {
				t.Fatalf("the killed holder's lease never ended: %+v", readLock(t, rdb, lock))
			}
			c := clientOn(t, rdb)
			var m interface {
				TryLock(context.Context) (*dlock.Lease, error)
			} = c.Mutex("barge")
			if fair {
				m = c.FairMutex("barge")
			}
			if l, err := m.TryLock(context.Background()); !errors.Is(err, dlock.ErrNotAcquired) {
				if l != nil {
					_ = l.Unlock(context.Background())
				}
				t.Fatalf("TryLock of a free lock while a live waiter is registered ahead: %v, want ErrNotAcquired", err)
			}
			w.signal(t, syscall.SIGCONT)
			select {
			case <-w.line:
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter never took the lock once continued")
			}
		})
	}
}

// TestPausedGrantee: a waiter's process is stopped, and the holder's
// Unlock grants it the lock for its grant lease, which lapses while it is
// stopped. A FairMutex keeps the lock for it while its registration lives:
// a newcomer's TryLock fails, and continued, the grantee takes it. A Mutex
// passes it to the next live waiter, which takes it; the grantee, continued,
// waits behind it and takes it once that one is done.
func TestPausedGrantee(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "Mutex", true: "FairMutex"}[fair], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
			rdb := lockSrv.Client(t)
			lock := map[bool]string{false: "dlock:{paused}", true: "dlock:fair:{paused}"}[fair]
			c := clientOn(t, rdb)
			var m interface {
				Lock(context.Context) (*dlock.Lease, error)
				TryLock(context.Context) (*dlock.Lease, error)
			} = c.Mutex("paused", dlock.WithTTL(time.Second))
			if fair {
				m = c.FairMutex("paused", dlock.WithTTL(time.Second))
			}
			l, err := m.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The grantee: TTL 6s, so a grant lease of 600ms and a
			// registration of 3s.
			g := startHoldWorker(t, lockSrv, resSrv, workerParams{Name: "paused", TTL: 6 * time.Second, Fair: fair})
			inQueue(t, rdb, lock+":waiters", 1)
			var next *holder
			if !fair {
				next = startHoldWorker(t, lockSrv, resSrv, workerParams{Name: "paused", TTL: 6 * time.Second, Fair: fair})
				inQueue(t, rdb, lock+":waiters", 2)
			}
			g.signal(t, syscall.SIGSTOP)
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if fair {
				// The grant lapses; the lock is free, and the stopped grantee
				// still first in line.
				if !within(5*time.Second, func() bool { return !readLock(t, rdb, lock).Held() }) {
					t.Fatalf("the grant never lapsed: %+v", readLock(t, rdb, lock))
				}
				if l, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
					if l != nil {
						_ = l.Unlock(ctx)
					}
					t.Fatalf("TryLock while a FairMutex grantee whose grant lapsed is still registered: %v, want ErrNotAcquired", err)
				}
				g.signal(t, syscall.SIGCONT)
				select {
				case <-g.line:
				case <-time.After(10 * time.Second):
					t.Fatal("the grantee never took the lock once continued")
				}
				return
			}
			// Mutex: the next live waiter takes the lock while the grantee
			// is stopped.
			var nextFence string
			select {
			case nextFence = <-next.line:
			case <-g.line:
				t.Fatal("the stopped grantee printed")
			case <-time.After(10 * time.Second):
				t.Fatal("the next waiter never took the lock whose grant lapsed")
			}
			g.signal(t, syscall.SIGCONT)
			select {
			case f := <-g.line:
				t.Fatalf("the grantee whose grant lapsed took the lock (fence %s) while the next waiter holds it (fence %s; Redis holds %+v)",
					strings.TrimSpace(f), strings.TrimSpace(nextFence), readLock(t, rdb, lock))
			case <-time.After(time.Second):
			}
			next.signal(t, syscall.SIGKILL)
			select {
			case <-g.line:
			case <-time.After(15 * time.Second):
				t.Fatal("the grantee, back in line, never took the lock")
			}
		})
	}
}

// TestForceReleaseGrantsWaitersLease: ForceRelease, from a Client whose TTL
// is 30s, grants the next waiter the lock for that waiter's own grant lease
// (its TTL is 1s: 100ms), not for one from the admin Client's TTL (1s): a
// grantee that is gone costs what its own TTL says. The waiter is stopped,
// so that nothing lengthens the grant.
func TestForceReleaseGrantsWaitersLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	rdb := lockSrv.Client(t)
	holder := clientOn(t, rdb, dlock.WithTTL(time.Minute))
	l, err := holder.Mutex("forced").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := startHoldWorker(t, lockSrv, resSrv, workerParams{Name: "forced", TTL: time.Second})
	inQueue(t, rdb, "dlock:{forced}:waiters", 1)
	w.signal(t, syscall.SIGSTOP)
	admin := clientOn(t, rdb, dlock.WithTTL(30*time.Second))
	// The grant is made after this server time and lapses at the state's
	// until: at most that far apart, which tells the waiter's grant lease
	// (100ms) from the admin's (1s) however long the calls take on a loaded
	// machine (the test reads when the grant ends, not how much is left).
	before, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ev, err := admin.ForceRelease(ctx, dlock.KindMutex, "forced")
	if err != nil || len(ev.Evicted) != 1 {
		t.Fatalf("ForceRelease: %+v, %v", ev, err)
	}
	s := readLock(t, rdb, "dlock:{forced}")
	if g := time.Duration(s.Until-before.UnixMilli()) * time.Millisecond; s.Owner == "" || s.Until == 0 || g <= 0 || g >= time.Second {
		t.Errorf("the waiter's grant (state %+v) lapses %v after ForceRelease began, want under the admin's grant lease of 1s, as its own of 100ms is", s, g)
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("the evicted holder's Unlock: %v, want ErrLockLost", err)
	}
}

// TestEvictedUnlockRetried: a holder ForceRelease took the lock from unlocks,
// and the reply to its release is lost, so go-redis runs it again. Both runs
// find the record of the eviction: Unlock still says the lease was lost.
func TestEvictedUnlockRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, rdb := proxied(t)
	l, err := c.Mutex("ev").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin := clientOn(t, rdb)
	if ev, err := admin.ForceRelease(ctx, dlock.KindMutex, "ev"); err != nil || len(ev.Evicted) != 1 {
		t.Fatalf("ForceRelease: %+v, %v", ev, err)
	}
	in := dropOnce(t, p, "release")
	err = l.Unlock(ctx)
	checkHit(t, in)
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Unlock of an evicted hold, its reply lost and retried: %v, want ErrLockLost", err)
	}
}

// TestWaitersServedInOrder: waiters that arrive one after another get the
// lock in that order, even against a newcomer that tries when it is freed.
func TestWaitersServedInOrder(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := srv.Client(t)
	holder := clientOn(t, srv.Client(t))
	l, err := holder.Mutex("fifo").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		c := clientOn(t, srv.Client(t)) // one process each
		wg.Go(func() {
			l, err := c.Mutex("fifo").Lock(ctx)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			time.Sleep(20 * time.Millisecond)
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("waiter %d: Unlock: %v", i, err)
			}
			// Its release granted the lock to the next waiter, if any: a
			// fence above its own is out the moment the release returns
			// (had it freed the lock, the next would take it only when its
			// keep-alive fired, seconds later).
			if i < n-1 {
				if st, err := readLockErr(rdb, "dlock:{fifo}"); err != nil || st.Fence <= l.Fence() {
					t.Errorf("after waiter %d's release, with %d behind it: lock %+v (%v), want a fence above %d: granted to the next", i, n-1-i, st, err, l.Fence())
				}
			}
		})
		// Arrive one after another: each registered before the next starts.
		if !within(5*time.Second, func() bool { return rdb.ZCard(ctx, "dlock:{fifo}:waiters").Val() == int64(i+1) }) {
			t.Fatalf("waiter %d never registered", i)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// A newcomer right after the release finds the lock granted to the first waiter.
	if nl, err := holder.Mutex("fifo").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a newcomer took the lock from the waiters: %v", err)
		if nl != nil {
			nl.Unlock(ctx)
		}
	}
	wg.Wait()
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("waiters served in order %v, want 0..%d", got, n-1)
		}
	}
}
