package dlock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The tests of WithoutScripts. Those named TestPlain need SET … IFEQ and
// DELIFEQ (Valkey 9.0 or later): elsewhere they skip, and CI runs them on
// its Valkey 9.1 step (.ci/run, make servers) with DLOCK_PLAIN_REQUIRED
// set, which makes a skip a failure; TestWithoutScriptsMissing is theirs on
// every other server.

// plainUser is the script-free user of docs/acl.md.
const plainUser = "dlock-plain"

// plainServer starts a server and returns it, a client of its default user
// (which may run scripts), and a client of plainUser, which may not; it
// skips the test where the server lacks what WithoutScripts needs.
func plainServer(t *testing.T) (srv *redistest.Server, admin, user *redis.Client, password string) {
	t.Helper()
	srv = redistest.Start(t)
	admin = srv.Client(t)
	if err := admin.Do(context.Background(), "delifeq", "probe", "x").Err(); err != nil {
		if os.Getenv("DLOCK_PLAIN_REQUIRED") != "" {
			t.Fatalf("DLOCK_PLAIN_REQUIRED is set, but the server does not run DELIFEQ: %v", err)
		}
		t.Skipf("the server does not run DELIFEQ (%v): WithoutScripts needs Valkey 9.0 or later; CI runs this test on Valkey 9.1", err)
	}
	password = rand.Text()
	setUser(t, admin, aclCommand(t, plainUser, "reset"), plainUser, password)
	return srv, admin, userClient(t, srv, plainUser, password), password
}

// plainClient returns a WithoutScripts Client as plainUser, on a go-redis
// client of its own.
func plainClient(t *testing.T, srv *redistest.Server, password string, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	return clientOn(t, userClient(t, srv, plainUser, password), append([]dlock.Option{dlock.WithoutScripts()}, opts...)...)
}

// TestPlainACL: as the script-free user of docs/acl.md, a Client made with
// WithoutScripts passes Check and locks; one made without it fails its first
// use and Check, with an error that names the option.
func TestPlainACL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, _, user, password := plainServer(t)
	c := plainClient(t, srv, password)
	if err := c.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	l, err := c.Mutex("m").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	scripted := clientOn(t, user)
	if _, err := scripted.Mutex("m").TryLock(ctx); err == nil || !strings.Contains(err.Error(), "dlock.WithoutScripts()") {
		t.Fatalf("TryLock of a Client without the option: %v, want an error naming dlock.WithoutScripts()", err)
	}
	if err := scripted.Check(ctx); !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "dlock.WithoutScripts()") {
		t.Fatalf("Check of a Client without the option: %v, want ErrUnsupported naming dlock.WithoutScripts()", err)
	}
}

// TestWithoutScriptsMissing: on a server without SET … IFEQ or DELIFEQ
// (Redis 7.0 and 8.0, Valkey 8.0 and 8.1), Check and the first Lock of a
// WithoutScripts Client fail with ErrUnsupported naming what is missing and
// the option, and write nothing.
func TestWithoutScriptsMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	var missing []string
	if err := rdb.Do(ctx, "set", "probe", "0", "ifeq", "1").Err(); err != nil && !errors.Is(err, redis.Nil) {
		missing = append(missing, "IFEQ")
	}
	if err := rdb.Do(ctx, "delifeq", "probe", "1").Err(); err != nil {
		missing = append(missing, "DELIFEQ")
	}
	if len(missing) == 0 {
		t.Skip("the server runs SET … IFEQ and DELIFEQ: the TestPlain tests cover it")
	}
	c := clientOn(t, rdb, dlock.WithoutScripts())
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"Check", func() error { return c.Check(ctx) }},
		{"Lock", func() error { _, err := c.Mutex("m").Lock(ctx); return err }},
		{"TryLock", func() error { _, err := c.Mutex("m").TryLock(ctx); return err }},
	} {
		err := op.do()
		if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "WithoutScripts") {
			t.Fatalf("%s: %v, want ErrUnsupported naming WithoutScripts", op.name, err)
		}
		for _, m := range missing {
			if !strings.Contains(err.Error(), m) {
				t.Fatalf("%s: %v, want %s named", op.name, err, m)
			}
		}
		t.Logf("%s: %v", op.name, err)
	}
	if keys := stateKeys(rdb, "dlock:*"); len(keys) != 0 {
		t.Fatalf("keys written: %v", keys)
	}
}

// TestPlainExclusion: between Clients, one holds a name at a time; TryLock
// of a held name fails with ErrNotAcquired; each holder's fence is above
// the last one's, across releases, across an expiry, and across a restart
// of the server without persistence.
func TestPlainExclusion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin, _, password := plainServer(t)
	c1 := plainClient(t, srv, password)
	c2 := plainClient(t, srv, password)
	var last int64
	rises := func(what string, l *dlock.Lease) {
		t.Helper()
		if l.Fence() <= last {
			t.Fatalf("%s: fence %d, not above the last one, %d", what, l.Fence(), last)
		}
		last = l.Fence()
	}

	l1, err := c1.Mutex("m").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rises("first", l1)
	if _, err := c2.Mutex("m").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held name: %v, want ErrNotAcquired", err)
	}
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := c2.Mutex("m").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rises("after a release", l2)
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Expiry: a holder that stops renewing loses the name to the next.
	short := c1.Mutex("m", dlock.WithTTL(200*time.Millisecond), dlock.WithoutRenewal())
	l3, err := short.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rises("a fixed lease", l3)
	l4, err := c2.Mutex("m").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l3.Err() == nil {
		t.Fatal("the expired lease is still held")
	}
	rises("after an expiry", l4)
	if err := l4.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A restart without persistence forgets the fence stream: the server's
	// clock keeps the fences rising. The ACL user is made again.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	setUser(t, admin, aclCommand(t, plainUser, "reset"), plainUser, password)
	c3 := plainClient(t, srv, password)
	l5, err := c3.Mutex("m").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rises("after a restart", l5)
	if err := l5.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Keys lost right after a take, within its millisecond: a new fence
	// stream's ids start again at that millisecond's seq 0, and the server's
	// clock keeps the fences rising. Many rounds make that millisecond likely.
	for i := range 200 {
		l, err := c3.Mutex("m").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rises(fmt.Sprintf("round %d after the keys were deleted", i), l)
		if err := admin.Del(ctx, "dlock:{m}", "dlock:{m}:fence").Err(); err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("Unlock after the keys were deleted: %v, want ErrLockLost", err)
		}
	}
}

// TestPlainFenceOrder: a take whose fence stream id has a sequence of 1000 or
// more in its millisecond (seeded here: the stream's last id is ahead of the
// server's clock) gives the name back and tries again, so that no fence is
// ahead of the server's clock, which keeps every later holder's above it.
func TestPlainFenceOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin, _, password := plainServer(t)
	c := plainClient(t, srv, password)
	now, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ahead := now.UnixMilli() + 300
	if err := admin.XAdd(ctx, &redis.XAddArgs{Stream: "dlock:{f}:fence", ID: strconv.FormatInt(ahead, 10) + "-999", Values: []any{"o", "seed"}}).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := c.Mutex("f").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	at, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case l.Fence() <= ahead*1000+999:
		t.Fatalf("fence %d, not above the stream's last id %d-999", l.Fence(), ahead)
	case l.Fence()/1000 > at.UnixMilli():
		t.Fatalf("fence %d is ahead of the server's clock (%d ms) when Lock returned: a later holder's could be below it", l.Fence(), at.UnixMilli())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPlainLease: a lease is renewed past its TTL; Extend sets its TTL,
// which renewals keep; re-entry through the context confirms the hold and
// counts it in the Client; the lease is lost, and says so, when its key is
// deleted or taken by another owner, whose value a renewal leaves alone;
// Unlock of a lost hold returns ErrLockLost.
func TestPlainLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin, _, password := plainServer(t)
	const ttl = 300 * time.Millisecond
	c := plainClient(t, srv, password, dlock.WithTTL(ttl))

	l, err := c.Mutex("m").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * ttl)
	if err := l.Err(); err != nil {
		t.Fatalf("after 4 TTLs: %v, want the lease renewed", err)
	}
	if left, err := l.TTL(ctx); err != nil || left <= 0 || left > ttl {
		t.Fatalf("TTL: %v, %v; want up to %v", left, err, ttl)
	}

	// Extend, then a renewal at the new TTL's period: the key keeps it.
	if err := l.Extend(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if v := admin.Get(ctx, "dlock:{m}").Val(); !strings.HasSuffix(v, "|1") {
		t.Fatalf("after an Extend the lock holds %q, want generation 1", v)
	}
	time.Sleep(1200 * time.Millisecond) // a renewal every second; without one, 1.8s would be left
	if left, err := l.TTL(ctx); err != nil || left < 2*time.Second {
		t.Fatalf("TTL after the Extend and a renewal: %v, %v; want at least 2s of 3s", left, err)
	}

	// Re-entry through the context.
	lctx, cancel := l.Context(ctx)
	inner, err := c.Mutex("m").Lock(lctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if inner.Fence() != l.Fence() {
		t.Fatalf("re-entered fence %d, want %d", inner.Fence(), l.Fence())
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := admin.Exists(ctx, "dlock:{m}").Val(); n != 1 {
		t.Fatal("the inner Unlock freed the lock")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := admin.Exists(ctx, "dlock:{m}").Val(); n != 0 {
		t.Fatal("the outer Unlock left the lock")
	}

	// Lost: deleted, and taken by another owner.
	for _, how := range []string{"deleted", "taken"} {
		l, err := c.Mutex("m").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		other := "p1|someone-else:1|0"
		if how == "deleted" {
			admin.Del(ctx, "dlock:{m}")
		} else {
			admin.Set(ctx, "dlock:{m}", other, time.Minute)
		}
		if !closedWithin(l.Done(), 2*ttl) {
			t.Fatalf("%s: Done not closed within two TTLs", how)
		}
		if !errors.Is(l.Err(), dlock.ErrLockLost) {
			t.Fatalf("%s: Err %v, want ErrLockLost", how, l.Err())
		}
		if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("%s: Unlock %v, want ErrLockLost", how, err)
		}
		if how == "taken" {
			if v := admin.Get(ctx, "dlock:{m}").Val(); v != other {
				t.Fatalf("the other owner's lock holds %q, want %q: a renewal overwrote it", v, other)
			}
			admin.Del(ctx, "dlock:{m}")
		}
	}
}

// TestPlainWake: a waiter is woken by the release, not by its timer: with a
// TTL of 30s it would look again only after KeepAlive (5s).
func TestPlainWake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin, _, password := plainServer(t)
	c1 := plainClient(t, srv, password, dlock.WithTTL(30*time.Second))
	c2 := plainClient(t, srv, password, dlock.WithTTL(30*time.Second))
	l, err := c1.Mutex("m").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireInBackground(t, ctx, c2.Mutex("m").Lock)
	if !within(5*time.Second, func() bool { return subscribers(admin, "dlock:{m}:wake") > 0 }) {
		t.Fatal("the waiter never subscribed to dlock:{m}:wake")
	}
	time.Sleep(100 * time.Millisecond) // its attempt after subscribing is in
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w, ok := lockedWithin(got, 3*time.Second)
	if !ok {
		t.Fatal("the waiter was not woken by the release")
	}
	if w.Fence() <= l.Fence() {
		t.Fatalf("the waiter's fence %d is not above %d", w.Fence(), l.Fence())
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPlainUnsupported: every kind but the Mutex, and the administrative
// calls, return ErrUnsupported; a name held in one mode is refused by the
// other, with an error naming the option.
func TestPlainUnsupported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin, _, password := plainServer(t)
	c := plainClient(t, srv, password)
	for what, err := range map[string]error{
		"FairMutex": func() error { _, err := c.FairMutex("x").TryLock(ctx); return err }(),
		"RWMutex":   func() error { _, err := c.RWMutex("x").TryRLock(ctx); return err }(),
		"Semaphore": func() error { _, err := c.Semaphore("x", 2).TryAcquire(ctx, 1); return err }(),
		"Latch":     c.CountDownLatch("x").CountDown(ctx),
		"Election":  func() error { _, err := c.Election("x").Campaign(ctx, "v"); return err }(),
		"Inspect":   func() error { _, err := c.Inspect(ctx, dlock.KindMutex, "x"); return err }(),
	} {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", what, err)
		}
	}
	if _, err := redLockOn2(srv, password); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("NewRedLock with WithoutScripts: %v, want ErrUnsupported", err)
	}

	scripted := clientOn(t, admin)
	sl, err := scripted.Mutex("s").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mutex("s").TryLock(ctx); err == nil || !strings.Contains(err.Error(), "WithoutScripts") {
		t.Fatalf("a script-free TryLock of a scripted lock: %v, want an error naming WithoutScripts", err)
	}
	if err := sl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	pl, err := c.Mutex("p").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scripted.Mutex("p").TryLock(ctx); err == nil || !strings.Contains(err.Error(), "WithoutScripts") {
		t.Fatalf("a scripted TryLock of a script-free lock: %v, want an error naming WithoutScripts", err)
	}
	if err := pl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// redLockOn2 makes a RedLock Client with WithoutScripts.
func redLockOn2(srv *redistest.Server, password string) (*dlock.Client, error) {
	var rdbs []redis.UniversalClient
	for db := range 3 {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: db, Username: plainUser, Password: password})
		defer rdb.Close()
		rdbs = append(rdbs, rdb)
	}
	c, err := dlock.NewRedLock(rdbs, dlock.WithoutScripts())
	if err == nil {
		c.Close()
	}
	return c, err
}

// plainProxied is plainServer with a fault proxy in front of it: a
// WithoutScripts Client as plainUser through the proxy, whose go-redis
// client gives up a reply after read and sends nothing twice if retries is
// false, and the admin client straight to the server.
func plainProxied(t *testing.T, read time.Duration, retries bool, opts ...dlock.Option) (*dlock.Client, *faultproxy.Proxy, *redis.Client) {
	t.Helper()
	srv, admin, _, password := plainServer(t)
	p := faultproxy.Start(t, srv.Addr)
	o := &redis.Options{Addr: p.Addr(), Username: plainUser, Password: password, ReadTimeout: read}
	if !retries {
		o.MaxRetries = -1
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { rdb.Close() })
	c := clientOn(t, rdb, append([]dlock.Option{dlock.WithoutScripts()}, opts...)...)
	if err := c.Check(context.Background()); err != nil { // first use done, clock read
		t.Fatal(err)
	}
	return c, p, admin
}

// TestPlainLostReplies: an acquire whose reply is lost is sent again and
// finds the lock its own; an Unlock whose reply is lost is sent again and
// returns nil (the server kept its data: the first copy freed it) or
// ErrLockLost saying it may be a false alarm, never a hold left behind.
func TestPlainLostReplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, admin := plainProxied(t, 0, true)

	in := p.Inject(faultproxy.Rule{Match: faultproxy.CommandIs("exec"), Fault: faultproxy.DropReply, Times: 1})
	l, err := c.Mutex("m").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkHit(t, in)
	v := admin.Get(ctx, "dlock:{m}").Val()
	if v != "p1|"+l.Owner()+"|0" {
		t.Fatalf("the lock holds %q, want the owner's %s", v, l.Owner())
	}

	in = p.Inject(faultproxy.Rule{Match: faultproxy.CommandIs("exec"), Fault: faultproxy.DropReply, Times: 1})
	err = l.Unlock(ctx)
	checkHit(t, in)
	if err != nil && !(errors.Is(err, dlock.ErrLockLost) && strings.Contains(err.Error(), "false alarm")) {
		t.Fatalf("Unlock after a lost reply: %v, want nil or a possible false alarm", err)
	}
	if n := admin.Exists(ctx, "dlock:{m}").Val(); n != 0 {
		t.Fatal("the lock is still there")
	}
	t.Logf("Unlock after a lost reply: %v", err)
}

// TestPlainLateAcquire: an acquire that reaches Redis after its owner gave
// up (its TryLock returned, and its cleanup found nothing) takes the name
// for at most min(TTL, 2s) from when it was sent, never renewed: a waiter
// gets the name then, long before the TTL of 30s.
func TestPlainLateAcquire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, admin := plainProxied(t, 300*time.Millisecond, false, dlock.WithTTL(30*time.Second))
	in := p.Inject(faultproxy.Rule{Match: faultproxy.And(faultproxy.CommandIs("set"), faultproxy.HasArg("nx")), Fault: faultproxy.HoldRequest, Times: 1})
	sent := time.Now()
	if _, err := c.Mutex("m").TryLock(ctx); err == nil {
		t.Fatal("TryLock held at the proxy succeeded")
	}
	checkHit(t, in)
	ranLate(t, admin, in)
	v := admin.Get(ctx, "dlock:{m}").Val()
	left := admin.PTTL(ctx, "dlock:{m}").Val()
	if !strings.HasPrefix(v, "p1|"+c.ID()+":") {
		t.Fatalf("after the late copy the lock holds %q: the test proves nothing", v)
	}
	if left > 2*time.Second-time.Since(sent)+100*time.Millisecond {
		t.Fatalf("the late copy holds the name for %v more, past 2s from when it was sent (%v ago)", left, time.Since(sent))
	}
	waiter := plainClientDirect(t, admin)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := waiter.Mutex("m").Lock(wctx)
	if err != nil {
		t.Fatalf("the waiter did not get the name: %v", err)
	}
	if took := time.Since(sent); took > 5*time.Second {
		t.Fatalf("the name came free %v after the late copy was sent", took)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// plainClientDirect is a WithoutScripts Client on the admin's server.
func plainClientDirect(t *testing.T, admin *redis.Client) *dlock.Client {
	return clientOn(t, admin, dlock.WithoutScripts())
}

// TestPlainProcesses: 4 processes x 4 goroutines, each with a
// WithoutScripts Client, take one lock 800 times in all: every critical
// section's read-modify-write survives and every fenced write is accepted
// (TestProcessesHammer's checks).
func TestPlainProcesses(t *testing.T) {
	t.Parallel()
	redistest.Full(t, "worker processes")
	plainServer(t) // skips where WithoutScripts cannot run
	p := workerParams{Name: "hammer", TTL: 2 * time.Second, Goroutines: 4, Iterations: 50, NoScripts: true}
	const procs = 4
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
}

// TestPlainCluster: on a Cluster of three primaries, names on every primary
// are taken, renewed server by server past three TTLs, and released; a
// release wakes a waiter through the shard channel of its lock's slot,
// published in the same transaction on that lock's primary.
func TestPlainCluster(t *testing.T) {
	t.Parallel()
	redistest.Full(t, "a Cluster")
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3, 0)
	rdb := cl.Client(t)
	if err := rdb.Do(ctx, "delifeq", "probe", "x").Err(); err != nil {
		if os.Getenv("DLOCK_PLAIN_REQUIRED") != "" {
			t.Fatalf("DLOCK_PLAIN_REQUIRED is set, but the server does not run DELIFEQ: %v", err)
		}
		t.Skipf("the server does not run DELIFEQ (%v): WithoutScripts needs Valkey 9.0 or later", err)
	}
	c := clientOn(t, rdb, dlock.WithoutScripts(), dlock.WithTTL(time.Second))
	other := clientOn(t, cl.Client(t), dlock.WithoutScripts(), dlock.WithTTL(30*time.Second))
	var held []*dlock.Lease
	for i := range 12 {
		l, err := c.Mutex("n" + strconv.Itoa(i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	time.Sleep(3 * time.Second)
	for _, l := range held {
		if err := l.Err(); err != nil {
			t.Fatalf("lease of %q: %v, want it renewed", l.Name(), err)
		}
		if _, err := other.Mutex(l.Name()).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock of held %q: %v, want ErrNotAcquired", l.Name(), err)
		}
	}
	for _, l := range held[1:] {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The waiter's TTL is 30s: its timer would look again after 5s.
	got := acquireInBackground(t, ctx, other.Mutex("n0").Lock)
	if !within(5*time.Second, func() bool { return subscribersCluster(ctx, rdb, "dlock:{n0}:wake") > 0 }) {
		t.Fatal("the waiter never subscribed")
	}
	time.Sleep(100 * time.Millisecond)
	if err := held[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w, ok := lockedWithin(got, 3*time.Second)
	if !ok {
		t.Fatal("the waiter was not woken by the release")
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// subscribersCluster counts the subscribers of a shard channel on a Cluster.
func subscribersCluster(ctx context.Context, rdb *redis.ClusterClient, channel string) int64 {
	return rdb.PubSubShardNumSub(ctx, channel).Val()[channel]
}

// TestPlainLateAcquireAfterUnlock: the first copy of an acquire is held back
// on its way; the Redis client gives up its reply and sends a second copy,
// which takes the lock; its owner unlocks. The first copy, arriving then,
// takes the name for that ended owner, which nobody renews: for at most
// min(TTL, 2s) from when it was sent, after which a waiter gets it, long
// before the TTL of 30s. The renewal that lengthens the new lease at once is
// slowed on its way too: Unlock waits for it, for landing after the late
// copy it would lengthen that to the whole TTL.
func TestPlainLateAcquireAfterUnlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, admin := plainProxied(t, 300*time.Millisecond, true, dlock.WithTTL(30*time.Second))
	in := p.Inject(faultproxy.Rule{Match: faultproxy.And(faultproxy.CommandIs("set"), faultproxy.HasArg("nx")), Fault: faultproxy.HoldRequest, Times: 1})
	const slow = 150 * time.Millisecond // below the renewer's patience for a lengthening, ~480ms
	renewal := p.Inject(faultproxy.Rule{Match: faultproxy.And(faultproxy.CommandIs("set"), faultproxy.HasArg("dlock:{m}"), faultproxy.HasArg("ifeq")), Fault: faultproxy.DelayRequest, Delay: slow, Times: 1})
	sent := time.Now()
	l, err := c.Mutex("m").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkHit(t, in)
	checkHit(t, renewal) // on its way
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ranLate(t, admin, in)
	time.Sleep(slow + 100*time.Millisecond) // a renewal still on its way has landed
	v := admin.Get(ctx, "dlock:{m}").Val()
	left := admin.PTTL(ctx, "dlock:{m}").Val()
	if v != "p1|"+l.Owner()+"|0" {
		t.Fatalf("after the late copy the lock holds %q, not the ended owner's: the test proves nothing", v)
	}
	if left > 2*time.Second-time.Since(sent)+100*time.Millisecond {
		t.Fatalf("the late copy holds the name for %v more, past 2s from when it was sent (%v ago)", left, time.Since(sent))
	}
	waiter := plainClientDirect(t, admin)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w, err := waiter.Mutex("m").Lock(wctx)
	if err != nil {
		t.Fatalf("the waiter did not get the name: %v", err)
	}
	if w.Fence() <= l.Fence() {
		t.Fatalf("the waiter's fence %d is not above the ended owner's %d", w.Fence(), l.Fence())
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// ranLate releases the acquire in holds at the proxy and waits until its
// transaction ran: until its XADD shows in the fence stream of "m". The
// held SET is answered (QUEUED) before its EXEC runs.
func ranLate(t *testing.T, admin *redis.Client, in *faultproxy.Injection) {
	t.Helper()
	ctx := context.Background()
	added := func() int64 {
		x, err := admin.XInfoStream(ctx, "dlock:{m}:fence").Result()
		if err != nil {
			return 0
		}
		return x.EntriesAdded
	}
	before := added()
	in.Release()
	if !within(5*time.Second, func() bool { return added() > before }) {
		t.Fatal("the held acquire never ran")
	}
}

// TestPlainDoAndClose: Do runs its function under the lock, whose context
// carries the Lease (LeaseFromContext) and re-enters it; a MultiLock takes
// its names; an Unlock with a cancelled context still releases; Close
// releases what the Client holds.
func TestPlainDoAndClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin, _, password := plainServer(t)
	c := plainClient(t, srv, password)
	err := c.Mutex("do").Do(ctx, func(ctx context.Context) error {
		l, ok := dlock.LeaseFromContext(ctx)
		if !ok || admin.Get(ctx, "dlock:{do}").Val() != "p1|"+l.Owner()+"|0" {
			return errors.New("no Lease in the context, or the lock is not its")
		}
		return c.Mutex("do").Do(ctx, func(context.Context) error { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := admin.Exists(ctx, "dlock:{do}").Val(); n != 0 {
		t.Fatal("Do left the lock held")
	}

	ml, err := c.MultiLock([]string{"a", "b"}).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := admin.Exists(ctx, "dlock:{a}", "dlock:{b}").Val(); n != 2 {
		t.Fatalf("a MultiLock holds %d of its 2 names", n)
	}
	if err := ml.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	l, err := c.Mutex("cancelled").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Unlock(cctx); err != nil {
		t.Fatalf("Unlock with a cancelled context: %v", err)
	}
	if n := admin.Exists(ctx, "dlock:{cancelled}").Val(); n != 0 {
		t.Fatal("Unlock with a cancelled context left the lock")
	}

	other, err := dlock.New(userClient(t, srv, plainUser, password), dlock.WithoutScripts())
	if err != nil {
		t.Fatal(err)
	}
	kept, err := other.Mutex("closed").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if n := admin.Exists(ctx, "dlock:{closed}").Val(); n != 0 {
		t.Fatal("Close left the lock held")
	}
	if !errors.Is(kept.Err(), dlock.ErrClosed) {
		t.Fatalf("the lease after Close: %v, want ErrClosed", kept.Err())
	}
}

// TestPlainSentinel: with WithoutScripts on a Sentinel's primary, a lease
// and a waiter ride out a SENTINEL FAILOVER: the lease is renewed on the new
// primary past its TTL, the waiter does not get the lock while it is held,
// and gets it after Unlock with a higher fence; and fences keep rising
// across a restart of the primary that lost its data.
func TestPlainSentinel(t *testing.T) {
	t.Parallel()
	redistest.Full(t, "a Sentinel")
	plainServer(t) // skips, before six servers start, where WithoutScripts cannot run
	ctx := context.Background()
	s := redistest.StartSentinel(t, 2, 3)
	const ttl = 10 * time.Second // longer than a failover takes
	holder := clientOn(t, s.Client(t), dlock.WithoutScripts(), dlock.WithTTL(ttl))
	waiter := clientOn(t, s.Client(t), dlock.WithoutScripts(), dlock.WithTTL(ttl))
	l, err := holder.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waited := waitFor(waiter.Mutex("x").Lock, 2*time.Minute)
	promoted, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("promoted %s", promoted.Addr)
	time.Sleep(ttl + ttl/2) // renewed on the new primary, past its TTL
	select {
	case <-l.Done():
		t.Fatalf("the lease was lost across the failover: %v", l.Err())
	case o := <-waited:
		t.Fatalf("the waiter got the lock across the failover while it was held: %v, %v", o.l, o.err)
	default:
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after the failover: %v", err)
	}
	o := <-waited
	if o.err != nil {
		t.Fatalf("the waiter across the failover: %v", o.err)
	}
	if o.l.Fence() <= l.Fence() {
		t.Errorf("the waiter's fence %d, not above the holder's %d", o.l.Fence(), l.Fence())
	}
	last := o.l.Fence()
	if err := o.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := s.RestartPrimaryEmpty(ctx); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l2, err := holder.Mutex("x").Lock(lctx)
	if err != nil {
		t.Fatalf("Lock after the primary restarted empty: %v", err)
	}
	if l2.Fence() <= last {
		t.Errorf("fence %d after the primary restarted empty, not above %d", l2.Fence(), last)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
