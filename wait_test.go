package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestWaitWokenByRelease: a waiting Lock is woken by the release, long before
// the holder's 30s lease would have run out, and waiting sends no commands.
func TestWaitWokenByRelease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holder := clientOn(t, srv.Client(t))
	wrdb := srv.Client(t)
	cmds := countRequests(wrdb)
	waiter := clientOn(t, wrdb)
	ctx := context.Background()
	// The waiter's first use (its probe of what Redis runs) is over.
	if w, err := waiter.Mutex("warm").TryLock(ctx); err != nil {
		t.Fatal(err)
	} else if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := holder.Mutex("w").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cmds.take()
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := waiter.Mutex("w").Lock(ctx)
		if err != nil {
			t.Errorf("waiting Lock: %v", err)
		}
		got <- l
	}()
	time.Sleep(300 * time.Millisecond)
	if n := cmds.take(); n != 2 {
		t.Errorf("the waiter sent %d requests before the release, want 2 (try, subscribe, try again)", n)
	}
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l2 := <-got:
		t.Logf("hand-off %v after the release", time.Since(released))
		if l2 != nil {
			l2.Unlock(ctx)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("waiter not woken by the release")
	}
}

// TestWaitWakesOne: one release wakes one waiter of a Client, not all.
func TestWaitWakesOne(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holder := clientOn(t, srv.Client(t))
	wrdb := srv.Client(t)
	cmds := countRequests(wrdb)
	waiter := clientOn(t, wrdb)
	ctx, cancel := context.WithCancel(context.Background())
	l, err := holder.Mutex("one").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 5
	var wg sync.WaitGroup
	var acquired atomic.Int64
	for range waiters {
		wg.Go(func() {
			l, err := waiter.Mutex("one").Lock(ctx)
			if err != nil {
				return
			}
			acquired.Add(1)
			<-ctx.Done()
			l.Unlock(context.Background())
		})
	}
	// Every waiter registered, and asleep until woken or a keep-alive
	// period (5s) has passed: a waiter makes one or two attempts before it
	// sleeps, each counted once its reply is in, so the count stops moving.
	inQueue(t, srv.Client(t), "dlock:{one}:waiters", waiters)
	for last := -1; ; time.Sleep(200 * time.Millisecond) {
		n := cmds.scripts("acquire")["acquire"]
		if n == last {
			break
		}
		last = n
	}
	cmds.takeScripts()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !within(2*time.Second, func() bool { return acquired.Load() == 1 }) {
		t.Fatal("no waiter acquired after the release")
	}
	// The release granted the lock to one waiter, whose Lock returned on the
	// message; its renewer lengthened the grant lease. Nobody tried again
	// (a little longer, for a stray attempt to show).
	within(2*time.Second, func() bool { return cmds.scripts("extend")["extend"] > 0 })
	time.Sleep(100 * time.Millisecond)
	got := cmds.takeScripts("acquire", "release", "extend")
	if !maps.Equal(got, map[string]int{"extend": 1}) {
		t.Errorf("script calls of the waiters' Client after one release: %v, want one lengthening extend", got)
	}
	cancel()
	wg.Wait()
	if n := acquired.Load(); n != 1 {
		t.Errorf("%d waiters acquired, want 1", n)
	}
}

// TestWaitUntilExpiry: a holder that never releases (it stopped renewing)
// frees the lock at its TTL, and the waiter, woken by its own timer, gets it.
func TestWaitUntilExpiry(t *testing.T) {
	t.Parallel()
	c, _, _ := newClient(t)
	ctx := context.Background()
	ttl := 400 * time.Millisecond
	if _, err := c.Mutex("exp", dlock.WithTTL(ttl), dlock.WithoutRenewal()).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := c.Mutex("exp").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > ttl+200*time.Millisecond {
		t.Errorf("waited %v for a lock with %v left", took, ttl)
	}
	l.Unlock(ctx)
}

// TestWaitGivesUp: a Lock whose context ends returns promptly, with an error
// matching both ErrNotAcquired and the context's error, and leaves nothing
// behind in Redis.
func TestWaitGivesUp(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	l, err := c.Mutex("busy").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 200*time.Millisecond)
		}, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			cctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(200*time.Millisecond, cancel)
			return cctx, cancel
		}, context.Canceled},
		{"already cancelled", func() (context.Context, context.CancelFunc) {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			return cctx, cancel
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			_, err := c.Mutex("busy").Lock(wctx)
			if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, tc.want) {
				t.Fatalf("Lock: %v, want ErrNotAcquired and %v", err, tc.want)
			}
			if took := time.Since(start); took > 400*time.Millisecond {
				t.Errorf("gave up after %v, want about 200ms", took)
			}
		})
	}
	if s := readLock(t, rdb, "dlock:{busy}"); !s.Held() || s.Owner != l.Owner() || s.Holds != 1 {
		t.Errorf("lock after the waits gave up: %+v, want the holder %s only", s, l.Owner())
	}
	if !within(2*time.Second, func() bool { return rdb.Exists(ctx, "dlock:{busy}:waiters").Val() == 0 }) {
		t.Errorf("registrations left after the waits gave up: %v", rdb.ZRange(ctx, "dlock:{busy}:waiters", 0, -1).Val())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMutualExclusionInProcess: many goroutines on several Clients; never two
// inside at once.
func TestMutualExclusionInProcess(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	var inside, max, total atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		c := clientOn(t, srv.Client(t))
		for range 4 {
			wg.Go(func() {
				for range 25 {
					err := c.Mutex("mx").Do(ctx, func(context.Context) error {
						n := inside.Add(1)
						if n > max.Load() {
							max.Store(n)
						}
						time.Sleep(100 * time.Microsecond)
						total.Add(1)
						inside.Add(-1)
						return nil
					})
					if err != nil {
						t.Errorf("Do: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if max.Load() != 1 || total.Load() != 400 {
		t.Errorf("at most %d inside at once over %d sections, want 1 over 400", max.Load(), total.Load())
	}
}

// TestReentry: a Lock with a context from Do or Lease.Context re-enters: hold
// count up in Redis, same fence; the lock is free once all holds are given
// back. Without such a context the same Client is another owner.
func TestReentry(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	m := c.Mutex("re")
	// count returns the holder's hold count, "" if nobody holds the lock.
	count := func() string {
		if s := readLock(t, rdb, "dlock:{re}"); s.Held() {
			return strconv.Itoa(s.Holds)
		}
		return ""
	}
	err := m.Do(ctx, func(ctx context.Context) error {
		if _, err := m.TryLock(context.Background()); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryLock without the context: %v, want ErrNotAcquired", err)
		}
		inner, err := m.Lock(ctx)
		if err != nil {
			return err
		}
		if got := count(); got != "2" {
			t.Errorf("hold count %s after re-entry, want 2", got)
		}
		ictx, cancel := inner.Context(ctx)
		defer cancel()
		innermost, err := m.TryLock(ictx)
		if err != nil {
			return err
		}
		if got := count(); got != "3" {
			t.Errorf("hold count %s, want 3", got)
		}
		if err := innermost.Unlock(ctx); err != nil {
			return err
		}
		if err := inner.Unlock(ctx); err != nil {
			return err
		}
		if got := count(); got != "1" {
			t.Errorf("hold count %s after two unlocks, want 1", got)
		}
		if err := inner.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("second Unlock of a re-entry: %v, want ErrNotHeld", err)
		}
		if got := count(); got != "1" {
			t.Errorf("hold count %s after a repeated unlock, want 1", got)
		}
		// An unlocked re-entry no longer speaks for the holds that remain.
		before := holdLeft(t, rdb, "dlock:{re}")
		if err := inner.Extend(ctx, time.Hour); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Extend of an unlocked re-entry: %v, want ErrNotHeld", err)
		}
		if after := holdLeft(t, rdb, "dlock:{re}"); after > before {
			t.Errorf("Extend of an unlocked re-entry moved the lock's expiry from %v to %v", before, after)
		}
		if _, err := inner.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("TTL of an unlocked re-entry: %v, want ErrNotHeld", err)
		}
		// Another lock inside is a different lock: no re-entry.
		other, err := c.Mutex("other").TryLock(ctx)
		if err != nil {
			return err
		}
		return other.Unlock(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := freedErr(rdb, "dlock:{re}", dlock.DefaultTTL); err != nil {
		t.Errorf("lock left after Do: %v", err)
	}

	// Outer unlocked before inner: the lock stays held until the inner goes.
	outer, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	octx, cancel := outer.Context(ctx)
	defer cancel()
	inner, err := m.Lock(octx)
	if err != nil {
		t.Fatal(err)
	}
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mutex("re").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("lock free while a re-entry still holds it: %v", err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := freedErr(rdb, "dlock:{re}", dlock.DefaultTTL); err != nil {
		t.Errorf("lock left after the last hold: %v", err)
	}
	// A context from a Lease of another Client does not re-enter.
	c2 := clientOn(t, rdb)
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel2 := l.Context(ctx)
	defer cancel2()
	if _, err := c2.Mutex("re").TryLock(lctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("another Client re-entered: %v", err)
	}
	l.Unlock(ctx)
}

// TestDo: every Do (and RDo) unlocks after fn returns, after fn fails and
// after fn panics; hands fn a context that is cancelled, with ErrLockLost as
// its cause, when the lease is lost; and then returns fn's error joined with
// Unlock's, which matches ErrNotHeld.
func TestDo(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	const lease = 300 * time.Millisecond
	ttl := dlock.WithTTL(lease)
	// hijack makes another owner hold the lock hash at key.
	hijack := func(key string) func(*testing.T) {
		return func(*testing.T) {
			rdb.Del(ctx, key)
			rdb.HSet(ctx, key, "intruder", 1)
		}
	}
	// hijackState makes another owner hold the lock state at key, with the
	// next fence.
	hijackState := func(key string) func(*testing.T) {
		return func(t *testing.T) {
			if err := writeLock(ctx, rdb, key, "intruder", readLock(t, rdb, key).Fence+1, time.Minute); err != nil {
				t.Error(err)
			}
		}
	}
	cases := []struct {
		name  string
		do    func(context.Context, func(context.Context) error) error
		key   string           // the lock's key: exists while the lock is held
		state bool             // key is a lock state (lockstate_test.go): held while the lock is
		steal func(*testing.T) // makes the lease lost while held
	}{
		{"Mutex", c.Mutex("m", ttl).Do, "dlock:{m}", true, hijackState("dlock:{m}")},
		{"FairMutex", c.FairMutex("f", ttl).Do, "dlock:fair:{f}", true, hijackState("dlock:fair:{f}")},
		{"RWMutex.Do", c.RWMutex("w", ttl).Do, "dlock:rw:{w}", false, hijack("dlock:rw:{w}")},
		{"RWMutex.RDo", c.RWMutex("r", ttl).RDo, "dlock:rw:{r}:readers", false, func(*testing.T) { rdb.Del(ctx, "dlock:rw:{r}:readers") }},
		{"MultiLock", c.MultiLock([]string{"x", "y"}, ttl).Do, "dlock:{y}", true, func(*testing.T) { rdb.Del(ctx, "dlock:{y}") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			held := func() bool {
				if tc.state {
					return readLock(t, rdb, tc.key).Held()
				}
				return rdb.Exists(ctx, tc.key).Val() != 0
			}
			boom := errors.New("boom")
			err := tc.do(ctx, func(context.Context) error {
				if !held() {
					t.Error("fn ran without the lock")
				}
				return boom
			})
			if !errors.Is(err, boom) {
				t.Errorf("Do: %v, want fn's error", err)
			}
			func() {
				defer func() {
					if recover() == nil {
						t.Error("the panic did not reach Do's caller")
					}
				}()
				tc.do(ctx, func(context.Context) error { panic("fn") })
			}()
			if tc.state {
				if err := freedErr(rdb, tc.key, lease); err != nil {
					t.Fatalf("lock left after fn failed or panicked: %v", err)
				}
			} else if rdb.Exists(ctx, tc.key).Val() != 0 {
				t.Fatal("lock left after fn failed or panicked")
			}
			err = tc.do(ctx, func(fctx context.Context) error {
				tc.steal(t)
				select {
				case <-fctx.Done():
					return context.Cause(fctx)
				case <-time.After(2 * time.Second):
					return errors.New("fn's context not cancelled after a loss")
				}
			})
			if !errors.Is(err, dlock.ErrLockLost) || !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Do that lost its lock: %v, want fn's ErrLockLost joined with Unlock's ErrNotHeld", err)
			}
			if err := tc.do(ctx, nil); err == nil {
				t.Error("Do with a nil function: no error")
			}
			rdb.Del(ctx, tc.key)
		})
	}
}

// TestHooksAndLog: every hook fires with the lock it is about; the context a
// Start hook returns reaches its End hook and Contended; the results say
// what happened.
func TestHooksAndLog(t *testing.T) {
	t.Parallel()
	type spanKey struct{}
	var mu sync.Mutex
	events := map[string]int{}
	var results []string
	note := func(ev string, l dlock.LockInfo) {
		if l.Name != "h" || l.Kind != "Mutex" {
			t.Errorf("%s hook for %+v", ev, l)
		}
		mu.Lock()
		events[ev]++
		mu.Unlock()
	}
	span := func(ctx context.Context, ev string) {
		if ctx.Value(spanKey{}) != "span" {
			t.Errorf("%s hook without the context LockStart or UnlockStart returned", ev)
		}
	}
	var logged strings.Builder
	var logMu sync.Mutex
	c, rdb, _ := newClient(t,
		dlock.WithLogger(slogTo(&logged, &logMu)),
		dlock.WithHooks(dlock.Hooks{
			LockStart: func(ctx context.Context, l dlock.LockInfo, op string) context.Context {
				note("lockstart:"+op, l)
				return context.WithValue(ctx, spanKey{}, "span")
			},
			Contended: func(ctx context.Context, l dlock.LockInfo) { span(ctx, "contended"); note("contended", l) },
			LockEnd: func(ctx context.Context, l dlock.LockInfo, r dlock.LockResult) {
				span(ctx, "lockend")
				note("lockend", l)
				mu.Lock()
				results = append(results, fmt.Sprintf("lock fence>0:%v reentered:%v err:%v", r.Fence > 0, r.Reentered, r.Err != nil))
				mu.Unlock()
			},
			UnlockStart: func(ctx context.Context, l dlock.LockInfo) context.Context {
				note("unlockstart", l)
				return context.WithValue(ctx, spanKey{}, "span")
			},
			UnlockEnd: func(ctx context.Context, l dlock.LockInfo, r dlock.UnlockResult) {
				span(ctx, "unlockend")
				note("unlockend", l)
				mu.Lock()
				results = append(results, fmt.Sprintf("unlock last:%v held>0:%v err:%v", r.Last, r.Held > 0, r.Err != nil))
				mu.Unlock()
			},
			Extended:     func(_ context.Context, l dlock.LockInfo, _ int64) { note("extended", l) },
			ExtendFailed: func(_ context.Context, l dlock.LockInfo, _ int64, _ error) { note("extendfailed", l) },
			Lost:         func(_ context.Context, l dlock.LockInfo, _ int64, _ error) { note("lost", l) },
		}))
	ctx := context.Background()
	m := c.Mutex("h", dlock.WithTTL(300*time.Millisecond))
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := l.Context(ctx)
	inner, err := m.TryLock(lctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		l.Unlock(ctx)
	}()
	l2, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := writeLock(ctx, rdb, "dlock:{h}", "intruder", l2.Fence()+1, time.Minute); err != nil {
		t.Fatal(err)
	}
	<-l2.Done()
	// Lost, like Extended, is reported from a goroutine of its own: it may
	// come just after Done closes.
	if !within(time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return events["lost"] > 0 }) {
		t.Error("no lost event")
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{"lockstart:lock": 2, "lockstart:trylock": 1, "lockend": 3, "contended": 1, "unlockstart": 2, "unlockend": 2}
	for ev, n := range want {
		if events[ev] != n {
			t.Errorf("%d %s events, want %d: %v", events[ev], ev, n, events)
		}
	}
	if events["extended"] == 0 {
		t.Errorf("no extended event: %v", events)
	}
	wantResults := []string{
		"lock fence>0:true reentered:false err:false",
		"lock fence>0:true reentered:true err:false",
		"unlock last:false held>0:true err:false",
		"unlock last:true held>0:true err:false",
		"lock fence>0:true reentered:false err:false",
	}
	// The last two come from different goroutines: the releaser's Unlock and
	// the waiter's Lock, which a grant can let return first.
	got := slices.Clone(results)
	if len(got) == len(wantResults) {
		slices.Sort(got[3:])
		slices.Sort(wantResults[3:])
	}
	if !slices.Equal(got, wantResults) {
		t.Errorf("results:\n%s\nwant:\n%s", strings.Join(results, "\n"), strings.Join(wantResults, "\n"))
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logged.String(), "lease lost") {
		t.Errorf("loss not logged: %s", logged.String())
	}
	if n := strings.Count(logged.String(), `client in use" id=`+c.ID()); n != 1 {
		t.Errorf("the Client's id logged %d times, want once: %s", n, logged.String())
	}
}

// TestWakeUpPassedOn: a waiter that gives up leaves the line at once, so that
// the release grants the lock to the next waiter (had the release granted it
// to the one leaving first, the leaving would pass it on).
func TestWakeUpPassedOn(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	holder := clientOn(t, srv.Client(t))
	l, err := holder.Mutex("pass").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := clientOn(t, srv.Client(t))
	fctx, cancel := context.WithCancel(ctx)
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		if _, err := first.Mutex("pass").Lock(fctx); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled waiter: %v", err)
		}
	}()
	time.Sleep(100 * time.Millisecond)
	second := clientOn(t, srv.Client(t))
	got := lockInBackground(t, second.Mutex("pass"))
	time.Sleep(100 * time.Millisecond)
	cancel() // the first waiter leaves, first in line
	<-gone
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		// Without the pass the second waiter would sleep until its
		// keep-alive (5s with the default TTL).
		if took := at.Sub(released); took > time.Second {
			t.Errorf("second waiter got the lock %v after the release", took)
		} else {
			t.Logf("passed on in %v", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second waiter never got the lock")
	}
}

// TestDeadWaiterCostsLittle: a waiter registration left by a process that
// died is granted the lock by the release, for that waiter's own grant lease
// (not the releaser's), nobody acts on it, and the real waiter gets the lock
// after the grant lease lapses and its keep-alive fires, within the TTL.
func TestDeadWaiterCostsLittle(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	ttl := 600 * time.Millisecond
	m := c.Mutex("dead", dlock.WithTTL(ttl))
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := lockInBackground(t, m)
	time.Sleep(200 * time.Millisecond)
	// Registrations of a dead process's waiters, both queued before the
	// live waiter: one lapsed, one live for 300ms more, whose grant lease is
	// 40ms (the live waiter's and the releaser's are 60ms).
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	rdb.ZAdd(ctx, "dlock:{dead}:waiters", redis.Z{Score: 1, Member: "0badc0de:1"}, redis.Z{Score: 2, Member: "0badc0de:2"})
	rdb.HSet(ctx, "dlock:{dead}:alive",
		"0badc0de:1", fmt.Sprintf("%d|40", now.UnixMilli()-1),
		"0badc0de:2", fmt.Sprintf("%d|40", now.UnixMilli()+300))
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The owner, not whether its 40ms lease still runs: a loaded machine
	// can take that long between the release and this read.
	if s := readLock(t, rdb, "dlock:{dead}"); s.Owner != "0badc0de:2" || s.Holds != 0 {
		t.Errorf("lock after the release: %+v, want it granted to the live registration of the dead waiter (the lapsed one skipped)", s)
	}
	if p := holdLeft(t, rdb, "dlock:{dead}"); p > 40*time.Millisecond {
		t.Errorf("grant lease %v, want the grantee's own 40ms", p)
	}
	select {
	case at := <-got:
		if took := at.Sub(released); took > ttl {
			t.Errorf("waiter got the lock %v after the release, want within the TTL %v", took, ttl)
		} else {
			t.Logf("dead waiter cost %v", took)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter never got the lock")
	}
}
