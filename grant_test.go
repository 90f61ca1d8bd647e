package dlock_test

// Direct hand-off: a release grants the lock to the next waiter, whose Lock
// returns on the message that tells it. What a grant costs and what happens
// when its message is late, lost, forged or finds its waiter gone.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// grantKinds are the lock kinds whose release grants: how to make one on a
// Client, and its lock key's stem.
var grantKinds = []struct {
	name  string
	lock  func(c *dlock.Client, name string, opts ...dlock.Option) locker
	tag   string // the keys' stem before the name's hash tag
	state bool   // the lock key is a lock state (lockstate_test.go), not a lock hash and a fence key
}{
	{"Mutex", func(c *dlock.Client, name string, opts ...dlock.Option) locker { return c.Mutex(name, opts...) }, "dlock:", true},
	{"FairMutex", func(c *dlock.Client, name string, opts ...dlock.Option) locker { return c.FairMutex(name, opts...) }, "dlock:fair:", true},
	{"RWMutex", func(c *dlock.Client, name string, opts ...dlock.Option) locker { return c.RWMutex(name, opts...) }, "dlock:rw:", false},
}

// TestGrant: the waiter's Lock returns on the release's message, with the
// fence the release handed out, having sent no request after the release
// but the lengthening extend, which then makes the lease the full TTL.
func TestGrant(t *testing.T) {
	t.Parallel()
	for _, kind := range grantKinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := context.Background()
			srv := redistest.Start(t)
			holder := clientOn(t, srv.Client(t))
			wrdb := srv.Client(t)
			cmds := countRequests(wrdb)
			handedOff := make(chan bool, 1)
			waiter := clientOn(t, wrdb, dlock.WithHooks(dlock.Hooks{LockEnd: func(_ context.Context, _ dlock.LockInfo, r dlock.LockResult) {
				handedOff <- r.HandedOff
			}}))
			rdb := srv.Client(t)
			const ttl = 10 * time.Second
			l, err := kind.lock(holder, "g", dlock.WithTTL(ttl)).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			key := kind.tag + "{g}"
			got := inLine(t, rdb, kind.lock(waiter, "g", dlock.WithTTL(ttl)).Lock, key+":waiters", 1)
			acq := map[string]string{"Mutex": "acquire", "FairMutex": "acquire", "RWMutex": "rw_acquire"}[kind.name]
			// The waiter's attempts before it sleeps (try, subscribe, try
			// again) are counted when their replies are in, which can be
			// after the queue shows it: wait for both, so that none is
			// counted as sent after the release.
			within(2*time.Second, func() bool { return cmds.scripts(acq)[acq] >= 2 })
			cmds.takeScripts()
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			var l2 *dlock.Lease
			select {
			case o := <-got:
				l2 = outcomeLease(t, o)
			case <-time.After(2 * time.Second):
				t.Fatal("waiter not granted the lock")
			}
			defer l2.Unlock(ctx)
			// lease returns what is left of the lease the lock key carries.
			lease := func() time.Duration {
				if kind.state {
					return holdLeft(t, rdb, key)
				}
				return rdb.PTTL(ctx, key).Val()
			}
			var f int64
			if kind.state {
				f = readLock(t, rdb, key).Fence
			} else {
				f, _ = rdb.Get(ctx, key+":fence").Int64()
			}
			if l2.Fence() != f || l2.Fence() <= l.Fence() {
				t.Errorf("granted fence %d, the lock's %d, the releaser's %d: want the lock's, above the releaser's", l2.Fence(), f, l.Fence())
			}
			// The grant lease (1s for a TTL of 10s) is lengthened to the TTL.
			if !within(2*time.Second, func() bool { return lease() > ttl-time.Second }) {
				t.Errorf("lock's lease %v after the grant, want it lengthened to about %v", lease(), ttl)
			}
			// The grant's message was the waiter's answer: no acquire after
			// the release, one extend.
			within(time.Second, func() bool { return cmds.scripts("extend")["extend"] > 0 })
			if got := cmds.takeScripts(acq, "extend"); !maps.Equal(got, map[string]int{"extend": 1}) {
				t.Errorf("script calls of the waiter's Client after the release: %v, want one lengthening extend", got)
			}
			if kind.state {
				if s := readLock(t, rdb, key); !s.Held() || s.Owner != l2.Owner() || s.Holds != 1 {
					t.Errorf("lock state %+v, want the waiter %s alone", s, l2.Owner())
				}
			} else if h := rdb.HGetAll(ctx, key).Val(); len(h) != 1 {
				t.Errorf("lock hash %v, want the waiter alone", h)
			}
			if err := l2.Err(); err != nil {
				t.Errorf("granted lease: %v", err)
			}
			if !<-handedOff {
				t.Error("LockEnd's result: HandedOff false, want true")
			}
		})
	}
}

// TestGrantAfterLongWait: a waiter whose last request is older than its
// grant lease still returns on the grant's message, dating the grant by the
// server's clock: a lock held for 1.5s hands over without another request
// (grant lease 1s).
func TestGrantAfterLongWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	holder := clientOn(t, srv.Client(t))
	wrdb := srv.Client(t)
	cmds := countRequests(wrdb)
	waiter := clientOn(t, wrdb)
	rdb := srv.Client(t)
	l, err := holder.Mutex("long").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := inLine(t, rdb, waiter.Mutex("long").Lock, "dlock:{long}:waiters", 1)
	time.Sleep(1500 * time.Millisecond) // the keep-alive is 5s at the default TTL: no request meanwhile
	cmds.takeScripts()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := outcomeLease(t, <-got)
	defer l2.Unlock(ctx)
	if n := cmds.takeScripts("acquire")["acquire"]; n != 0 {
		t.Errorf("the waiter ran its acquire script %d times after the release, want 0", n)
	}
	if !within(2*time.Second, func() bool { return holdLeft(t, rdb, "dlock:{long}") > 25*time.Second }) {
		t.Errorf("grant not lengthened: lease %v", holdLeft(t, rdb, "dlock:{long}"))
	}
	if err := l2.Err(); err != nil {
		t.Errorf("granted lease: %v", err)
	}
}

// TestGrantNotLengthened: a grantee whose lengthening extends cannot reach
// Redis before its grant lease runs out (every one is held back 500ms, the
// first and those sent again when it stays unanswered) loses the lease, and
// is told.
func TestGrantNotLengthened(t *testing.T) {
	// Not parallel: it runs before the parallel tests start, alone, for
	// what it checks is timing the rest of the suite would disturb.
	ctx := context.Background()
	c, p, rdb := proxied(t)
	holder := clientOn(t, rdb)
	const ttl = time.Second // grant lease 100ms
	l, err := holder.Mutex("n", dlock.WithTTL(ttl)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := inLine(t, rdb, c.Mutex("n", dlock.WithTTL(ttl)).Lock, "dlock:{n}:waiters", 1)
	in := p.Inject(faultproxy.Rule{Match: script("extend"), Fault: faultproxy.DelayRequest, Delay: 500 * time.Millisecond})
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := outcomeLease(t, <-got)
	defer l2.Unlock(ctx)
	if !closedWithin(l2.Done(), time.Second) {
		t.Fatal("a grant lease that was never lengthened still counts as held")
	}
	checkHit(t, in)
	if err := l2.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err: %v, want ErrLockLost", err)
	}
	t.Logf("lost: %v", l2.Err())
	// Redis agrees: the grant lapsed before the late extend arrived.
	if !within(time.Second, func() bool { return !readLock(t, rdb, "dlock:{n}").Held() }) {
		t.Errorf("lock still held in Redis: %+v", readLock(t, rdb, "dlock:{n}"))
	}
}

// TestGrantMessageLost: a grant whose message never arrives costs the
// grantee at most its keep-alive: its next try finds the lock (granted, or
// free once the grant lapsed) and takes it with a fence above the releaser's.
func TestGrantMessageLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, rdb := proxied(t)
	holder := clientOn(t, rdb)
	const ttl = 1200 * time.Millisecond // keep-alive 200ms, grant lease 120ms
	l, err := holder.Mutex("lost").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := inLine(t, rdb, c.Mutex("lost", dlock.WithTTL(ttl)).Lock, "dlock:{lost}:waiters", 1)
	if n := p.BlackholePubSub(); n != 1 {
		t.Fatalf("%d pub/sub connections, want 1", n)
	}
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-got:
		l2 := outcomeLease(t, o)
		took := time.Since(released)
		t.Logf("got the lock %v after the release, its message lost", took)
		if took > 2*ttl/6+100*time.Millisecond {
			t.Errorf("took %v, want within one keep-alive (%v) and a margin", took, ttl/6)
		}
		if l2.Fence() <= l.Fence() {
			t.Errorf("fence %d after %d", l2.Fence(), l.Fence())
		}
		if err := l2.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter never got the lock")
	}
}

// TestGrantOldMessage: a message of a grant made before the waiter's last
// request (its fence at or below that request's fence floor) does not make
// its Lock return: the grant may have lapsed long ago.
func TestGrantOldMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	holder := clientOn(t, srv.Client(t))
	waiter := clientOn(t, srv.Client(t))
	rdb := srv.Client(t)
	l, err := holder.Mutex("old").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := lockInBackground(t, waiter.Mutex("old"))
	var owner string
	if !within(5*time.Second, func() bool {
		w := rdb.ZRange(ctx, "dlock:{old}:waiters", 0, -1).Val()
		if len(w) == 1 {
			owner = w[0]
		}
		return owner != ""
	}) {
		t.Fatal("waiter not registered")
	}
	time.Sleep(50 * time.Millisecond) // its registration's reply is in
	channel := "dlock:{old}:wake:" + owner[:strings.IndexByte(owner, ':')]
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, fence := range []int64{1, l.Fence()} {
		// Dated now, with a lease of 1s: only the fence tells that the
		// grant is older than the waiter's last request.
		msg := owner + " " + strconv.FormatInt(fence, 10) + " 1000 " + strconv.FormatInt(now.UnixMicro(), 10)
		if n := rdb.SPublish(ctx, channel, msg).Val(); n != 1 {
			t.Fatalf("message reached %d subscribers, want 1", n)
		}
	}
	select {
	case <-got:
		t.Fatal("the waiter took an old grant's message for its own: two holders")
	case <-time.After(300 * time.Millisecond):
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(2 * time.Second):
		t.Fatal("waiter not granted the lock by the real release")
	}
}

// TestGrantToLeavingWaiter: a release that grants the lock to a waiter whose
// Lock is giving up just then loses nothing: the leaving waiter's
// unregistration passes the grant on to the next waiter at once.
func TestGrantToLeavingWaiter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, rdb := proxied(t)
	holder := clientOn(t, rdb)
	second := clientOn(t, rdb)
	l, err := holder.Mutex("leave").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		if _, err := c.Mutex("leave").Lock(fctx); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled waiter: %v", err)
		}
	}()
	var first string
	if !within(5*time.Second, func() bool {
		w := rdb.ZRange(ctx, "dlock:{leave}:waiters", 0, -1).Val()
		if len(w) == 1 {
			first = w[0]
		}
		return first != ""
	}) {
		t.Fatal("first waiter not registered")
	}
	got := lockInBackground(t, second.Mutex("leave"))
	if !within(5*time.Second, func() bool { return rdb.ZCard(ctx, "dlock:{leave}:waiters").Val() == 2 }) {
		t.Fatal("second waiter not registered")
	}
	// The first waiter's unregistration reaches Redis only after the release.
	in := p.Inject(faultproxy.Rule{Match: script("leave"), Fault: faultproxy.DelayRequest, Delay: 300 * time.Millisecond, Times: 1})
	cancel()
	<-gone
	released := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// A grant not yet taken up has 0 holds.
	if s := readLock(t, rdb, "dlock:{leave}"); !s.Held() || s.Owner != first || s.Holds > 1 || s.Fence <= l.Fence() {
		t.Errorf("lock after the release: %+v, want it granted to the leaving waiter %s", s, first)
	}
	select {
	case at := <-got:
		took := at.Sub(released)
		t.Logf("passed on %v after the release", took)
		// Without the pass the second waiter would wait for the grant lease
		// (1s) to lapse and its keep-alive (5s) to fire.
		if took > time.Second {
			t.Errorf("second waiter got the lock %v after the release", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second waiter never got the lock")
	}
	checkHit(t, in)
}

// TestGrantWaitReplicas: with WithWaitReplicas a grantee does not return on
// the message alone: it confirms the grant with a request that waits for the
// replica, and a grant its replica never acknowledges is given back.
func TestGrantWaitReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, rs := replicated(t, 1)
	// A second for the replica's acknowledgement: on a loaded machine a
	// healthy replica can take longer than a fifth of one.
	opts := []dlock.Option{dlock.WithWaitReplicas(1, time.Second)}
	holder := clientOn(t, primary.Client(t), opts...)
	waiter := clientOn(t, primary.Client(t), opts...)
	rdb := primary.Client(t)
	caughtUp(t, primary)
	l, err := holder.Mutex("w").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := inLine(t, rdb, waiter.Mutex("w").Lock, "dlock:{w}:waiters", 1)
	caughtUp(t, primary)
	pause(t, rs[0]) // connected, acknowledging nothing
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-got:
		if o.l != nil {
			o.l.Unlock(ctx)
		}
		notReplicated(t, "a grantee's Lock", o.err)
	case <-time.After(5 * time.Second):
		t.Fatal("grantee never answered")
	}
	if !within(time.Second, func() bool { return freedErr(rdb, "dlock:{w}", dlock.DefaultTTL) == nil }) {
		t.Errorf("the unreplicated grant was not given back: %v", freedErr(rdb, "dlock:{w}", dlock.DefaultTTL))
	}
}

// TestGrantRetriedRelease: a release that grants the lock and whose reply is
// lost runs again (go-redis retries it). The retry finds the lock free of its
// owner with the fence past its own, writes nothing and answers so; Unlock,
// answered before the lease's deadline, reports success: the lock is granted once, to the first waiter, and
// the second waits on until that one unlocks.
func TestGrantRetriedRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, rdb := proxied(t)
	waiters := clientOn(t, rdb)
	l, err := c.Mutex("r").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := inLine(t, rdb, waiters.Mutex("r").Lock, "dlock:{r}:waiters", 1)
	second := inLine(t, rdb, waiters.Mutex("r").Lock, "dlock:{r}:waiters", 2)
	in := dropOnce(t, p, "release")
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock whose reply was lost: %v", err)
	}
	checkHit(t, in)
	o := <-first
	if o.err != nil {
		t.Fatalf("first waiter: %v", o.err)
	}
	if o.l.Fence() <= l.Fence() {
		t.Errorf("granted fence %d after %d", o.l.Fence(), l.Fence())
	}
	if s := readLock(t, rdb, "dlock:{r}"); !s.Held() || s.Owner != o.l.Owner() || s.Holds != 1 || s.Fence != o.l.Fence() {
		t.Errorf("lock state %+v after a retried release, want the first waiter %s alone, with its fence %d", s, o.l.Owner(), o.l.Fence())
	}
	select {
	case o2 := <-second:
		t.Fatalf("the retried release granted the lock twice: second waiter got %v, %v", o2.l, o2.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := o.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	o2 := <-second
	if o2.err != nil || o2.l.Fence() <= o.l.Fence() {
		t.Fatalf("second waiter after the first unlocked: %v (fence %d after %d)", o2.err, o2.l.Fence(), o.l.Fence())
	}
	_ = o2.l.Unlock(ctx)
}

// TestRetriedReleaseAfterLapsedGrant: a release grants the lock to a waiter
// that never takes it up (its process is gone or paused: its grant lapses),
// and the release's reply is lost; go-redis's retry runs after that grant
// lapsed but before the releaser's lease would have ended. The lock's state
// outlives the grant, so the retry still finds the fence past its own:
// Unlock reports success, not a loss. The lapsed grant then passes on: a
// newcomer takes the lock, with a higher fence.
func TestRetriedReleaseAfterLapsedGrant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, rdb := proxied(t, dlock.WithTTL(5*time.Second))
	l, err := c.Mutex("r").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter registered by hand, with a grant lease of 100ms, whose
	// Client never hears of its grant.
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	const ghost = "0badc0de:1"
	if err := rdb.ZAdd(ctx, "dlock:{r}:waiters", redis.Z{Score: float64(now.UnixMicro()), Member: ghost}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, "dlock:{r}:alive", ghost, fmt.Sprintf("%d|100", now.UnixMilli()+10_000)).Err(); err != nil {
		t.Fatal(err)
	}
	// Mark the lock: someone waits (a registration through acquire.lua
	// does it).
	st := readLock(t, rdb, "dlock:{r}")
	if err := rdb.Set(ctx, "dlock:{r}", fmt.Sprintf("%d|1|1|0|%s", st.Fence, l.Owner()), redis.KeepTTL).Err(); err != nil {
		t.Fatal(err)
	}
	lost := dropOnce(t, p, "release")
	late := p.Inject(faultproxy.Rule{Match: script("release"), Fault: faultproxy.DelayRequest, Delay: 400 * time.Millisecond, Times: 1})
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock whose reply was lost, retried after the grant it made lapsed: %v", err)
	}
	checkHit(t, lost)
	checkHit(t, late)
	st = readLock(t, rdb, "dlock:{r}")
	if st.Owner != ghost || st.Held() || st.Fence <= l.Fence() {
		t.Fatalf("lock state %+v after the retry, want the ghost's lapsed grant with a fence above %d", st, l.Fence())
	}
	l2, err := clientOn(t, rdb).Mutex("r").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the grant lapsed: %v", err)
	}
	defer l2.Unlock(ctx)
	if l2.Fence() <= st.Fence {
		t.Errorf("fence %d after the lapsed grant's %d", l2.Fence(), st.Fence)
	}
}

// releaseMode matches a run of release.lua in mode m (its ARGV[3]).
func releaseMode(m string) faultproxy.Match {
	isRelease := script("release")
	return func(c faultproxy.Command) bool {
		if !isRelease(c) {
			return false
		}
		nk, err := strconv.Atoi(string(c.Arg(2)))
		return err == nil && string(c.Arg(3+nk+2)) == m
	}
}

// TestRetriedGrantedRelease: a hold the lock was granted to releases in the
// mode that reads the state first ("4"), for others likely wait behind it.
// When that release's reply is lost, go-redis runs it again: the first run
// granted the lock to the next waiter, and the retry must leave that grant
// alone. Unlock succeeds, the next waiter holds the lock once with a higher
// fence, and its own Unlock succeeds.
func TestRetriedGrantedRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, kind := range []struct {
		name string
		lock func(c *dlock.Client) func(context.Context) (*dlock.Lease, error)
		key  string
	}{
		{"Mutex", func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) { return c.Mutex("g").Lock }, "dlock:{g}"},
		{"FairMutex", func(c *dlock.Client) func(context.Context) (*dlock.Lease, error) { return c.FairMutex("g").Lock }, "dlock:fair:{g}"},
	} {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			handedOff := make(chan bool, 4)
			c, p, rdb := proxied(t, dlock.WithHooks(dlock.Hooks{LockEnd: func(_ context.Context, _ dlock.LockInfo, r dlock.LockResult) {
				if r.Err == nil {
					handedOff <- r.HandedOff
				}
			}}))
			first, err := kind.lock(c)(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if <-handedOff {
				t.Fatal("the first Lock was reported handed off")
			}
			// The second waits on the same (proxied) Client, and is granted
			// the lock by the first's release.
			second := inLine(t, rdb, kind.lock(c), kind.key+":waiters", 1)
			if err := first.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			l := outcomeLease(t, <-second)
			if !<-handedOff {
				t.Fatal("the waiter's Lock was not handed off: this test needs a granted hold")
			}
			// The third waits on a Client of its own, behind the granted hold.
			want := int64(1)
			if kind.name == "FairMutex" {
				want = 2 // a FairMutex grantee keeps the head until it releases
			}
			third := inLine(t, rdb, kind.lock(clientOn(t, rdb)), kind.key+":waiters", want)
			lost := p.Inject(faultproxy.Rule{Match: releaseMode("4"), Fault: faultproxy.DropReply, Times: 1})
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock of a granted hold whose reply was lost: %v", err)
			}
			checkHit(t, lost)
			if errors.Is(l.Err(), dlock.ErrLockLost) {
				t.Errorf("lease Err %v, want unlocked", l.Err())
			}
			l3 := outcomeLease(t, <-third)
			if l3.Fence() <= l.Fence() {
				t.Errorf("the next holder's fence %d is not above the granted hold's %d", l3.Fence(), l.Fence())
			}
			if s := readLock(t, rdb, kind.key); !s.Held() || s.Owner != l3.Owner() || s.Holds != 1 || s.Fence != l3.Fence() {
				t.Errorf("after the retried release: %+v, want held once by the next holder with fence %d", s, l3.Fence())
			}
			if err := l3.Unlock(ctx); err != nil {
				t.Errorf("the next holder's Unlock: %v", err)
			}
		})
	}
}
