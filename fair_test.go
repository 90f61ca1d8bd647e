package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestFairLockUnlock: a FairMutex's state lives on keys of its own, held
// once by its owner with its fence; a Mutex of the same name is another
// lock; a nil FairMutex and an empty name give errors. (What its Lease
// promises: the lease contract.)
func TestFairLockUnlock(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	m := c.FairMutex("f")
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s := readLock(t, rdb, "dlock:fair:{f}"); !s.Held() || s.Owner != l.Owner() || s.Holds != 1 || s.Fence != l.Fence() {
		t.Fatalf("fair lock state %+v, want held once by %s with fence %d", s, l.Owner(), l.Fence())
	}
	if rdb.Exists(ctx, "dlock:{f}").Val() != 0 {
		t.Fatal("a FairMutex used the Mutex's key")
	}
	// A Mutex of the same name is another lock.
	other, err := c.Mutex("f").TryLock(ctx)
	if err != nil {
		t.Fatalf("Mutex of the same name: %v", err)
	}
	other.Unlock(ctx)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := (*dlock.FairMutex)(nil).Lock(ctx); err == nil {
		t.Error("Lock on a nil FairMutex succeeded")
	}
	if _, err := c.FairMutex("").Lock(ctx); err == nil {
		t.Error("Lock of an empty name succeeded")
	}
}

// TestFairGrantOrder: waiters in different Clients (as different processes)
// get the lock in the order they arrived, and a newcomer, TryLock included,
// never jumps the queue, even when the lock is free for a moment.
func TestFairGrantOrder(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := srv.Client(t)
	holder := clientOn(t, srv.Client(t))
	m := holder.FairMutex("order")
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	var mu sync.Mutex
	var granted []int
	var wg sync.WaitGroup
	for i := range n {
		c := clientOn(t, srv.Client(t))
		wg.Go(func() {
			l, err := c.FairMutex("order").Lock(ctx)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			granted = append(granted, i)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
		})
		// Arrive one after another: each queued before the next starts.
		if !within(5*time.Second, func() bool { return rdb.ZCard(ctx, "dlock:fair:{order}:waiters").Val() == int64(i+1) }) {
			t.Fatalf("waiter %d never queued", i)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// While the queue drains, newcomers must not get in. A TryLock that
	// succeeds jumped the queue if a waiter had not had its turn by then (a
	// loaded machine can make this loop outlast the drain).
	for range 10 {
		if l, err := m.TryLock(ctx); err == nil {
			mu.Lock()
			served := len(granted)
			mu.Unlock()
			l.Unlock(ctx)
			if served < n {
				t.Errorf("TryLock jumped the queue: %d of %d waiters served", served, n)
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if fmt.Sprint(granted) != fmt.Sprint(want) {
		t.Fatalf("granted in order %v, want arrival order %v", granted, want)
	}
}

// TestFairCancelLeavesNothing: a queued waiter whose context ends leaves the
// queue, and the next waiter is served at the release without delay.
func TestFairCancelLeavesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	holder := clientOn(t, rdb)
	l, err := holder.FairMutex("c").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	quitter := clientOn(t, srv.Client(t))
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := quitter.FairMutex("c").Lock(qctx); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a deadline: %v", err)
	}
	if !within(2*time.Second, func() bool {
		return rdb.Exists(ctx, "dlock:fair:{c}:waiters", "dlock:fair:{c}:alive").Val() == 0
	}) {
		t.Fatalf("queue after the waiter gave up: %v %v",
			rdb.ZRange(ctx, "dlock:fair:{c}:waiters", 0, -1).Val(), rdb.HGetAll(ctx, "dlock:fair:{c}:alive").Val())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := stateKeys(rdb, "dlock:fair:*"); len(keys) != 1 || keys[0] != "dlock:fair:{c}" {
		t.Errorf("keys left: %v, want the lock's free state only", keys)
	} else if err := freedErr(rdb, keys[0], dlock.DefaultTTL); err != nil {
		t.Errorf("lock left after Unlock: %v", err)
	}
}

// TestFairDeadWaiter: a queued waiter process killed with SIGKILL holds the
// queue up for at most about half the TTL, not forever.
func TestFairDeadWaiter(t *testing.T) {
	t.Parallel()
	p := workerParams{Name: "deadwaiter", TTL: time.Second, Fair: true}
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	ctx := context.Background()
	c := clientOn(t, lockSrv.Client(t), dlock.WithTTL(p.TTL))
	l, err := c.FairMutex(p.Name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cmd := worker(t, "hold", "", lockSrv, resSrv, p)
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rdb := lockSrv.Client(t)
	if !within(5*time.Second, func() bool { return rdb.ZCard(ctx, "dlock:fair:{deadwaiter}:waiters").Val() == 1 }) {
		t.Fatal("the worker never queued")
	}
	got := lockInBackground(t, clientOn(t, lockSrv.Client(t), dlock.WithTTL(p.TTL)).FairMutex(p.Name))
	time.Sleep(100 * time.Millisecond) // queued second
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		took := at.Sub(killed)
		if took > p.TTL {
			t.Errorf("the queue moved on %v after its head died, want within the TTL %v", took, p.TTL)
		}
		t.Logf("queue moved on %v after its head was killed (TTL %v)", took, p.TTL)
	case <-time.After(10 * time.Second):
		t.Fatal("the queue never moved on")
	}
}

// TestFairProcessesHammer: the multi-process hammer of TestProcessesHammer,
// on a FairMutex, on one server and on a Cluster.
func TestFairProcessesHammer(t *testing.T) {
	t.Parallel()
	const procs = 4
	for _, d := range deployments {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel() // servers of its own
			p := workerParams{Name: "fairhammer", TTL: 10 * time.Second, Goroutines: 4, Iterations: 25, Fair: true, Deploy: d}
			o := hammer(t, "", procs, p)
			if len(o.workerErrors) > 0 {
				t.Fatalf("workers failed: %v", o.workerErrors)
			}
			if want := int64(procs * p.Goroutines * p.Iterations); o.acquired != want {
				t.Fatalf("acquired %d times, want %d", o.acquired, want)
			}
			for _, v := range o.violations() {
				t.Error(v)
			}
		})
	}
}
