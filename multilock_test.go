package dlock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
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

// heldLocks returns the Mutex names (default prefix) whose lock state in
// Redis is held, each with its state. Keys that hold no lock state, and
// free states, are left out.
func heldLocks(t *testing.T, rdb *redis.Client) map[string]lockState {
	t.Helper()
	ctx := context.Background()
	held := map[string]lockState{}
	for _, k := range rdb.Keys(ctx, "dlock:{*}").Val() {
		if !strings.HasSuffix(k, "}") {
			continue
		}
		if s, err := readLockErr(rdb, k); err == nil && s.Held() {
			held[strings.TrimSuffix(strings.TrimPrefix(k, "dlock:{"), "}")] = s
		}
	}
	return held
}

// heldNames returns the sorted names of heldLocks.
func heldNames(t *testing.T, rdb *redis.Client) []string {
	t.Helper()
	return slices.Sorted(func(yield func(string) bool) {
		for name := range heldLocks(t, rdb) {
			if !yield(name) {
				return
			}
		}
	})
}

// waiterKeys returns the waiter registrations left in Redis.
func waiterKeys(rdb *redis.Client) []string {
	return rdb.Keys(context.Background(), "dlock:*:waiters").Val()
}

// TestMultiLockUnlock: a MultiLock takes its names de-duplicated and
// sorted, a Lease each, held once in Redis with its fence; TryLock takes
// them again after Unlock. (What the MultiLease promises: the lease
// contract.)
func TestMultiLockUnlock(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	ml := c.MultiLock([]string{"c", "a", "b", "a"})
	if got := ml.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Names = %q, want de-duplicated and sorted", got)
	}
	l, err := ml.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if got := l.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("lease Names = %q", got)
	}
	held := heldLocks(t, rdb)
	for i, sub := range l.Leases() {
		if sub.Name() != l.Names()[i] {
			t.Errorf("lease %d is of %q, want %q", i, sub.Name(), l.Names()[i])
		}
		if sub.Fence() <= 0 || sub.Fence() != l.Fences()[i] {
			t.Errorf("lease %d: fence %d, Fences()[%d] = %d", i, sub.Fence(), i, l.Fences()[i])
		}
		if s := held[sub.Name()]; s.Owner != sub.Owner() || s.Holds != 1 || s.Fence != sub.Fence() {
			t.Errorf("lock %q state %+v, want held once by %s with fence %d", sub.Name(), s, sub.Owner(), sub.Fence())
		}
	}
	if len(held) != 3 {
		t.Errorf("held in Redis: %v, want a, b, c", held)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	l, err = ml.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMultiLockBadInput(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		ml   *dlock.MultiLock
	}{
		{"nil client", (*dlock.Client)(nil).MultiLock([]string{"a"})},
		{"nil names", c.MultiLock(nil)},
		{"no names", c.MultiLock([]string{})},
		{"empty name", c.MultiLock([]string{"a", "", "b"})},
		{"TTL too small", c.MultiLock([]string{"a"}, dlock.WithTTL(time.Millisecond))},
		{"client-only option", c.MultiLock([]string{"a"}, dlock.WithPrefix("p:"))},
		{"zero Option", c.MultiLock([]string{"a"}, dlock.Option{})},
		{"nil MultiLock", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.ml.Lock(ctx); err == nil {
				t.Error("Lock succeeded")
			} else {
				t.Logf("Lock: %v", err)
			}
			if _, err := tc.ml.TryLock(ctx); err == nil {
				t.Error("TryLock succeeded")
			}
			if err := tc.ml.Do(ctx, func(context.Context) error { return nil }); err == nil {
				t.Error("Do succeeded")
			}
		})
	}
	ml := c.MultiLock([]string{"a", "b"})
	//nolint:staticcheck // a nil context is the bad input under test
	if _, err := ml.Lock(nil); err == nil {
		t.Error("Lock(nil) succeeded")
	}
	if err := ml.Do(ctx, nil); err == nil {
		t.Error("Do with a nil function succeeded")
	}
	if held := heldNames(t, rdb); len(held) != 0 {
		t.Errorf("bad calls left locks: %v", held)
	}
	l, err := ml.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Millisecond); err == nil {
		t.Error("Extend below MinTTL succeeded")
	}
	//nolint:staticcheck // a nil context is the bad input under test
	if err := l.Unlock(nil); err == nil {
		t.Error("Unlock(nil) succeeded")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := (*dlock.MultiLease)(nil).Unlock(ctx); err == nil {
		t.Error("Unlock of a nil MultiLease succeeded")
	}
}

// TestMultiLockTryLockAllOrNothing: with one name held by another Client,
// TryLock fails and leaves none of the other names held.
func TestMultiLockTryLockAllOrNothing(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	other := clientOn(t, rdb)
	ctx := context.Background()
	for _, busy := range []string{"a", "b", "c"} {
		t.Run(busy, func(t *testing.T) {
			bl, err := other.Mutex(busy).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer bl.Unlock(ctx)
			_, err = c.MultiLock([]string{"c", "b", "a"}).TryLock(ctx)
			if !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryLock with %q held: %v, want ErrNotAcquired", busy, err)
			}
			if held := heldNames(t, rdb); !slices.Equal(held, []string{busy}) {
				t.Errorf("held after the failed TryLock: %v, want only %q", held, busy)
			}
		})
	}
}

// TestMultiLockDeadline: a Lock that waits for its last name past its
// deadline gives up with ErrNotAcquired and DeadlineExceeded, and leaves
// nothing of its own in Redis.
func TestMultiLockDeadline(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	other := clientOn(t, rdb)
	ctx := context.Background()
	bl, err := other.Mutex("c").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holder := heldLocks(t, rdb)["c"].Owner
	if holder != bl.Owner() {
		t.Fatalf("c held by %q, want %q", holder, bl.Owner())
	}
	ml := c.MultiLock([]string{"a", "b", "c"})
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = ml.Lock(wctx)
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("gave up after %v, want about 300ms", took)
	}
	if held := heldLocks(t, rdb); len(held) != 1 || held["c"].Owner != holder {
		t.Errorf("held after giving up: %v, want only c by its holder %v", held, holder)
	}
	if !within(2*time.Second, func() bool { return len(waiterKeys(rdb)) == 0 }) {
		t.Errorf("waiter registrations left: %v", waiterKeys(rdb))
	}
	if err := bl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := ml.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMultiLockWaits: Lock waits for a held name as Mutex.Lock does, and is
// woken by its release.
func TestMultiLockWaits(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	other := clientOn(t, rdb)
	ctx := context.Background()
	bl, err := other.Mutex("b").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.MultiLease, 1)
	go func() {
		l, err := c.MultiLock([]string{"a", "b", "c"}).Lock(ctx)
		if err != nil {
			t.Errorf("Lock: %v", err)
		}
		got <- l
	}()
	if !within(time.Second, func() bool { return slices.Equal(heldNames(t, rdb), []string{"a", "b"}) }) {
		t.Errorf("while waiting for b: held %v, want a (taken) and b (the other's)", heldNames(t, rdb))
	}
	released := time.Now()
	if err := bl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		t.Logf("all held %v after b's release", time.Since(released))
		if l != nil {
			if err := l.Unlock(ctx); err != nil {
				t.Error(err)
			}
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Lock not done 2s after the release (the lease TTL is 30s)")
	}
}

// multiSets are overlapping name sets, each given in a different order.
var multiSets = [][]string{{"a", "b", "c"}, {"c", "b"}, {"b", "d", "a"}, {"d", "c", "a"}}

// TestMultiLockNoDeadlock: goroutines in several Clients loop MultiLocks over
// overlapping names given in different orders. All finish, and no name is
// ever held twice at once.
func TestMultiLockNoDeadlock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	occupancy := map[string]*atomic.Int32{}
	for _, n := range []string{"a", "b", "c", "d"} {
		occupancy[n] = new(atomic.Int32)
	}
	var overlaps, done atomic.Int64
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	start := time.Now()
	for ci := range 3 {
		c := clientOn(t, srv.Client(t))
		for g := range 3 {
			wg.Go(func() {
				for i := range 20 {
					set := multiSets[(ci+g+i)%len(multiSets)]
					err := c.MultiLock(set).Do(ctx, func(context.Context) error {
						for _, n := range set {
							if occupancy[n].Add(1) != 1 {
								overlaps.Add(1)
							}
						}
						time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
						for _, n := range set {
							occupancy[n].Add(-1)
						}
						return nil
					})
					if err != nil {
						errs <- err
						return
					}
					done.Add(1)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	took := time.Since(start)
	if took > 30*time.Second {
		t.Errorf("180 MultiLocks took %v", took)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d times a name was held twice at once", n)
	}
	if n := done.Load(); n != 180 {
		t.Errorf("%d critical sections, want 180", n)
	}
	t.Logf("%d critical sections in %v", done.Load(), took)
}

// TestMultiLockReentry: a context from MultiLease.Context or Do re-enters
// every name, through a MultiLock over any of them or a plain Mutex.
func TestMultiLockReentry(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	ml := c.MultiLock([]string{"a", "b", "c"})
	l, err := ml.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := l.Context(ctx)
	defer cancel()
	inner, err := ml.Lock(lctx)
	if err != nil {
		t.Fatalf("re-entry: %v", err)
	}
	if !slices.Equal(inner.Fences(), l.Fences()) {
		t.Errorf("re-entry fences %v, want the holds' %v", inner.Fences(), l.Fences())
	}
	sub, err := c.MultiLock([]string{"c", "a"}).TryLock(lctx)
	if err != nil {
		t.Fatalf("re-entry of a subset: %v", err)
	}
	m, err := c.Mutex("b").Lock(lctx)
	if err != nil {
		t.Fatalf("re-entry of one name: %v", err)
	}
	if s := readLock(t, rdb, "dlock:{a}"); !s.Held() || s.Owner != l.Leases()[0].Owner() || s.Holds != 3 {
		t.Errorf("lock state of a %+v, want held 3 times by %s", s, l.Leases()[0].Owner())
	}
	for _, u := range []func(context.Context) error{inner.Unlock, sub.Unlock, m.Unlock} {
		if err := u(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !closedWithin(inner.Done(), time.Second) || l.Err() != nil {
		t.Errorf("after the inner Unlocks: inner Err %v, outer Err %v", inner.Err(), l.Err())
	}
	if held := heldNames(t, rdb); len(held) != 3 {
		t.Errorf("held after the inner Unlocks: %v, want a, b, c", held)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if held := heldNames(t, rdb); len(held) != 0 {
		t.Errorf("held after the last Unlock: %v", held)
	}

	err = ml.Do(ctx, func(ctx context.Context) error {
		return ml.Do(ctx, func(ctx context.Context) error {
			_, err := c.Mutex("a").TryLock(context.Background())
			if !errors.Is(err, dlock.ErrNotAcquired) {
				return fmt.Errorf("a free inside nested Do: %v", err)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatalf("nested Do: %v", err)
	}
	if held := heldNames(t, rdb); len(held) != 0 {
		t.Errorf("held after nested Do: %v", held)
	}
}

// TestMultiLockRedisErrors: an acquire that Redis fails releases the names
// taken and is not taken for contention; an Unlock that Redis fails for one
// name releases the others and may be retried for that one.
func TestMultiLockRedisErrors(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	ml := c.MultiLock([]string{"a", "b", "c"})

	// b's key holds a string that is no lock state, or a key of another
	// type.
	for _, foreign := range []struct {
		name, want string
		set        func() error
	}{
		{"string", "holds no lock state", func() error { return rdb.Set(ctx, "dlock:{b}", "not a lock", 0).Err() }},
		{"list", "key dlock:{b} holds a list", func() error { return rdb.LPush(ctx, "dlock:{b}", "x").Err() }},
	} {
		if err := foreign.set(); err != nil {
			t.Fatal(err)
		}
		_, err := ml.TryLock(ctx)
		if err == nil || !strings.Contains(err.Error(), foreign.want) || errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryLock over a foreign %s key: %v, want the Redis error (%s), not ErrNotAcquired", foreign.name, err, foreign.want)
		}
		if held := heldNames(t, rdb); len(held) != 0 {
			t.Errorf("held after the failed TryLock over a foreign %s key: %v", foreign.name, held)
		}
		rdb.Del(ctx, "dlock:{b}")
	}

	l, err := ml.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := readLock(t, rdb, "dlock:{b}")
	if !b.Held() || b.Owner != l.Leases()[1].Owner() || b.Fence != l.Fences()[1] {
		t.Fatalf("b's lock state %+v, want held by %s with fence %d", b, l.Leases()[1].Owner(), l.Fences()[1])
	}
	rdb.Set(ctx, "dlock:{b}", "not a lock", 0)
	if err := l.Unlock(ctx); err == nil || !strings.Contains(err.Error(), "holds no lock state") {
		t.Fatalf("Unlock with b unreadable: %v, want the Redis error", err)
	}
	if held := heldNames(t, rdb); len(held) != 0 {
		t.Errorf("held after the partly failed Unlock: %v, want a and c released", held)
	}
	if !closedWithin(l.Done(), time.Second) || !errors.Is(l.Err(), dlock.ErrNotHeld) {
		t.Errorf("after Unlock: Err %v, want ErrNotHeld", l.Err())
	}
	// The Client keeps trying to release b in the background: once b is a
	// lock again, its release goes through.
	if err := writeLock(ctx, rdb, "dlock:{b}", b.Owner, b.Fence, dlock.DefaultTTL); err != nil {
		t.Fatal(err)
	}
	if !within(5*time.Second, func() bool { return len(heldNames(t, rdb)) == 0 }) {
		t.Errorf("held after the background release: %v", heldNames(t, rdb))
	}
	if err := freedErr(rdb, "dlock:{b}", dlock.DefaultTTL); err != nil {
		t.Errorf("b after the background release: %v", err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock: %v, want ErrNotHeld", err)
	}
}

// Multi-process tests.

// multiReport is what a multilock worker prints when done.
type multiReport struct {
	Acquired     map[string]int64 // critical sections per name
	UnlockErrors int64
	FirstError   string
}

// multiAcquire takes every name of set and returns each name's fence and the
// function that unlocks them.
type multiAcquire func(ctx context.Context, set []string) (fences map[string]int64, unlock func() error, err error)

// multiLockAcquire is the real MultiLock.
func multiLockAcquire(c *dlock.Client) multiAcquire {
	return func(ctx context.Context, set []string) (map[string]int64, func() error, error) {
		l, err := c.MultiLock(set).Lock(ctx)
		if err != nil {
			return nil, nil, err
		}
		fences := map[string]int64{}
		for i, n := range l.Names() {
			fences[n] = l.Fences()[i]
		}
		return fences, func() error { return l.Unlock(ctx) }, nil
	}
}

// brokenMultiAcquire is a MultiLock that is not all-or-nothing: it waits for
// the first name, tries the others once, and goes on without those it did not
// get.
func brokenMultiAcquire(c *dlock.Client) multiAcquire {
	return func(ctx context.Context, set []string) (map[string]int64, func() error, error) {
		names := slices.Sorted(slices.Values(set))
		first, err := c.Mutex(names[0]).Lock(ctx)
		if err != nil {
			return nil, nil, err
		}
		leases := []*dlock.Lease{first}
		for _, n := range names[1:] {
			if l, err := c.Mutex(n).TryLock(ctx); err == nil {
				leases = append(leases, l)
			}
		}
		fences := map[string]int64{}
		for _, l := range leases {
			fences[l.Name()] = l.Fence()
		}
		return fences, func() error {
			var errs []error
			for _, l := range leases {
				errs = append(errs, l.Unlock(ctx))
			}
			return errors.Join(errs...)
		}, nil
	}
}

// multiLockWorker runs p.Goroutines goroutines, each taking p.Iterations
// MultiLocks over the multiSets (with names prefixed by p.Name) in turn.
// Under the lock it increments each name's counter in Redis by a read, a
// pause and a write, and makes a fenced write to each name's resource.
func multiLockWorker(c *dlock.Client, lockRDB redis.UniversalClient, resRDB *redis.Client, p workerParams, broken bool) error {
	ctx := context.Background()
	acquire := multiLockAcquire(c)
	if broken {
		acquire = brokenMultiAcquire(c)
	}
	var mu sync.Mutex
	rep := multiReport{Acquired: map[string]int64{}}
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if rep.FirstError == "" {
			rep.FirstError = err.Error()
		}
	}
	var wg sync.WaitGroup
	for g := range p.Goroutines {
		wg.Go(func() {
			for i := range p.Iterations {
				var set []string
				for _, n := range multiSets[(g+i)%len(multiSets)] {
					set = append(set, p.Name+n)
				}
				fences, unlock, err := acquire(ctx, set)
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				for _, n := range set {
					rep.Acquired[n]++
				}
				mu.Unlock()
				for _, n := range set {
					v, err := lockRDB.Get(ctx, "counter:"+n).Int64()
					if err != nil && !errors.Is(err, redis.Nil) {
						fail(err)
						return
					}
					time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
					if err := lockRDB.Set(ctx, "counter:"+n, v+1, 0).Err(); err != nil {
						fail(err)
						return
					}
					if err := fencedWrite.Run(ctx, resRDB, []string{"resource:" + n}, fences[n]).Err(); err != nil {
						fail(err)
						return
					}
				}
				if err := unlock(); err != nil {
					mu.Lock()
					rep.UnlockErrors++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// multiOutcome is what the multi-process MultiLock test checks, per name.
type multiOutcome struct {
	acquired, counter, accepted, rejected map[string]int64
	unlockErrors                          int64
	workerErrors                          []string
}

// violations lists every way the outcome breaks per-name mutual exclusion.
func (o multiOutcome) violations() []string {
	var v []string
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for n := range o.acquired {
			if !yield(n) {
				return
			}
		}
	}) {
		if o.counter[n] != o.acquired[n] {
			v = append(v, fmt.Sprintf("%s: counter = %d after %d acquisitions: lost updates, two holders at once", n, o.counter[n], o.acquired[n]))
		}
		if o.rejected[n] != 0 {
			v = append(v, fmt.Sprintf("%s: the resource rejected %d fenced writes made under the lock", n, o.rejected[n]))
		}
		if o.accepted[n] != o.acquired[n] {
			v = append(v, fmt.Sprintf("%s: the resource accepted %d fenced writes for %d acquisitions", n, o.accepted[n], o.acquired[n]))
		}
	}
	if o.unlockErrors != 0 {
		v = append(v, fmt.Sprintf("%d Unlocks failed: a holder had lost a lock", o.unlockErrors))
	}
	return v
}

// multiHammer runs procs worker processes of the given role.
func multiHammer(t *testing.T, role string, procs int, p workerParams) multiOutcome {
	lock, resSrv, reports := runWorkers[multiReport](t, role, "", procs, p)
	o := multiOutcome{acquired: map[string]int64{}, counter: map[string]int64{}, accepted: map[string]int64{}, rejected: map[string]int64{}}
	for _, rep := range reports {
		for n, k := range rep.Acquired {
			o.acquired[n] += k
		}
		o.unlockErrors += rep.UnlockErrors
		if rep.FirstError != "" {
			o.workerErrors = append(o.workerErrors, rep.FirstError)
		}
	}
	ctx := context.Background()
	lrdb, rrdb := lock, resSrv.Client(t)
	for n := range o.acquired {
		o.counter[n], _ = lrdb.Get(ctx, "counter:"+n).Int64()
		res := rrdb.HGetAll(ctx, "resource:"+n).Val()
		var acc, rej int64
		fmt.Sscan(res["accepted"], &acc)
		fmt.Sscan(res["rejected"], &rej)
		o.accepted[n], o.rejected[n] = acc, rej
	}
	return o
}

// TestMultiLockProcesses: 4 processes x 4 goroutines take MultiLocks over
// overlapping names. Every name's read-modify-write counter must equal its
// acquisitions and every fenced write must be accepted. A MultiLock that goes
// on without the names it could not get must be caught by the same checks.
func TestMultiLockProcesses(t *testing.T) {
	t.Parallel()
	p := workerParams{Name: "m:", TTL: 10 * time.Second, Goroutines: 4, Iterations: 25}
	const procs = 4
	for _, d := range deployments {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel() // servers of its own
			p := p
			p.Deploy = d
			o := multiHammer(t, "multilock", procs, p)
			if len(o.workerErrors) > 0 {
				t.Fatalf("workers failed: %v", o.workerErrors)
			}
			var total int64
			for _, set := range multiSets {
				total += int64(len(set))
			}
			var got int64
			for _, k := range o.acquired {
				got += k
			}
			if want := total * procs * int64(p.Goroutines*p.Iterations) / int64(len(multiSets)); got != want {
				t.Fatalf("%d name acquisitions, want %d", got, want)
			}
			for _, v := range o.violations() {
				t.Error(v)
			}
			t.Logf("acquisitions per name: %v", o.acquired)
		})
	}
	t.Run("broken-multilock-is-caught", func(t *testing.T) {
		t.Parallel()
		o := multiHammer(t, "multilock-broken", procs, p)
		lost := 0
		for n, k := range o.acquired {
			if o.counter[n] != k {
				lost++
			}
		}
		if lost == 0 {
			t.Fatalf("a MultiLock that is not all-or-nothing lost no counter update: %+v", o)
		}
		t.Logf("caught, as it must be: %v", o.violations())
	})
}

// multiHoldWorker takes a MultiLock over p.Name + "x", "y", "z", prints its
// fences on one line, and waits for stdin to close.
func multiHoldWorker(c *dlock.Client, p workerParams) error {
	l, err := c.MultiLock([]string{p.Name + "x", p.Name + "y", p.Name + "z"}).Lock(context.Background())
	if err != nil {
		return err
	}
	fmt.Println(strings.Trim(fmt.Sprint(l.Fences()), "[]"))
	_, err = bufio.NewReader(os.Stdin).ReadString('\n')
	return err
}

// TestMultiLockKilledHolder: a process holding a MultiLock with a 1s TTL is
// killed with SIGKILL; all its names must be free within the TTL and a margin.
func TestMultiLockKilledHolder(t *testing.T) {
	t.Parallel()
	p := workerParams{Name: "k:", TTL: time.Second}
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	line, killed := killAfterFirstLine(t, "multihold", lockSrv, resSrv, p)
	var fences [3]int64
	if _, err := fmt.Sscanln(line, &fences[0], &fences[1], &fences[2]); err != nil {
		t.Fatalf("holder's fences %q: %v", line, err)
	}

	rdb := lockSrv.Client(t)
	c := clientOn(t, rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.MultiLock([]string{"k:z", "k:y", "k:x"}).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the holder was killed: %v", err)
	}
	took := time.Since(killed)
	if margin := 500 * time.Millisecond; took > p.TTL+margin {
		t.Errorf("names free again %v after the kill, want within TTL %v + %v", took, p.TTL, margin)
	}
	for i, f := range l.Fences() {
		if f <= fences[i] {
			t.Errorf("%s: fence %d after the killed holder's %d", l.Names()[i], f, fences[i])
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("all names free %v after SIGKILL (TTL %v)", took, p.TTL)
}

// Examples and benchmarks.

// BenchmarkMultiLock measures MultiLock.Lock + MultiLease.Unlock.
//
// uncontended-3: one goroutine, three free names; req/op must be 6 (an
// acquire and a release per name).
//
// contended: 8 contenders, each with its own go-redis and dlock Client, loop
// MultiLocks over a random 2 of 4 names until b.N critical sections are done;
// ns/op is the time per critical section. Per-name occupancy counters stop
// the benchmark if a name is ever held twice. Metrics: cs/s, wait-mean-µs and
// wait-max-µs (Lock called to Lock returned), req/cs.
func BenchmarkMultiLock(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()

	b.Run("uncontended-3", func(b *testing.B) {
		var rc requestCounter
		ml := clientOn(b, benchRedis(b, srv, &rc, 0)).MultiLock([]string{"u1", "u2", "u3"})
		lockUnlock := func() error {
			l, err := ml.Lock(ctx)
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		}
		for range warmUps {
			if err := lockUnlock(); err != nil {
				b.Fatal(err)
			}
		}
		rc.reset()
		b.ReportAllocs()
		for b.Loop() {
			if err := lockUnlock(); err != nil {
				b.Fatal(err)
			}
		}
		if req := rc.report(b, b.N); req < 5.99 || req > 6.01 {
			b.Errorf("%.3f requests per Lock+Unlock of 3 names, want 6", req)
		}
	})

	b.Run("contended", func(b *testing.B) {
		const contenders = 8
		names := []string{"c1", "c2", "c3", "c4"}
		var pairs [][]string
		for i := range names {
			for j := range names[:i] {
				pairs = append(pairs, []string{names[i], names[j]})
			}
		}
		var rc requestCounter
		clients := make([]*dlock.Client, contenders)
		for i := range clients {
			clients[i] = clientOn(b, benchRedis(b, srv, &rc, 0))
		}
		occupancy := map[string]*atomic.Int32{}
		for _, n := range names {
			occupancy[n] = new(atomic.Int32)
		}
		run := func(n int) (waits []time.Duration, elapsed time.Duration, err error) {
			var claimed, overlaps atomic.Int64
			perContender := make([][]time.Duration, contenders)
			errs := make([]error, contenders)
			var wg sync.WaitGroup
			start := time.Now()
			for i, c := range clients {
				wg.Go(func() {
					for claimed.Add(1) <= int64(n) {
						set := pairs[rand.IntN(len(pairs))]
						called := time.Now()
						l, err := c.MultiLock(set).Lock(ctx)
						if err != nil {
							errs[i] = err
							return
						}
						perContender[i] = append(perContender[i], time.Since(called))
						for _, name := range set {
							if occupancy[name].Add(1) != 1 {
								overlaps.Add(1)
							}
						}
						for _, name := range set {
							occupancy[name].Add(-1)
						}
						if err := l.Unlock(ctx); err != nil {
							errs[i] = err
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed = time.Since(start)
			if k := overlaps.Load(); k != 0 {
				errs = append(errs, fmt.Errorf("mutual exclusion broken: a name was held twice %d times", k))
			}
			return slices.Concat(perContender...), elapsed, errors.Join(errs...)
		}
		if _, _, err := run(4 * contenders); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
		rc.reset()
		b.ResetTimer()
		waits, elapsed, err := run(b.N)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		var sum time.Duration
		for _, w := range waits {
			sum += w
		}
		b.ReportMetric(float64(len(waits))/elapsed.Seconds(), "cs/s")
		b.ReportMetric(micros(sum/time.Duration(max(len(waits), 1))), "wait-mean-µs")
		b.ReportMetric(micros(slices.Max(waits)), "wait-max-µs")
		b.ReportMetric(float64(rc.requests.Load())/float64(max(len(waits), 1)), "req/cs")
	})
}
