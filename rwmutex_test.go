package dlock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestRWMutex(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := clientOn(t, rdb)
	ctx := context.Background()
	m := c.RWMutex("doc")
	if m.Name() != "doc" {
		t.Errorf("Name = %q", m.Name())
	}

	r1, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := m.TryRLock(ctx)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	if r2.Fence() <= r1.Fence() {
		t.Errorf("fences %d then %d", r1.Fence(), r2.Fence())
	}
	if n := rdb.ZCard(ctx, "dlock:rw:{doc}:readers").Val(); n != 2 {
		t.Errorf("%d read holders in Redis, want 2", n)
	}
	if ttl := rdb.PTTL(ctx, "dlock:rw:{doc}:readers").Val(); ttl <= 0 || ttl > dlock.DefaultTTL {
		t.Errorf("readers key expires in %v, want within the TTL", ttl)
	}
	if left, err := r1.TTL(ctx); err != nil || left <= 0 || left > dlock.DefaultTTL {
		t.Errorf("read lease TTL = %v, %v", left, err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock beside readers: %v", err)
	}
	// A Mutex of the same name is another lock.
	other, err := c.Mutex("doc").TryLock(ctx)
	if err != nil {
		t.Fatalf("Mutex of the same name: %v", err)
	}
	other.Unlock(ctx)

	// A writer waits for both readers.
	wc := clientOn(t, srv.Client(t))
	got := acquireInBackground(t, ctx, wc.RWMutex("doc").Lock)
	inQueue(t, rdb, "dlock:rw:{doc}:waiters", 1)
	if err := r1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := lockedWithin(got, 200*time.Millisecond); ok {
		t.Fatal("the writer got in beside a reader")
	}
	if err := r2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w, ok := lockedWithin(got, 2*time.Second)
	if !ok {
		t.Fatal("the writer was not let in after the last reader left")
	}
	if w.Fence() <= r2.Fence() {
		t.Errorf("write fence %d after read fence %d", w.Fence(), r2.Fence())
	}
	if got := rdb.HGetAll(ctx, "dlock:rw:{doc}").Val(); len(got) != 1 {
		t.Errorf("lock hash = %v, want the writer only", got)
	}
	if rdb.Exists(ctx, "dlock:rw:{doc}:readers").Val() != 0 {
		t.Error("readers key left after the last reader")
	}
	if _, err := m.TryRLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryRLock beside a writer: %v", err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock beside a writer: %v", err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := stateKeys(rdb, "dlock:rw:*"); len(keys) != 1 || keys[0] != "dlock:rw:{doc}:fence" {
		t.Errorf("keys left: %v, want the fence only", keys)
	}

	// Do and RDo unlock after fn.
	boom := errors.New("boom")
	if err := m.Do(ctx, func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Do: %v", err)
	}
	if err := m.RDo(ctx, func(context.Context) error { return nil }); err != nil {
		t.Errorf("RDo: %v", err)
	}
	if keys := stateKeys(rdb, "dlock:rw:*"); len(keys) != 1 {
		t.Errorf("keys left after Do and RDo: %v", keys)
	}
}

func TestRWMutexBadInput(t *testing.T) {
	t.Parallel()
	c, _, _ := newClient(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		m    *dlock.RWMutex
	}{
		{"empty name", c.RWMutex("")},
		{"TTL too small", c.RWMutex("x", dlock.WithTTL(time.Millisecond))},
		{"client-only option", c.RWMutex("x", dlock.WithPrefix("p:"))},
		{"nil client", (*dlock.Client)(nil).RWMutex("x")},
		{"zero RWMutex", &dlock.RWMutex{}},
		{"nil RWMutex", (*dlock.RWMutex)(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for op, f := range map[string]func(context.Context) (*dlock.Lease, error){
				"RLock": tc.m.RLock, "TryRLock": tc.m.TryRLock, "Lock": tc.m.Lock, "TryLock": tc.m.TryLock,
			} {
				if _, err := f(ctx); err == nil {
					t.Errorf("%s succeeded", op)
				}
			}
			fn := func(context.Context) error { return nil }
			if err := tc.m.Do(ctx, fn); err == nil {
				t.Error("Do succeeded")
			}
			if err := tc.m.RDo(ctx, fn); err == nil {
				t.Error("RDo succeeded")
			}
		})
	}
	m := c.RWMutex("x")
	//nolint:staticcheck // a nil context is the bad input under test
	if _, err := m.RLock(nil); err == nil {
		t.Error("RLock(nil) succeeded")
	}
	//nolint:staticcheck // a nil context is the bad input under test
	if _, err := m.Lock(nil); err == nil {
		t.Error("Lock(nil) succeeded")
	}
	if err := m.Do(ctx, nil); err == nil {
		t.Error("Do(nil fn) succeeded")
	}
	if err := m.RDo(ctx, nil); err == nil {
		t.Error("RDo(nil fn) succeeded")
	}
	if m.Name() != "x" || (*dlock.RWMutex)(nil).Name() != "" {
		t.Error("Name")
	}
}

// TestRWMutexReentry: a read lease's context re-enters the read hold (same
// fence, one holder in Redis), a write lease's context re-enters the write
// hold (count up in Redis), and a writer reads under its write lock with a
// hold of its own.
func TestRWMutexReentry(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	m := c.RWMutex("re")
	readers := func() int64 { return rdb.ZCard(ctx, "dlock:rw:{re}:readers").Val() }

	err := m.RDo(ctx, func(ctx context.Context) error {
		inner, err := m.RLock(ctx)
		if err != nil {
			return err
		}
		fence := inner.Fence()
		again, err := m.TryRLock(ctx)
		if err != nil {
			return err
		}
		if again.Fence() != fence {
			t.Errorf("re-entered read fences %d and %d", fence, again.Fence())
		}
		if n := readers(); n != 1 {
			t.Errorf("%d read holders after re-entry, want 1", n)
		}
		if err := again.Unlock(ctx); err != nil {
			return err
		}
		if err := inner.Unlock(ctx); err != nil {
			return err
		}
		if n := readers(); n != 1 {
			t.Errorf("%d read holders after the re-entries left, want the outer one", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := readers(); n != 0 {
		t.Errorf("%d read holders after RDo", n)
	}

	err = m.Do(ctx, func(ctx context.Context) error {
		inner, err := m.Lock(ctx)
		if err != nil {
			return err
		}
		if v := rdb.HVals(ctx, "dlock:rw:{re}").Val(); len(v) != 1 || v[0] != "2" {
			t.Errorf("write hold count %v after re-entry, want 2", v)
		}
		// A writer reads: a hold of its own, with its own fence.
		r, err := m.RLock(ctx)
		if err != nil {
			return err
		}
		if r.Fence() <= inner.Fence() {
			t.Errorf("read under write has fence %d, the write %d", r.Fence(), inner.Fence())
		}
		if n := readers(); n != 1 {
			t.Errorf("%d read holders under the write lock, want 1", n)
		}
		// A context carrying both re-enters either.
		rctx, cancel := r.Context(ctx)
		defer cancel()
		w2, err := m.TryLock(rctx)
		if err != nil {
			return fmt.Errorf("write re-entry with a read lease in the context too: %w", err)
		}
		r2, err := m.TryRLock(rctx)
		if err != nil {
			return err
		}
		if r2.Fence() != r.Fence() || w2.Fence() != inner.Fence() {
			t.Error("re-entries got new fences")
		}
		return errors.Join(r2.Unlock(ctx), w2.Unlock(ctx), r.Unlock(ctx), inner.Unlock(ctx))
	})
	if err != nil {
		t.Fatal(err)
	}
	if keys := stateKeys(rdb, "dlock:rw:*"); len(keys) != 1 {
		t.Errorf("keys left: %v, want the fence only", keys)
	}
	// A context from a read lease of another Client re-enters nothing.
	c2 := clientOn(t, rdb)
	w, err := c2.RWMutex("re").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := w.Context(ctx)
	defer cancel()
	if _, err := m.TryRLock(wctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("another Client's writer context let a reader in: %v", err)
	}
	w.Unlock(ctx)
}

// TestRWMutexDowngrade: a writer takes the read lock under its write lock and
// then unlocks the write lease; a writer waiting on another Client must not
// get in between, and gets in once the read is given back.
func TestRWMutexDowngrade(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	a := clientOn(t, srv.Client(t)).RWMutex("down")
	w, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gotW := acquireInBackground(t, ctx, clientOn(t, srv.Client(t)).RWMutex("down").Lock)
	inQueue(t, rdb, "dlock:rw:{down}:waiters", 1)
	gotR := acquireInBackground(t, ctx, clientOn(t, srv.Client(t)).RWMutex("down").RLock)
	inQueue(t, rdb, "dlock:rw:{down}:waiters", 2)

	wctx, cancel := w.Context(ctx)
	defer cancel()
	start := time.Now()
	r, err := a.RLock(wctx)
	if err != nil {
		t.Fatalf("RLock under the write lock: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("RLock under the write lock took %v with writers queued", took)
	}
	if r.Fence() <= w.Fence() {
		t.Errorf("read fence %d, write fence %d", r.Fence(), w.Fence())
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l, ok := lockedWithin(gotW, 300*time.Millisecond); ok {
		t.Fatalf("a writer got in between the downgrade's write and read (fence %d)", l.Fence())
	}
	if _, ok := lockedWithin(gotR, 0); ok {
		t.Fatal("a reader queued behind a writer got in ahead of it")
	}
	if _, err := clientOn(t, rdb).RWMutex("down").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock during the downgraded read: %v", err)
	}
	if r.Err() != nil {
		t.Fatalf("downgraded read lost: %v", r.Err())
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w2, ok := lockedWithin(gotW, 2*time.Second)
	if !ok {
		t.Fatal("the waiting writer did not get in after the downgraded read ended")
	}
	if w2.Fence() <= r.Fence() {
		t.Errorf("next writer's fence %d, downgraded read's %d", w2.Fence(), r.Fence())
	}
	if err := w2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r2, ok := lockedWithin(gotR, 2*time.Second)
	if !ok {
		t.Fatal("the queued reader did not get in after the writer")
	}
	r2.Unlock(ctx)
}

// TestRWMutexUpgradeFails: Lock with a read lease in its context fails at
// once with a clear error, and changes nothing.
func TestRWMutexUpgradeFails(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	m := c.RWMutex("up")
	r, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := r.Context(ctx)
	defer cancel()
	for op, f := range map[string]func(context.Context) (*dlock.Lease, error){"Lock": m.Lock, "TryLock": m.TryLock} {
		start := time.Now()
		_, err := f(rctx)
		if !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "upgrade from read to write is not supported") {
			t.Errorf("%s under a read lease: %v", op, err)
		}
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Errorf("%s under a read lease took %v to fail", op, took)
		}
	}
	err = m.RDo(ctx, func(ctx context.Context) error {
		_, err := m.Lock(ctx)
		return err
	})
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("Lock within RDo: %v", err)
	}
	if rdb.Exists(ctx, "dlock:rw:{up}:waiters", "dlock:rw:{up}:alive", "dlock:rw:{up}").Val() != 0 {
		t.Error("the refused upgrade left something in Redis")
	}
	if r.Err() != nil {
		t.Errorf("read lease ended: %v", r.Err())
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRWMutexWriterNotStarved: readers in several Clients keep the lock
// read-held without a break; a writer still gets in within a bound each time
// it asks, because readers that come after it wait behind it.
func TestRWMutexWriterNotStarved(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx, stop := context.WithCancel(context.Background())
	const name = "starve"
	var reads atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		m := clientOn(t, srv.Client(t)).RWMutex(name)
		for range 3 {
			wg.Go(func() {
				for ctx.Err() == nil {
					l, err := m.RLock(ctx)
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("RLock: %v", err)
						}
						return
					}
					reads.Add(1)
					time.Sleep(time.Duration(5+rand.IntN(10)) * time.Millisecond)
					if err := l.Unlock(context.Background()); err != nil {
						t.Errorf("Unlock: %v", err)
						return
					}
				}
			})
		}
	}
	defer func() {
		stop()
		wg.Wait()
	}()
	time.Sleep(200 * time.Millisecond)

	// The pressure: a writer that only tries, without queueing, is starved.
	w := clientOn(t, srv.Client(t)).RWMutex(name)
	tries, wins := 0, 0
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); tries++ {
		if l, err := w.TryLock(ctx); err == nil {
			wins++
			l.Unlock(ctx)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("a writer trying without queueing got in %d times in %d tries", wins, tries)

	// The bound: the readers inside when the writer queued leave within
	// 15ms, and a few round trips more. A writer the readers starve waits
	// as long as they keep coming, so the bound is set far above that, where
	// a loaded machine's pauses (a second and more on CI) do not reach.
	const bound = 5 * time.Second
	var waits []time.Duration
	var overtook []int64
	for range 5 {
		start := time.Now()
		before := reads.Load()
		lctx, cancel := context.WithTimeout(ctx, bound)
		l, err := w.Lock(lctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the writer did not get in within %v behind a stream of readers (earlier waits %v)", bound, waits)
		}
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, time.Since(start))
		overtook = append(overtook, reads.Load()-before)
		time.Sleep(5 * time.Millisecond)
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if slices.Max(waits) > bound {
		t.Errorf("the writer waited up to %v behind a stream of readers, want within %v", slices.Max(waits), bound)
	}
	t.Logf("writer waits behind 12 readers (5-15ms holds): %v; reads begun while it waited: %v; %d reads in all",
		waits, overtook, reads.Load())
}

// TestRWMutexWakesOnlyWhoCanProceed: with a writer holding and, queued in
// order, two readers (one Client), a writer (another) and a reader (a third):
// the write release wakes the two readers only; the first of them leaving
// wakes nobody; the last wakes the writer only; the writer's release wakes
// the last reader. Requests are counted on each waiter's Client.
func TestRWMutexWakesOnlyWhoCanProceed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const name = "wake"
	w0, err := clientOn(t, rdb).RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiter := func() (*dlock.RWMutex, *requestCounter) {
		r := srv.Client(t)
		rc := countRequests(r)
		return clientOn(t, r).RWMutex(name), rc
	}
	ma, ra := waiter()
	mb, rb := waiter()
	mc, rcC := waiter()
	got1 := acquireInBackground(t, ctx, ma.RLock)
	inQueue(t, rdb, "dlock:rw:{"+name+"}:waiters", 1)
	got2 := acquireInBackground(t, ctx, ma.RLock)
	inQueue(t, rdb, "dlock:rw:{"+name+"}:waiters", 2)
	got3 := acquireInBackground(t, ctx, mb.Lock)
	inQueue(t, rdb, "dlock:rw:{"+name+"}:waiters", 3)
	got4 := acquireInBackground(t, ctx, mc.RLock)
	inQueue(t, rdb, "dlock:rw:{"+name+"}:waiters", 4)
	ra.take()
	rb.take()
	rcC.take()
	settle := func() { time.Sleep(200 * time.Millisecond) }
	check := func(step string, a, b, c int64) {
		t.Helper()
		if ga, gb, gc := ra.take(), rb.take(), rcC.take(); ga != a || (b >= 0 && gb != b) || gc != c {
			t.Errorf("%s: requests from the readers' Client %d, the writer's %d, the last reader's %d; want %d, %d, %d",
				step, ga, gb, gc, a, b, c)
		}
	}

	if err := w0.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r1, ok1 := lockedWithin(got1, 2*time.Second)
	r2, ok2 := lockedWithin(got2, 2*time.Second)
	if !ok1 || !ok2 {
		t.Fatal("the write release did not let both queued readers in")
	}
	settle()
	check("write release", 2, 0, 0)

	if err := r1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	settle()
	check("a reader leaving while another reads", 1, 0, 0) // its own release
	if _, ok := lockedWithin(got3, 0); ok {
		t.Fatal("the writer got in beside a reader")
	}

	rb.takeScripts()
	if err := r2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w3, ok := lockedWithin(got3, 2*time.Second)
	if !ok {
		t.Fatal("the last reader leaving did not let the writer in")
	}
	settle()
	// The writer was granted the lock: its Lock returned on the message, and
	// its Client lengthened the lease (a server that does not know the script
	// yet answers the first EVALSHA with NOSCRIPT: two requests).
	if got := rb.scripts("rw_acquire", "extend"); !maps.Equal(got, map[string]int{"extend": 1}) {
		t.Errorf("the last reader leaving: the writer's Client ran %v, want one lengthening extend", got)
	}
	check("the last reader leaving", 1, -1, 0)

	if err := w3.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r4, ok := lockedWithin(got4, 2*time.Second)
	if !ok {
		t.Fatal("the write release did not let the last reader in")
	}
	settle()
	check("the second write release", 0, 1, 1)
	r4.Unlock(ctx)
}

// TestRWMutexCancelLeavesNothing: a writer or a reader whose context ends
// while queued leaves the queue at once.
func TestRWMutexCancelLeavesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const name = "cancel"
	holder := clientOn(t, rdb).RWMutex(name)
	quitter := clientOn(t, srv.Client(t)).RWMutex(name)
	gone := func() bool {
		return rdb.Exists(ctx, "dlock:rw:{cancel}:waiters", "dlock:rw:{cancel}:alive").Val() == 0
	}
	for _, tc := range []struct {
		what       string
		hold, wait func(context.Context) (*dlock.Lease, error)
	}{
		{"writer behind a reader", holder.RLock, quitter.Lock},
		{"reader behind a writer", holder.Lock, quitter.RLock},
		{"writer behind a writer", holder.Lock, quitter.Lock},
	} {
		l, err := tc.hold(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = tc.wait(wctx)
		cancel()
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s with a deadline: %v", tc.what, err)
		}
		if !within(2*time.Second, gone) {
			t.Fatalf("%s: queue left after it gave up: %v %v", tc.what,
				rdb.ZRange(ctx, "dlock:rw:{cancel}:waiters", 0, -1).Val(), rdb.HGetAll(ctx, "dlock:rw:{cancel}:alive").Val())
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Besides the fence, the fences hash may stay for a while if it holds
	// only records of owners whose acquire was cut short in flight (its
	// outcome unknown), each until that acquire's deadline: they expire.
	for _, k := range stateKeys(rdb, "dlock:rw:*") {
		switch k {
		case "dlock:rw:{cancel}:fence":
			continue
		case "dlock:rw:{cancel}:fences":
			fields := rdb.HKeys(ctx, k).Val()
			voids := !slices.ContainsFunc(fields, func(f string) bool { return !strings.HasPrefix(f, "void:") })
			if left := rdb.PTTL(ctx, k).Val(); voids && left > 0 && left <= 10*time.Second {
				continue
			}
			t.Errorf("%s left: fields %v, TTL %v; want none, or only records of cut-short acquires, expiring within 10s", k, fields, rdb.PTTL(ctx, k).Val())
		default:
			t.Errorf("key left: %s, want the fence only", k)
		}
	}
}

// TestRWMutexWriterGivingUpLetsReadersIn: readers queued behind a waiting
// writer get in at once when that writer gives up, beside the readers that
// hold the lock.
func TestRWMutexWriterGivingUpLetsReadersIn(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const name = "giveup"
	r0, err := clientOn(t, rdb).RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gotW := acquireInBackground(t, wctx, clientOn(t, srv.Client(t)).RWMutex(name).Lock)
	inQueue(t, rdb, "dlock:rw:{"+name+"}:waiters", 1)
	gotR := acquireInBackground(t, ctx, clientOn(t, srv.Client(t)).RWMutex(name).RLock)
	inQueue(t, rdb, "dlock:rw:{"+name+"}:waiters", 2)
	if _, ok := lockedWithin(gotR, 200*time.Millisecond); ok {
		t.Fatal("a reader got in ahead of a waiting writer")
	}
	cancel()
	if l, _ := lockedWithin(gotW, 2*time.Second); l != nil {
		t.Fatal("the cancelled writer got the lock")
	}
	cancelled := time.Now()
	r, ok := lockedWithin(gotR, 2*time.Second)
	if !ok {
		t.Fatal("the reader was not let in when the writer ahead gave up")
	}
	// Without the wake-up it would wait for its keep-alive, 5s.
	if took := time.Since(cancelled); took > time.Second {
		t.Errorf("reader got in %v after the writer ahead gave up", took)
	}
	r.Unlock(ctx)
	r0.Unlock(ctx)
}

// TestRWMutexReadLease: the readers key of a renewed read hold expires
// within the hold's TTL. (Renewal and a fixed read hold's expiry: the lease
// contract.)
func TestRWMutexReadLease(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	ttl := time.Second // renewed every 333ms: a loaded machine's pauses lose none
	r, err := c.RWMutex("lease", dlock.WithTTL(ttl)).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl) // renewals
	if r.Err() != nil {
		t.Fatalf("renewed read lease lost: %v", r.Err())
	}
	if pttl := rdb.PTTL(ctx, "dlock:rw:{lease}:readers").Val(); pttl <= 0 || pttl > ttl {
		t.Errorf("readers key expires in %v, want within the TTL %v", pttl, ttl)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// rwResource is the resource of the RWMutex tests: it counts the readers and
// writers inside and records every entry that breaks "many readers or one
// writer".
//
// KEYS[1] hash: readers, writers, peakreaders, violations
// ARGV[1] "r+" a reader enters, "r-" leaves, "w+" a writer enters, "w-" leaves
// Returns 1 if the entry broke the rule, else 0.
var rwResource = redis.NewScript(`
local r = tonumber(redis.call('HGET', KEYS[1], 'readers') or '0')
local w = tonumber(redis.call('HGET', KEYS[1], 'writers') or '0')
local bad = 0
if ARGV[1] == 'r+' then
  if w > 0 then bad = 1 end
  r = r + 1
  if r > tonumber(redis.call('HGET', KEYS[1], 'peakreaders') or '0') then
    redis.call('HSET', KEYS[1], 'peakreaders', r)
  end
elseif ARGV[1] == 'r-' then
  r = r - 1
elseif ARGV[1] == 'w+' then
  if w > 0 or r > 0 then bad = 1 end
  w = w + 1
else
  w = w - 1
end
redis.call('HSET', KEYS[1], 'readers', r, 'writers', w)
if bad == 1 then
  redis.call('HINCRBY', KEYS[1], 'violations', 1)
end
return bad`)

// rwWorker runs p.Goroutines goroutines, each taking the lock p.Iterations
// times, for reading p.ReadShare percent of the time, else for writing. Inside,
// it enters the resource, stays a moment, and leaves; a writer also makes a
// fenced write.
func rwWorker(c *dlock.Client, resRDB *redis.Client, p workerParams) error {
	ctx := context.Background()
	m := c.RWMutex(p.Name)
	var rep hammerReport
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
	var wg sync.WaitGroup
	for range p.Goroutines {
		wg.Go(func() {
			for range p.Iterations {
				read := rand.IntN(100) < p.ReadShare
				lock, in, out := m.Lock, "w+", "w-"
				if read {
					lock, in, out = m.RLock, "r+", "r-"
				}
				l, err := lock(ctx)
				if err != nil {
					fail(err)
					return
				}
				atomic.AddInt64(&rep.Acquired, 1)
				if err := rwResource.Run(ctx, resRDB, []string{"rw"}, in).Err(); err != nil {
					fail(err)
					return
				}
				if !read {
					if err := fencedWrite.Run(ctx, resRDB, []string{"resource"}, l.Fence()).Err(); err != nil {
						fail(err)
						return
					}
				}
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
				if err := rwResource.Run(ctx, resRDB, []string{"rw"}, out).Err(); err != nil {
					fail(err)
					return
				}
				if err := l.Unlock(ctx); err != nil {
					atomic.AddInt64(&rep.UnlockErrors, 1)
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		rep.FirstError = firstErr.Error()
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// rwHoldWorker takes the lock (for writing if p.Write, else for reading),
// prints its fence and waits to be killed.
func rwHoldWorker(c *dlock.Client, p workerParams) error {
	ctx := context.Background()
	m := c.RWMutex(p.Name)
	lock := m.RLock
	if p.Write {
		lock = m.Lock
	}
	l, err := lock(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("%d\n", l.Fence())
	_, err = bufio.NewReader(os.Stdin).ReadString('\n')
	return err
}

// startHolder starts an "rwhold" worker and returns it, with its fence, once
// it holds the lock. It is killed when the test ends.
func startHolder(t *testing.T, lockSrv, resSrv *redistest.Server, p workerParams) (*exec.Cmd, int64) {
	t.Helper()
	cmd := worker(t, "rwhold", "", lockSrv, resSrv, p)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.StdinPipe(); err != nil { // held open: the holder waits on it
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var fence int64
	if _, err := fmt.Fscanln(bufio.NewReader(stdout), &fence); err != nil {
		t.Fatalf("read the holder's fence: %v", err)
	}
	return cmd, fence
}

// TestRWMutexCrashedReader: a reader process killed with SIGKILL loses its
// read hold after its own TTL, while the other readers keep theirs; it keeps
// the lock from a writer no longer than that.
func TestRWMutexCrashedReader(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	p := workerParams{Name: "crashedreader", TTL: ttl}
	t.Run("last-reader", func(t *testing.T) {
		// The other reader leaves at once: the writer gets in when the dead
		// reader's lease lapses.
		lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
		ctx := context.Background()
		other, err := clientOn(t, lockSrv.Client(t)).RWMutex(p.Name, dlock.WithTTL(10*time.Second)).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cmd, _ := startHolder(t, lockSrv, resSrv, p)
		killed := time.Now()
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		got := acquireInBackground(t, ctx, clientOn(t, lockSrv.Client(t)).RWMutex(p.Name).Lock)
		inQueue(t, lockSrv.Client(t), "dlock:rw:{"+p.Name+"}:waiters", 1)
		if err := other.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		w, ok := lockedWithin(got, 10*time.Second)
		if !ok {
			t.Fatal("the writer never got in")
		}
		took := time.Since(killed)
		if margin := 300 * time.Millisecond; took > ttl+margin {
			t.Errorf("writer got in %v after the reader was killed, want within its TTL %v + %v", took, ttl, margin)
		}
		t.Logf("writer in %v after SIGKILL of the last other reader (its TTL %v)", took, ttl)
		w.Unlock(ctx)
	})
	t.Run("others-keep-reading", func(t *testing.T) {
		// Another reader with the same TTL keeps reading, renewed, well past
		// the dead one's lapse; the writer gets in as soon as it leaves.
		lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
		rdb := lockSrv.Client(t)
		ctx := context.Background()
		other, err := clientOn(t, rdb).RWMutex(p.Name, dlock.WithTTL(ttl)).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cmd, _ := startHolder(t, lockSrv, resSrv, p)
		if n := rdb.ZCard(ctx, "dlock:rw:{crashedreader}:readers").Val(); n != 2 {
			t.Fatalf("%d readers, want 2", n)
		}
		killed := time.Now()
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		got := acquireInBackground(t, ctx, clientOn(t, lockSrv.Client(t)).RWMutex(p.Name).Lock)
		time.Sleep(time.Until(killed.Add(ttl + 200*time.Millisecond)))
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		live := rdb.ZCount(ctx, "dlock:rw:{crashedreader}:readers", fmt.Sprint(now.UnixMilli()), "+inf").Val()
		if live != 1 {
			t.Errorf("%d live read holds %v after one of two readers was killed, want 1", live, ttl+200*time.Millisecond)
		}
		time.Sleep(time.Until(killed.Add(5 * ttl / 2)))
		if other.Err() != nil {
			t.Fatalf("the living reader lost its lease: %v", other.Err())
		}
		if _, ok := lockedWithin(got, 0); ok {
			t.Fatal("the writer got in beside the living reader")
		}
		left := time.Now()
		if err := other.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		w, ok := lockedWithin(got, 5*time.Second)
		if !ok {
			t.Fatal("the writer never got in")
		}
		if took := time.Since(left); took > 300*time.Millisecond {
			t.Errorf("writer got in %v after the living reader left", took)
		}
		t.Logf("writer in %v after the living reader left, %v after the other was killed", time.Since(left), time.Since(killed))
		w.Unlock(ctx)
	})
}

// TestRWMutexKilledWriter: a writer process killed with SIGKILL leaves the
// lock free, for readers and writers, within its TTL.
func TestRWMutexKilledWriter(t *testing.T) {
	t.Parallel()
	p := workerParams{Name: "killedwriter", TTL: time.Second, Write: true}
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	cmd, fence := startHolder(t, lockSrv, resSrv, p)
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := clientOn(t, lockSrv.Client(t)).RWMutex(p.Name)
	r, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(killed)
	if margin := 300 * time.Millisecond; took > p.TTL+margin {
		t.Errorf("lock free for readers %v after the writer was killed, want within TTL %v + %v", took, p.TTL, margin)
	}
	if r.Fence() <= fence {
		t.Errorf("fence %d after the killed writer's %d", r.Fence(), fence)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the reader left: %v", err)
	}
	w.Unlock(ctx)
	t.Logf("lock free %v after SIGKILL of the writer (TTL %v)", took, p.TTL)
}

// rwOutcome is what the RWMutex hammer checks.
type rwOutcome struct {
	acquired, unlockErrors                    int64
	violations, peakReaders, readers, writers int64
	accepted, rejected                        int64
	workerErrors                              []string
}

func rwHammer(t *testing.T, mutant string, procs int, p workerParams) rwOutcome {
	_, resSrv, reports := runWorkers[hammerReport](t, "rw", mutant, procs, p)
	var o rwOutcome
	for _, rep := range reports {
		o.acquired += rep.Acquired
		o.unlockErrors += rep.UnlockErrors
		if rep.FirstError != "" {
			o.workerErrors = append(o.workerErrors, rep.FirstError)
		}
	}
	ctx := context.Background()
	res := resSrv.Client(t)
	rw := res.HGetAll(ctx, "rw").Val()
	fmt.Sscan(rw["violations"], &o.violations)
	fmt.Sscan(rw["peakreaders"], &o.peakReaders)
	fmt.Sscan(rw["readers"], &o.readers)
	fmt.Sscan(rw["writers"], &o.writers)
	fw := res.HGetAll(ctx, "resource").Val()
	fmt.Sscan(fw["accepted"], &o.accepted)
	fmt.Sscan(fw["rejected"], &o.rejected)
	return o
}

// TestRWMutexProcesses: 4 processes x 4 goroutines take one RWMutex, 80% for
// reading. Never may a writer be inside beside a reader or another writer;
// readers must have been inside together; every writer's fenced write must be
// accepted. An acquire script whose writers ignore readers must be caught by
// the same check.
func TestRWMutexProcesses(t *testing.T) {
	t.Parallel()
	p := workerParams{Name: "rwhammer", TTL: 10 * time.Second, Goroutines: 4, Iterations: 40, ReadShare: 80}
	const procs = 4
	for _, d := range deployments {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel() // servers of its own
			p := p
			p.Deploy = d
			o := rwHammer(t, "", procs, p)
			if len(o.workerErrors) > 0 {
				t.Fatalf("workers failed: %v", o.workerErrors)
			}
			if want := int64(procs * p.Goroutines * p.Iterations); o.acquired != want {
				t.Fatalf("acquired %d times, want %d", o.acquired, want)
			}
			if o.violations != 0 {
				t.Errorf("%d entries found a writer beside a reader or another writer", o.violations)
			}
			if o.peakReaders < 2 {
				t.Errorf("at most %d readers inside at once: reads were not shared", o.peakReaders)
			}
			if o.rejected != 0 || o.accepted == 0 {
				t.Errorf("fenced writes: %d accepted, %d rejected", o.accepted, o.rejected)
			}
			if o.unlockErrors != 0 {
				t.Errorf("%d Unlocks failed", o.unlockErrors)
			}
			if o.readers != 0 || o.writers != 0 {
				t.Errorf("%d readers and %d writers still inside at the end", o.readers, o.writers)
			}
			t.Logf("%d acquisitions, %d writes, up to %d readers at once, no violation", o.acquired, o.accepted, o.peakReaders)
		})
	}
	t.Run("broken-rwmutex-is-caught", func(t *testing.T) {
		t.Parallel()
		o := rwHammer(t, "rw-writer-ignores-readers", procs, p)
		if o.violations == 0 {
			t.Fatalf("writers that ignore readers passed the check: %+v", o)
		}
		t.Logf("caught, as it must be: %d violations in %d acquisitions", o.violations, o.acquired)
	})
}

// TestRWMutexChurn: goroutines in several Clients take one RWMutex for
// reading and writing, with Lock, RLock, TryLock and TryRLock, give up
// waiting at random, and downgrade now and then. Never may a writer be inside
// beside a reader or another writer, and when all are done nothing is left in
// Redis but the fence.
func TestRWMutexChurn(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	var readers, writers, violations, acquired, gaveUp atomic.Int64
	enter := func(read bool) {
		if read {
			readers.Add(1)
			if writers.Load() != 0 {
				violations.Add(1)
			}
		} else if writers.Add(1) != 1 || readers.Load() != 0 {
			violations.Add(1)
		}
	}
	var wg sync.WaitGroup
	for range 4 {
		// A grant lease is a tenth of the TTL, and a grantee loses a grant
		// not lengthened within half of it: 3 s leaves 150 ms, which a
		// loaded machine's pauses stay under, so no lease is lost and every
		// Unlock must say nil.
		c := clientOn(t, srv.Client(t), dlock.WithTTL(3*time.Second))
		for range 4 {
			wg.Go(func() {
				m := c.RWMutex("churn")
				bg := context.Background()
				for range 60 {
					// Cancelled, not timed out: a deadline would also cut the
					// shared pub/sub connection's requests short.
					ctx, cancel := context.WithCancel(bg)
					stop := time.AfterFunc(time.Duration(rand.IntN(80))*time.Millisecond, cancel)
					ops := []func(context.Context) (*dlock.Lease, error){m.RLock, m.TryRLock, m.Lock, m.TryLock}
					op := rand.IntN(len(ops))
					read := op < 2
					l, err := ops[op](ctx)
					stop.Stop()
					cancel()
					if err != nil {
						if !errors.Is(err, dlock.ErrNotAcquired) {
							t.Errorf("acquire: %v", err)
							return
						}
						gaveUp.Add(1)
						continue
					}
					acquired.Add(1)
					enter(read)
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
					if !read && rand.IntN(3) == 0 {
						lctx, cancel := l.Context(bg)
						r, err := m.RLock(lctx)
						cancel()
						if err != nil && l.Err() != nil {
							// The write lease was lost first (a grant not
							// lengthened in time on a loaded machine): its
							// holder stops.
							writers.Add(-1)
							_ = l.Unlock(bg)
							continue
						}
						if err != nil {
							t.Errorf("RLock under the write lock: %v", err)
							return
						}
						readers.Add(1) // beside its own write: allowed
						writers.Add(-1)
						if err := l.Unlock(bg); err != nil {
							t.Errorf("Unlock of the write lease: %v", err)
						}
						time.Sleep(time.Millisecond)
						l, read = r, true
					}
					if read {
						readers.Add(-1)
					} else {
						writers.Add(-1)
					}
					if err := l.Unlock(bg); err != nil {
						t.Errorf("Unlock: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	if violations.Load() != 0 {
		t.Errorf("%d entries found a writer beside a reader or another writer", violations.Load())
	}
	ctx := context.Background()
	if !within(5*time.Second, func() bool { return len(stateKeys(rdb, "dlock:rw:*")) == 1 }) {
		t.Errorf("keys left: %v; queue %v; alive %v", stateKeys(rdb, "dlock:rw:*"),
			rdb.ZRange(ctx, "dlock:rw:{churn}:waiters", 0, -1).Val(), rdb.HGetAll(ctx, "dlock:rw:{churn}:alive").Val())
	}
	t.Logf("%d acquisitions, %d gave up", acquired.Load(), gaveUp.Load())
}

// BenchmarkRWMutexUncontended measures one goroutine taking and releasing a
// free RWMutex back to back, for reading (rlock) and for writing (lock).
// req/op counts requests in the client and must be 2.
func BenchmarkRWMutexUncontended(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	for _, mode := range []string{"rlock", "lock"} {
		b.Run(mode, func(b *testing.B) {
			var rc requestCounter
			m := clientOn(b, benchRedis(b, srv, &rc, 0)).RWMutex("bench-rw-" + mode)
			lock := m.RLock
			if mode == "lock" {
				lock = m.Lock
			}
			benchTwoRequests(b, &rc, func() error {
				l, err := lock(ctx)
				if err != nil {
					return err
				}
				return l.Unlock(ctx)
			})
		})
	}
}

// rwRun is the outcome of runRWContended.
type rwRun struct {
	readWaits, writeWaits []time.Duration // from calling RLock/Lock to its return
	elapsed               time.Duration
	held                  time.Duration // total time slept inside critical sections
	violations            int64         // entries that found a writer beside a reader or another writer
	peakReaders           int64
}

// runRWContended has every RWMutex loop lock → critical section → unlock,
// for reading readShare percent of the time, until n critical sections are
// done in all. A critical section lasts a random time below hold.
func runRWContended(ctx context.Context, ms []*dlock.RWMutex, n, readShare int, hold time.Duration) (rwRun, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		run                 rwRun
		claimed             atomic.Int64
		readersIn, writerIn atomic.Int64
		violations, peak    atomic.Int64
		held                atomic.Int64
		mu                  sync.Mutex
		wg                  sync.WaitGroup
	)
	errs := make([]error, len(ms))
	start := time.Now()
	for i, m := range ms {
		wg.Go(func() {
			var rw, ww []time.Duration
			defer func() {
				mu.Lock()
				run.readWaits = append(run.readWaits, rw...)
				run.writeWaits = append(run.writeWaits, ww...)
				mu.Unlock()
			}()
			for claimed.Add(1) <= int64(n) {
				read := rand.IntN(100) < readShare
				lock := m.Lock
				if read {
					lock = m.RLock
				}
				t0 := time.Now()
				l, err := lock(ctx)
				if err != nil {
					errs[i] = fmt.Errorf("contender %d: lock: %w", i, err)
					cancel()
					return
				}
				wait := time.Since(t0)
				if read {
					rw = append(rw, wait)
					r := readersIn.Add(1)
					if writerIn.Load() != 0 {
						violations.Add(1)
					}
					for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
					}
				} else {
					ww = append(ww, wait)
					if writerIn.Add(1) != 1 || readersIn.Load() != 0 {
						violations.Add(1)
					}
				}
				if hold > 0 {
					t := time.Now()
					time.Sleep(rand.N(hold))
					held.Add(int64(time.Since(t)))
				}
				if read {
					readersIn.Add(-1)
				} else {
					writerIn.Add(-1)
				}
				if err := l.Unlock(ctx); err != nil {
					errs[i] = fmt.Errorf("contender %d: unlock: %w", i, err)
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	run.elapsed = time.Since(start)
	run.violations = violations.Load()
	run.peakReaders = peak.Load()
	run.held = time.Duration(held.Load())
	return run, errors.Join(errs...)
}

// BenchmarkRWMutexContended measures 16 contenders on ONE RWMutex, each with
// its own go-redis client and dlock Client, as 16 processes would. Each loops
// lock → critical section → unlock until b.N critical sections are done; a
// critical section is a read with the variant's probability (r100: all
// reads, r90, r50, r0: all writes, which is a FairMutex's path and compares
// with BenchmarkContended/fair-loop). The critical section is empty, except
// in r90-hold, where it sleeps 0-200µs. An atomic check that no writer is
// inside beside a reader or another writer stops the benchmark if it fails.
//
// Metrics: cs/s, critical sections per second; read-wait-p50/max-µs and
// write-wait-p50/max-µs, from calling RLock or Lock to its return; req/cs,
// requests sent by all clients per critical section (pub/sub traffic not
// counted); in r90-hold only, peak-readers, the most readers inside at once,
// and hold-mean-µs, the time actually slept inside a critical section (a
// short sleep lasts longer than asked, up to a millisecond, when the process
// is otherwise idle).
func BenchmarkRWMutexContended(b *testing.B) {
	srv := redistest.Start(b)
	for _, v := range []struct {
		name  string
		share int // percent of reads
		hold  time.Duration
	}{
		{"r100", 100, 0}, {"r90", 90, 0}, {"r50", 50, 0}, {"r0", 0, 0}, {"r90-hold", 90, maxThink},
	} {
		share, hold := v.share, v.hold
		b.Run(v.name, func(b *testing.B) {
			var rc requestCounter
			ms := make([]*dlock.RWMutex, contenders)
			for i := range ms {
				ms[i] = clientOn(b, benchRedis(b, srv, &rc, 0)).RWMutex("rw-contended-" + v.name)
			}
			ctx, cancel := context.WithTimeout(context.Background(), contendedTimeout)
			defer cancel()
			if _, err := runRWContended(ctx, ms, 4*contenders, share, hold); err != nil {
				b.Fatalf("warm-up: %v", err)
			}
			rc.reset()
			b.ResetTimer()
			run, err := runRWContended(ctx, ms, b.N, share, hold)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if run.violations != 0 {
				b.Fatalf("%d critical sections found a writer beside a reader or another writer", run.violations)
			}
			b.ReportMetric(float64(b.N)/run.elapsed.Seconds(), "cs/s")
			if len(run.readWaits) > 0 {
				b.ReportMetric(micros(percentile(run.readWaits, 0.50)), "read-wait-p50-µs")
				b.ReportMetric(micros(slices.Max(run.readWaits)), "read-wait-max-µs")
			}
			if len(run.writeWaits) > 0 {
				b.ReportMetric(micros(percentile(run.writeWaits, 0.50)), "write-wait-p50-µs")
				b.ReportMetric(micros(slices.Max(run.writeWaits)), "write-wait-max-µs")
			}
			if hold > 0 { // an empty critical section is too short to overlap
				b.ReportMetric(float64(run.peakReaders), "peak-readers")
				b.ReportMetric(micros(run.held/time.Duration(b.N)), "hold-mean-µs")
			}
			b.ReportMetric(float64(rc.requests.Load())/float64(b.N), "req/cs")
		})
	}
}
