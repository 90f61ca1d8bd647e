package dlock_test

// Inspect, Locks and ForceRelease: what the people on call see of a lock,
// and how they free one whose holder is stuck.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestInspect: every kind's holders, waiters (in the order they will be
// served), fence, permits and count, as the leases and waiters themselves
// know them.
func TestInspect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, _ := newClient(t, dlock.WithTTL(10*time.Second))
	other := clientOn(t, rdb, dlock.WithTTL(10*time.Second))
	third := clientOn(t, rdb, dlock.WithTTL(10*time.Second))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	inspect := func(kind dlock.Kind, name string) *dlock.LockState {
		t.Helper()
		s, err := c.Inspect(ctx, kind, name)
		if err != nil {
			t.Fatal(err)
		}
		if s.Kind != kind || s.Name != name {
			t.Errorf("Inspect(%s, %q) names %s %q", kind, name, s.Kind, s.Name)
		}
		return s
	}
	checkHolder := func(h dlock.Holder, l *dlock.Lease, holds int, now time.Time) {
		t.Helper()
		if h.Fence != l.Fence() || h.Holds != holds || h.TTL <= 9*time.Second || h.TTL > 10*time.Second ||
			h.Client != c.ID() || h.Owner != l.Owner() || !strings.HasPrefix(h.Owner, h.Client+":") {
			t.Errorf("holder %+v, want fence %d, %d holds, a TTL near 10s, an owner of its Client", h, l.Fence(), holds)
		}
		if d := now.Sub(h.Since); d < 0 || d > 10*time.Second {
			t.Errorf("holder since %v, the snapshot at %v", h.Since, now)
		}
	}
	// waiting starts n Locks on other and third in turn, each once the one
	// before is queued, and returns their outcomes; cancel ends them.
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	waiting := func(kind dlock.Kind, name string, n int, lock func(c *dlock.Client) (*dlock.Lease, error)) {
		t.Helper()
		for i := range n {
			cl := []*dlock.Client{other, third}[i%2]
			wg.Go(func() {
				if l, err := lock(cl); err == nil {
					l.Unlock(ctx)
				}
			})
			if !within(5*time.Second, func() bool { return inspect(kind, name).Queued == i+1 }) {
				t.Fatalf("%s %q: waiter %d not queued", kind, name, i+1)
			}
		}
	}

	t.Run("Mutex", func(t *testing.T) {
		l, err := c.Mutex("a{b}%c").Lock(ctx)
		must(err)
		lctx, done := l.Context(ctx)
		defer done()
		inner, err := c.Mutex("a{b}%c").Lock(lctx)
		must(err)
		waiting(dlock.KindMutex, "a{b}%c", 2, func(cl *dlock.Client) (*dlock.Lease, error) { return cl.Mutex("a{b}%c").Lock(wctx) })
		s := inspect(dlock.KindMutex, "a{b}%c")
		if len(s.Holders) != 1 || len(s.Waiters) != 2 || s.Fence != l.Fence() || !s.Exists() {
			t.Fatalf("state %+v", s)
		}
		checkHolder(s.Holders[0], l, 2, s.Time)
		if s.Waiters[0].Client != other.ID() || s.Waiters[1].Client != third.ID() || s.Waiters[0].TTL <= 0 {
			t.Errorf("waiters %+v, want other's then third's", s.Waiters)
		}
		must(inner.Unlock(ctx))
		must(l.Unlock(ctx))
	})
	t.Run("FairMutex", func(t *testing.T) {
		l, err := c.FairMutex("f").Lock(ctx)
		must(err)
		waiting(dlock.KindFairMutex, "f", 2, func(cl *dlock.Client) (*dlock.Lease, error) { return cl.FairMutex("f").Lock(wctx) })
		s := inspect(dlock.KindFairMutex, "f")
		if len(s.Holders) != 1 || len(s.Waiters) != 2 || s.Fence != l.Fence() {
			t.Fatalf("state %+v", s)
		}
		checkHolder(s.Holders[0], l, 1, s.Time)
		w := s.Waiters
		if w[0].Client != other.ID() || w[1].Client != third.ID() || !w[0].Since.Before(w[1].Since) || w[0].Since.After(s.Time) {
			t.Errorf("waiters %+v, want other's then third's, by arrival", w)
		}
		must(l.Unlock(ctx))
	})
	t.Run("RWMutex", func(t *testing.T) {
		rw := c.RWMutex("rw")
		r1, err := rw.RLock(ctx)
		must(err)
		r2, err := rw.RLock(ctx)
		must(err)
		waiting(dlock.KindRWMutex, "rw", 1, func(cl *dlock.Client) (*dlock.Lease, error) { return cl.RWMutex("rw").Lock(wctx) })
		wg.Go(func() {
			if l, err := third.RWMutex("rw").RLock(wctx); err == nil {
				l.Unlock(ctx)
			}
		})
		if !within(5*time.Second, func() bool { return inspect(dlock.KindRWMutex, "rw").Queued == 2 }) {
			t.Fatal("reader not queued behind the writer")
		}
		s := inspect(dlock.KindRWMutex, "rw")
		if len(s.Holders) != 2 || len(s.Waiters) != 2 {
			t.Fatalf("state %+v", s)
		}
		for _, h := range s.Holders {
			l := r1
			if h.Fence == r2.Fence() {
				l = r2
			}
			checkHolder(h, l, 1, s.Time)
			if !h.Read {
				t.Errorf("holder %+v: want a read hold", h)
			}
		}
		if s.Waiters[0].Read || !s.Waiters[1].Read {
			t.Errorf("waiters %+v: want the writer, then the reader", s.Waiters)
		}
		must(r1.Unlock(ctx))
		must(r2.Unlock(ctx))
	})
	t.Run("Semaphore", func(t *testing.T) {
		sem := c.Semaphore("s", 3)
		a, err := sem.Acquire(ctx, 2)
		must(err)
		b, err := sem.Acquire(ctx, 1)
		must(err)
		waiting(dlock.KindSemaphore, "s", 1, func(cl *dlock.Client) (*dlock.Lease, error) { return cl.Semaphore("s", 3).Acquire(wctx, 2) })
		s := inspect(dlock.KindSemaphore, "s")
		if len(s.Holders) != 2 || s.Permits != 3 || s.Used != 3 || len(s.Waiters) != 1 || s.Waiters[0].Permits != 2 {
			t.Fatalf("state %+v", s)
		}
		for _, h := range s.Holders {
			l, permits := a, int64(2)
			if h.Fence == b.Fence() {
				l, permits = b, 1
			}
			checkHolder(h, l, 1, s.Time)
			if h.Permits != permits {
				t.Errorf("holder %+v: want %d permits", h, permits)
			}
		}
		must(a.Unlock(ctx))
		must(b.Unlock(ctx))
	})
	t.Run("CountDownLatch", func(t *testing.T) {
		latch := c.CountDownLatch("l")
		if _, err := latch.TrySetCount(ctx, 3); err != nil {
			t.Fatal(err)
		}
		must(latch.CountDown(ctx))
		if s := inspect(dlock.KindCountDownLatch, "l"); s.Count != 2 || !s.Exists() {
			t.Errorf("latch state %+v, want count 2", s)
		}
	})
	t.Run("Nothing", func(t *testing.T) {
		if s := inspect(dlock.KindMutex, "never"); s.Exists() || len(s.Holders)+len(s.Waiters) > 0 {
			t.Errorf("a lock never taken: %+v", s)
		}
	})
	t.Run("BadInput", func(t *testing.T) {
		if _, err := c.Inspect(ctx, "Spinlock", "x"); err == nil || !strings.Contains(err.Error(), "unknown kind") {
			t.Errorf("unknown kind: %v", err)
		}
		if _, err := c.ForceRelease(ctx, dlock.KindCountDownLatch, "l"); err == nil {
			t.Error("ForceRelease of a CountDownLatch: no error")
		}
	})
}

// TestInspectFairGrantee: a FairMutex's grantee keeps its place in the
// line while it holds, and Inspect counts it as the holder, not as a
// waiter: after a hand-off with nobody else waiting, nobody is queued.
func TestInspectFairGrantee(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	other := clientOn(t, rdb)
	ctx := context.Background()
	first, err := c.FairMutex("fg").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := other.FairMutex("fg").Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	for {
		s, err := c.Inspect(ctx, dlock.KindFairMutex, "fg")
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Waiters) == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil {
		return
	}
	s, err := c.Inspect(ctx, dlock.KindFairMutex, "fg")
	switch {
	case err != nil:
		t.Fatal(err)
	case len(s.Holders) != 1 || s.Holders[0].Owner != second.Owner():
		t.Fatalf("holders %+v, want the grantee %s", s.Holders, second.Owner())
	case s.Queued != 0 || len(s.Waiters) != 0:
		t.Fatalf("queued %d, waiters %+v; want none: the grantee holds", s.Queued, s.Waiters)
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLocks: SCAN finds every lock under the prefix once, whatever its name,
// filtered by a pattern; a key that holds no lock's state (a call's marker,
// another prefix's) makes none appear; on a Cluster, locks on every primary.
func TestLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	collect := func(c *dlock.Client, pattern string) []dlock.LockID {
		t.Helper()
		var ids []dlock.LockID
		for id, err := range c.Locks(ctx, pattern) {
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(a, b dlock.LockID) int { return strings.Compare(string(a.Kind)+a.Name, string(b.Kind)+b.Name) })
		return ids
	}
	hold := func(c *dlock.Client) []dlock.LockID {
		t.Helper()
		var held []dlock.LockID
		for _, lock := range []struct {
			id dlock.LockID
			do func() (*dlock.Lease, error)
		}{
			{dlock.LockID{Kind: dlock.KindMutex, Name: "order:1"}, func() (*dlock.Lease, error) { return c.Mutex("order:1").Lock(ctx) }},
			{dlock.LockID{Kind: dlock.KindMutex, Name: "order:{2}%"}, func() (*dlock.Lease, error) { return c.Mutex("order:{2}%").Lock(ctx) }},
			{dlock.LockID{Kind: dlock.KindFairMutex, Name: "order:1"}, func() (*dlock.Lease, error) { return c.FairMutex("order:1").Lock(ctx) }},
			{dlock.LockID{Kind: dlock.KindRWMutex, Name: "cfg"}, func() (*dlock.Lease, error) { return c.RWMutex("cfg").RLock(ctx) }},
			{dlock.LockID{Kind: dlock.KindSemaphore, Name: "pool"}, func() (*dlock.Lease, error) { return c.Semaphore("pool", 2).Acquire(ctx, 1) }},
		} {
			l, err := lock.do()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Unlock(ctx) })
			held = append(held, lock.id)
		}
		if _, err := c.CountDownLatch("batch").TrySetCount(ctx, 2); err != nil {
			t.Fatal(err)
		}
		return append(held, dlock.LockID{Kind: dlock.KindCountDownLatch, Name: "batch"})
	}
	sorted := func(ids []dlock.LockID) []dlock.LockID {
		ids = slices.Clone(ids)
		slices.SortFunc(ids, func(a, b dlock.LockID) int { return strings.Compare(string(a.Kind)+a.Name, string(b.Kind)+b.Name) })
		return ids
	}

	t.Run("Server", func(t *testing.T) {
		c, rdb, _ := newClient(t)
		held := hold(c)
		// Another prefix's lock, and a marker whose lock has gone.
		otherPrefix := clientOn(t, rdb, dlock.WithPrefix("other:"))
		l, err := otherPrefix.Mutex("order:9").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
		rdb.Set(ctx, "dlock:{gone}:done:x:1", 1, time.Minute)
		if got, want := collect(c, "*"), sorted(held); !slices.Equal(got, want) {
			t.Errorf("Locks(*) = %v, want %v", got, want)
		}
		want := []dlock.LockID{{Kind: dlock.KindFairMutex, Name: "order:1"}, {Kind: dlock.KindMutex, Name: "order:1"}, {Kind: dlock.KindMutex, Name: "order:{2}%"}}
		if got := collect(c, "order:*"); !slices.Equal(got, want) {
			t.Errorf("Locks(order:*) = %v, want %v", got, want)
		}
		if got := collect(c, "order:{2}%"); len(got) != 1 || got[0].Name != "order:{2}%" {
			t.Errorf("Locks of a name with braces: %v", got)
		}
	})
	t.Run("Cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3, 0)
		c := clientOn(t, cl.Client(t))
		held := hold(c)
		for i := range 20 {
			l, err := c.Mutex("spread:" + string(rune('a'+i))).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Unlock(ctx)
			held = append(held, dlock.LockID{Kind: dlock.KindMutex, Name: "spread:" + string(rune('a'+i))})
		}
		if got, want := collect(c, "*"), sorted(held); !slices.Equal(got, want) {
			t.Errorf("Locks(*) on a Cluster = %v, want %v", got, want)
		}
	})
}

// fencedStore is a resource that takes writes only with a fence at least
// the highest it has seen: what a lock's fence protects.
type fencedStore struct {
	mu      sync.Mutex
	highest int64
	writes  []int64
}

func (s *fencedStore) write(fence int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.highest {
		return false
	}
	s.highest = fence
	s.writes = append(s.writes, fence)
	return true
}

// TestForceRelease: the holder of each kind is evicted, the next waiter is
// granted the lock at once with a fence above the evicted one's, so a fenced
// resource rejects the evicted holder's writes; the evicted holder learns at
// its next renewal (Done, ErrLockLost), and its Unlock says the lock was
// lost. With no waiter, the fence still moves on.
func TestForceRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Renewed every second; the waiter's grant lasts 300ms, which the
	// renewer lengthens at once: a loaded machine's pause loses no lease.
	const ttl = 3 * time.Second
	// state: the lock is one string key, its state, whose fence field
	// is the last fence (a Mutex, a FairMutex); else a hash beside a
	// ":fence" key.
	kinds := []struct {
		kind  dlock.Kind
		tag   string
		state bool
		lock  func(c *dlock.Client) func(context.Context) (*dlock.Lease, error)
	}{
		{dlock.KindMutex, "dlock:{stuck}", true, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) { return c.Mutex("stuck").Lock }},
		{dlock.KindFairMutex, "dlock:fair:{stuck}", true, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) { return c.FairMutex("stuck").Lock }},
		{dlock.KindRWMutex, "dlock:rw:{stuck}", false, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) { return c.RWMutex("stuck").Lock }},
		{dlock.KindSemaphore, "dlock:sem:{stuck}", false, func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) {
			return func(ctx context.Context) (*dlock.Lease, error) { return c.Semaphore("stuck", 1).Acquire(ctx, 1) }
		}},
	}
	for _, k := range kinds {
		t.Run(string(k.kind), func(t *testing.T) {
			c, rdb, _ := newClient(t, dlock.WithTTL(ttl))
			stuck := clientOn(t, rdb, dlock.WithTTL(ttl))
			next := clientOn(t, rdb, dlock.WithTTL(ttl))
			store := &fencedStore{}
			old, err := k.lock(stuck)(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !store.write(old.Fence()) {
				t.Fatal("the first holder's write rejected")
			}
			got := waitFor(k.lock(next), 10*time.Second)
			if !within(5*time.Second, func() bool { s, _ := c.Inspect(ctx, k.kind, "stuck"); return s.Queued == 1 }) {
				t.Fatal("waiter not queued")
			}
			ev, err := c.ForceRelease(ctx, k.kind, "stuck")
			if err != nil {
				t.Fatal(err)
			}
			if len(ev.Evicted) != 1 || ev.Evicted[0].Fence != old.Fence() || len(ev.Gone) != 0 || ev.Fence <= old.Fence() {
				t.Fatalf("eviction %+v, want the holder of fence %d, a fence above it", ev, old.Fence())
			}
			var l *dlock.Lease
			select {
			case o := <-got:
				l = outcomeLease(t, o)
			case <-time.After(2 * time.Second):
				t.Fatal("the waiter was not given the lock")
			}
			defer l.Unlock(ctx)
			if l.Fence() <= old.Fence() || !store.write(l.Fence()) {
				t.Fatalf("new holder's fence %d, the evicted %d", l.Fence(), old.Fence())
			}
			if store.write(old.Fence()) {
				t.Error("the evicted holder's write was taken after the new holder's")
			}
			select {
			case <-old.Done():
				if !errors.Is(old.Err(), dlock.ErrLockLost) {
					t.Errorf("evicted lease's Err = %v, want ErrLockLost", old.Err())
				}
			case <-time.After(2 * ttl):
				t.Error("the evicted holder's Done did not close at its next renewal")
			}
			if err := old.Unlock(ctx); !errors.Is(err, dlock.ErrLockLost) {
				t.Errorf("evicted holder's Unlock: %v, want ErrLockLost", err)
			}
			// Nobody waits now: evicting the new holder moves the fence on
			// for whoever comes next.
			ev, err = c.ForceRelease(ctx, k.kind, "stuck")
			if err != nil || len(ev.Evicted) != 1 || ev.Fence <= l.Fence() {
				t.Fatalf("second eviction %+v, %v", ev, err)
			}
			if k.state {
				if s := readLock(t, rdb, k.tag); !s.Exists || s.Held() || s.Fence < ev.Fence {
					t.Errorf("lock state %+v after the eviction, want it free with a fence of at least %d", s, ev.Fence)
				}
			} else if f, _ := rdb.Get(ctx, k.tag+":fence").Int64(); f < ev.Fence {
				t.Errorf("fence key %d after the eviction, want at least %d", f, ev.Fence)
			}
			l3, err := k.lock(c)(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer l3.Unlock(ctx)
			if l3.Fence() <= ev.Fence {
				t.Errorf("next fence %d, want above the eviction's %d", l3.Fence(), ev.Fence)
			}
		})
	}
}

// TestForceReleaseOwners: only the owners given (or seen) are evicted: one
// that no longer holds is reported gone and the holder keeps the lock; an
// evicted holder's Unlock says the lock was lost; one of several Semaphore
// holders goes alone.
func TestForceReleaseOwners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _, _ := newClient(t)
	l, err := c.Mutex("m").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := c.ForceRelease(ctx, dlock.KindMutex, "m", "0000000000000000:1")
	if err != nil || len(ev.Evicted) != 0 || !slices.Equal(ev.Gone, []string{"0000000000000000:1"}) {
		t.Fatalf("eviction of a stale owner: %+v, %v", ev, err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Errorf("holder after a stale owner's eviction: %v", err)
	}
	// Evicted before its next renewal, the holder's Unlock asks Redis,
	// which says the lock was taken from it.
	if ev, err := c.ForceRelease(ctx, dlock.KindMutex, "m"); err != nil || len(ev.Evicted) != 1 {
		t.Fatalf("eviction: %+v, %v", ev, err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("evicted holder's Unlock: %v, want ErrLockLost", err)
	}
	sem := c.Semaphore("s", 2)
	a, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Unlock(ctx)
	s, err := c.Inspect(ctx, dlock.KindSemaphore, "s")
	if err != nil {
		t.Fatal(err)
	}
	var owner string
	for _, h := range s.Holders {
		if h.Fence == a.Fence() {
			owner = h.Owner
		}
	}
	if ev, err := c.ForceRelease(ctx, dlock.KindSemaphore, "s", owner); err != nil || len(ev.Evicted) != 1 {
		t.Fatalf("eviction of one holder: %+v, %v", ev, err)
	}
	if err := b.Extend(ctx, time.Minute); err != nil {
		t.Errorf("the other holder: %v", err)
	}
	if err := a.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("the evicted holder's Extend: %v, want ErrLockLost", err)
	}
}

// TestForceReleaseRetried: every request of a ForceRelease (the inspect, the
// eviction, the raising of the fence) whose reply is lost runs again
// (go-redis retries it) and answers as the first run did: the holder
// evicted, the waiter granted the lock once, the fence key at Eviction.Fence.
func TestForceReleaseRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, direct := proxied(t)
	holder := clientOn(t, direct)
	waiter := clientOn(t, direct)
	old, err := holder.Mutex("r").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := inLine(t, direct, waiter.Mutex("r").Lock, "dlock:{r}:waiters", 1)
	var ins []*faultproxy.Injection
	for _, op := range []string{"inspect", "evict", "raise_fence"} {
		ins = append(ins, p.Inject(faultproxy.Rule{Match: script(op), Fault: faultproxy.DropReply, Times: 1}))
	}
	ev, err := c.ForceRelease(ctx, dlock.KindMutex, "r")
	for _, in := range ins {
		checkHit(t, in)
	}
	if err != nil || len(ev.Evicted) != 1 || len(ev.Gone) != 0 {
		t.Fatalf("eviction after lost replies: %+v, %v", ev, err)
	}
	if s := readLock(t, direct, "dlock:{r}"); s.Fence < ev.Fence {
		t.Errorf("lock state's fence %d after the retried raise, want at least %d", s.Fence, ev.Fence)
	}
	l := outcomeLease(t, <-got)
	defer l.Unlock(ctx)
	// A grant not yet taken up has 0 holds.
	if s := readLock(t, direct, "dlock:{r}"); !s.Held() || s.Owner != waiterOwner(t, c, "r") || s.Holds > 1 || s.Fence != l.Fence() {
		t.Errorf("lock state %+v after the retried eviction, want the waiter alone, with one hold, at fence %d", s, l.Fence())
	}
	if l.Fence() <= old.Fence() {
		t.Errorf("granted fence %d, evicted %d", l.Fence(), old.Fence())
	}
}

// waiterOwner returns the owner id of the one holder of Mutex name.
func waiterOwner(t *testing.T, c *dlock.Client, name string) string {
	t.Helper()
	s, err := c.Inspect(context.Background(), dlock.KindMutex, name)
	if err != nil || len(s.Holders) != 1 {
		t.Fatalf("inspect: %v %+v", err, s)
	}
	return s.Holders[0].Owner
}

// TestForceReleaseReaders: every read hold of an RWMutex is evicted, and the
// writer waiting behind them is granted the lock.
func TestForceReleaseReaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, _ := newClient(t)
	writer := clientOn(t, rdb)
	var readers []*dlock.Lease
	for range 2 {
		r, err := c.RWMutex("rw").RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	got := inLine(t, rdb, writer.RWMutex("rw").Lock, "dlock:rw:{rw}:waiters", 1)
	ev, err := c.ForceRelease(ctx, dlock.KindRWMutex, "rw")
	if err != nil || len(ev.Evicted) != 2 || !ev.Evicted[0].Read || !ev.Evicted[1].Read {
		t.Fatalf("eviction of two readers: %+v, %v", ev, err)
	}
	l := outcomeLease(t, <-got)
	defer l.Unlock(ctx)
	for _, r := range readers {
		if l.Fence() <= r.Fence() || ev.Fence <= r.Fence() {
			t.Errorf("writer's fence %d, eviction's %d, a reader's %d", l.Fence(), ev.Fence, r.Fence())
		}
	}
}
