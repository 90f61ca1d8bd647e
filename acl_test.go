package dlock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The tests of the Redis ACL that docs/acl.md gives: they read its ACL
// SETUSER commands, so that the page and what is tried cannot drift apart.

// aclDoc is the page whose commands the tests run.
const aclDoc = "docs/acl.md"

// aclCommand returns the fields of the ACL SETUSER command of a code block
// of aclDoc for user that has rule among its rules: "reset" picks the one
// that makes the user, "+wait" the one that adds what WithWaitReplicas
// needs.
func aclCommand(t *testing.T, user, rule string) []string {
	t.Helper()
	doc, err := os.ReadFile(aclDoc)
	if err != nil {
		t.Fatal(err)
	}
	inBlock := false
	for line := range strings.Lines(string(doc)) {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "```"):
			inBlock = !inBlock
		case inBlock && len(f) > 3 && f[0] == "ACL" && f[1] == "SETUSER" && f[2] == user && slices.Contains(f[3:], rule):
			return f
		}
	}
	t.Fatalf("%s has no ACL SETUSER %s with %q in a code block", aclDoc, user, rule)
	return nil
}

// setUser runs cmd, an ACL SETUSER command of aclDoc, for the user name
// instead of its own, with password for "<password>" and without the rules
// in drop, each of which cmd must have.
func setUser(t *testing.T, admin redis.UniversalClient, cmd []string, name, password string, drop ...string) {
	t.Helper()
	for _, r := range drop {
		if !slices.Contains(cmd, r) {
			t.Fatalf("%s: %v has no rule %q to drop", aclDoc, cmd, r)
		}
	}
	args := []any{"acl", "setuser", name}
	for _, r := range cmd[3:] {
		switch {
		case slices.Contains(drop, r):
			continue
		case r == "><password>":
			r = ">" + password
		}
		args = append(args, r)
	}
	if err := admin.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

// userClient returns a go-redis client of srv logged in as user, closed
// when the test ends.
func userClient(t *testing.T, srv *redistest.Server, user, password string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: password})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// handOffs returns an option counting, in n, the acquisitions that took a
// lock on a release's message alone.
func handOffs(n *atomic.Int64) dlock.Option {
	return dlock.WithHooks(dlock.Hooks{LockEnd: func(_ context.Context, _ dlock.LockInfo, r dlock.LockResult) {
		if r.HandedOff {
			n.Add(1)
		}
	}})
}

// waitQueued waits until the sorted set key, a lock's queue, has a member. It
// counts them with ZLEXCOUNT, which dlock never sends, so as to add nothing
// to the server's counts of the commands dlock sends (see allUsed).
func waitQueued(t *testing.T, admin redis.UniversalClient, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for admin.ZLexCount(context.Background(), key, "-", "+").Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("nobody queued in %s after 5s", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// result is what a Lock run on another goroutine returned.
type result struct {
	l   *dlock.Lease
	err error
}

// goLock runs lock on another goroutine with a context of 5s.
func goLock(lock func(context.Context) (*dlock.Lease, error)) <-chan result {
	ch := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := lock(ctx)
		ch <- result{l, err}
	}()
	return ch
}

// handedTo waits for the Lock of ch, which must return the lock within 2s,
// and unlocks it.
func handedTo(t *testing.T, what string, ch <-chan result) {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: the waiter's Lock: %v", what, r.err)
		}
		if err := r.l.Unlock(context.Background()); err != nil {
			t.Fatalf("%s: the waiter's Unlock: %v", what, err)
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("%s: the waiter did not get the lock within 2s of its release", what)
	}
}

// exerciseACL runs every primitive through a and b, two Clients logged in as
// the user under test, with prefix, and admin, which may do anything, to
// watch the queues: a Mutex handed from a to a waiting b, re-entered,
// extended and renewed, and one taken away by a (ForceRelease); a FairMutex,
// an RWMutex (its writer also taken away), a Semaphore handed on the same
// way; a CountDownLatch counted down by a while b waits; a MultiLock; an
// Election led by a, observed and read by b, proclaimed, and handed to b's
// candidate when a resigns. handed counts b's hand-offs.
func exerciseACL(t *testing.T, admin redis.UniversalClient, prefix string, a, b *dlock.Client, handed *atomic.Int64) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	m := a.Mutex("m")
	l, err := m.Lock(ctx)
	must(err)
	lctx, cancel := l.Context(ctx)
	inner, err := m.Lock(lctx) // a re-entry
	must(err)
	must(inner.Unlock(ctx))
	cancel()
	if _, err := b.Mutex("m").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held Mutex: %v, want ErrNotAcquired", err)
	}
	_, err = l.TTL(ctx)
	must(err)
	must(l.Extend(ctx, time.Minute))
	waiter := goLock(b.Mutex("m").Lock)
	waitQueued(t, admin, prefix+"{m}:waiters")
	must(l.Unlock(ctx))
	handedTo(t, "Mutex", waiter)
	if handed.Load() == 0 {
		t.Fatal("the Mutex's waiter took the lock without the release's message")
	}

	// Renewal: the lease outlives its TTL several times over.
	short, err := a.Mutex("renewed", dlock.WithTTL(400*time.Millisecond)).Lock(ctx)
	must(err)
	time.Sleep(900 * time.Millisecond)
	if err := short.Err(); err != nil {
		t.Fatalf("lease not renewed: %v", err)
	}
	if _, err := b.Mutex("renewed").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a renewed Mutex: %v, want ErrNotAcquired", err)
	}
	must(short.Unlock(ctx))

	// A holder whose lock was taken away (ForceRelease, which reads the
	// lock first with a read-only script) learns it from TTL, which finds
	// the lock no longer the owner's.
	evicted, err := b.Mutex("evicted").Lock(ctx)
	must(err)
	if _, err := a.ForceRelease(ctx, dlock.KindMutex, "evicted"); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	if _, err := evicted.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("TTL of an evicted lease: %v, want ErrNotHeld", err)
	}
	_ = evicted.Unlock(ctx)

	fl, err := a.FairMutex("f").Lock(ctx)
	must(err)
	waiter = goLock(b.FairMutex("f").Lock)
	waitQueued(t, admin, prefix+"fair:{f}:waiters")
	must(fl.Unlock(ctx))
	handedTo(t, "FairMutex", waiter)

	r1, err := a.RWMutex("rw").RLock(ctx)
	must(err)
	r2, err := b.RWMutex("rw").RLock(ctx)
	must(err)
	must(r1.Extend(ctx, time.Minute))
	waiter = goLock(a.RWMutex("rw").Lock)
	waitQueued(t, admin, prefix+"rw:{rw}:waiters")
	must(r1.Unlock(ctx))
	must(r2.Unlock(ctx))
	handedTo(t, "RWMutex", waiter)
	// A writer taken away: Inspect reads the lock hash (HGETALL).
	w, err := b.RWMutex("rw").Lock(ctx)
	must(err)
	if ev, err := a.ForceRelease(ctx, dlock.KindRWMutex, "rw"); err != nil || len(ev.Evicted) != 1 {
		t.Fatalf("ForceRelease of an RWMutex's writer = %+v, %v", ev, err)
	}
	_ = w.Unlock(ctx)

	s := a.Semaphore("s", 2)
	p1, err := s.Acquire(ctx, 1)
	must(err)
	p2, err := b.Semaphore("s", 2).Acquire(ctx, 1)
	must(err)
	waiter = goLock(func(ctx context.Context) (*dlock.Lease, error) { return b.Semaphore("s", 2).Acquire(ctx, 1) })
	waitQueued(t, admin, prefix+"sem:{s}:waiters")
	must(p1.Unlock(ctx))
	handedTo(t, "Semaphore", waiter)
	must(p2.Unlock(ctx))
	must(s.SetPermits(ctx, 3))
	if n, err := s.Available(ctx); n != 3 || err != nil {
		t.Fatalf("Available = %d, %v; want 3", n, err)
	}
	_, err = s.Delete(ctx)
	must(err)

	latch := a.CountDownLatch("l")
	if ok, err := latch.TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	opened := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		opened <- b.CountDownLatch("l").Wait(wctx)
	}()
	must(latch.CountDown(ctx))
	must(latch.CountDown(ctx))
	select {
	case err := <-opened:
		must(err)
	case <-time.After(2 * time.Second):
		t.Fatal("the latch's Wait did not return within 2s of its opening")
	}
	if n, err := b.CountDownLatch("l").Count(ctx); n != 0 || err != nil {
		t.Fatalf("Count of an open latch = %d, %v", n, err)
	}
	if ok, err := latch.TrySetCount(ctx, 1); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	_, err = latch.Delete(ctx)
	must(err)

	ml, err := a.MultiLock([]string{"x", "y"}).Lock(ctx)
	must(err)
	if _, err := b.MultiLock([]string{"y", "z"}).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held MultiLock: %v, want ErrNotAcquired", err)
	}
	must(ml.Unlock(ctx))

	aclElection(t, admin, prefix, a, b)
	aclGroup(t, a, b)
}

// aclGroup runs a Group key through a and b: a runs the function while b
// waits for its result, which b then gets without running it.
func aclGroup(t *testing.T, a, b *dlock.Client) {
	t.Helper()
	ctx := context.Background()
	running, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_, _, err := a.Group("g").Do(ctx, "k", func(ctx context.Context) ([]byte, error) {
			close(running)
			for {
				st, err := a.Inspect(ctx, dlock.KindGroup, "g/k")
				if err != nil || st.Queued == 1 {
					return []byte("v"), err
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
		if err != nil {
			t.Errorf("the runner's Do: %v", err)
		}
	}()
	<-running
	v, shared, err := b.Group("g").Do(ctx, "k", func(context.Context) ([]byte, error) { return []byte("b ran it"), nil })
	if err != nil || !shared || string(v) != "v" {
		t.Fatalf("the waiting caller's Do: %q, shared %v, %v; want the runner's result", v, shared, err)
	}
	<-done
}

// aclElection runs an Election through a and b as exerciseACL does:
// a leads, b reads (Leader) and follows (Observe) who leads while a
// proclaims, and b's candidate, in line, leads when a resigns.
func aclElection(t *testing.T, admin redis.UniversalClient, prefix string, a, b *dlock.Client) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.Election("e").Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader of an election nobody leads: %v, want ErrNoLeader", err)
	}
	ld, err := a.Election("e").Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	octx, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	seen := make(chan dlock.Leader, 8)
	observed := make(chan struct{}) // closed when Observe has ended, with obsErr
	var obsErr error
	go func() {
		defer close(observed)
		for l, err := range b.Election("e").Observe(octx) {
			if err != nil {
				obsErr = err
				return
			}
			select {
			case seen <- l:
			case <-octx.Done():
			}
			if l.Value == "b" {
				break
			}
		}
	}()
	next := func(want string) {
		t.Helper()
		for {
			select {
			case l := <-seen:
				if l.Value == want {
					return
				}
			case <-observed:
				// It ends once it yielded "b": what it yielded is in seen.
				for len(seen) > 0 {
					if l := <-seen; l.Value == want {
						return
					}
				}
				t.Fatalf("Observe ended before %q led: %v", want, obsErr)
			case <-octx.Done():
				t.Fatalf("Observe did not yield %q within 5s", want)
			}
		}
	}
	next("a")
	if err := ld.Proclaim(ctx, "a2"); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	next("a2")
	if l, err := b.Election("e").Leader(ctx); err != nil || l.Value != "a2" || l.Term != ld.Term() {
		t.Fatalf("Leader = %+v, %v; want %q in term %d", l, err, "a2", ld.Term())
	}
	type campaigned struct {
		ld  *dlock.Leadership
		err error
	}
	candidate := make(chan campaigned, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ld, err := b.Election("e").Campaign(cctx, "b")
		candidate <- campaigned{ld, err}
	}()
	waitQueued(t, admin, prefix+"election:{e}:waiters")
	if err := ld.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	r := <-candidate
	if r.err != nil {
		t.Fatalf("the candidate in line: %v", r.err)
	}
	next("b")
	<-observed
	if obsErr != nil {
		t.Fatalf("Observe: %v", obsErr)
	}
	if err := r.ld.Resign(ctx); err != nil {
		t.Fatalf("the next leader's Resign: %v", err)
	}
}

// refusedOnly checks that the servers refused user nothing but what may be
// refused: CONFIG GET, with which Check reads the eviction policy, and what
// go-redis sends on connecting and carries on without.
func refusedOnly(t *testing.T, admin redis.Cmdable, user string) {
	t.Helper()
	entries, err := admin.ACLLog(context.Background(), 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Username == user && !slices.Contains([]string{"config|get", "client|setinfo", "client|maint_notifications"}, e.Object) {
			t.Errorf("refused %s: %s %q (%s)", user, e.Reason, e.Object, e.Context)
		}
	}
}

// commandsUsed returns how many times the server ran each command, from
// scripts too, since its statistics were last reset.
func commandsUsed(t *testing.T, admin redis.Cmdable) map[string]int {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]int{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if ok {
			n, _ := strconv.Atoi(strings.Split(rest, ",")[0])
			used[name] += n
		}
	}
	return used
}

// allUsed checks that every command cmd grants was used, as counted in used.
func allUsed(t *testing.T, cmd []string, used map[string]int) {
	t.Helper()
	for _, r := range cmd[3:] {
		if c, ok := strings.CutPrefix(r, "+"); ok && used[c] == 0 {
			t.Errorf("%s grants %s, which was not used", aclDoc, r)
		}
	}
}

// TestACL runs every primitive as a user with exactly the ACL of docs/acl.md:
// nothing it does is refused but what may be, and each command the ACL
// grants is used.
func TestACL(t *testing.T) {
	t.Parallel()
	// So that the wake-up connection's health check (PING) runs, and idle
	// channels are let go (SUNSUBSCRIBE).
	tuned := []dlock.Option{dlock.WithNotifierTimes(300*time.Millisecond, 2*time.Second), dlock.WithMaxIdleGates(1)}
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	cmd := aclCommand(t, "dlock", "reset")
	password := rand.Text()
	setUser(t, admin, cmd, "dlock", password)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	var handed atomic.Int64
	a := clientOn(t, userClient(t, srv, "dlock", password), tuned...)
	b := clientOn(t, userClient(t, srv, "dlock", password), append(tuned, handOffs(&handed))...)
	exerciseACL(t, admin, dlock.DefaultPrefix, a, b, &handed)
	time.Sleep(400 * time.Millisecond) // a health check of the wake-up connection

	refusedOnly(t, admin, "dlock")
	allUsed(t, cmd, commandsUsed(t, admin))
}

// TestACLPrefix runs the primitives as the user docs/acl.md gives for
// another prefix, which must be the dlock user with the prefix's patterns.
func TestACLPrefix(t *testing.T) {
	t.Parallel()
	const prefix = "billing:locks:"
	cmd := aclCommand(t, "billing-locks", "reset")
	want := strings.ReplaceAll(strings.Join(aclCommand(t, "dlock", "reset")[3:], " "), dlock.DefaultPrefix, prefix)
	if got := strings.Join(cmd[3:], " "); got != want {
		t.Fatalf("%s: the user for another prefix is\n%s\nnot the dlock user with the prefix's patterns:\n%s", aclDoc, got, want)
	}
	srv := redistest.Start(t)
	admin := srv.Client(t)
	password := rand.Text()
	setUser(t, admin, cmd, "billing-locks", password)
	var handed atomic.Int64
	a := clientOn(t, userClient(t, srv, "billing-locks", password), dlock.WithPrefix(prefix))
	b := clientOn(t, userClient(t, srv, "billing-locks", password), dlock.WithPrefix(prefix), handOffs(&handed))
	exerciseACL(t, admin, prefix, a, b, &handed)
	refusedOnly(t, admin, "billing-locks")

	// The default prefix is not the user's.
	other := clientOn(t, userClient(t, srv, "billing-locks", password))
	// Redis says "no permissions", Valkey "No permissions".
	if _, err := other.Mutex("m").TryLock(context.Background()); err == nil || !strings.Contains(strings.ToLower(err.Error()), "no permissions") {
		t.Fatalf("TryLock under another prefix: %v, want a refusal", err)
	}
}

// refusal reports whether err carries Redis's refusal of a command, a key or
// a channel, from a command sent or from a script's call.
func refusal(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "NOPERM") || strings.Contains(msg, "The user executing the script can't") ||
		strings.Contains(msg, "ACL failure in script")
}

// TestACLMissing takes away, one at a time, permissions of docs/acl.md that
// the primitives cannot do without, and checks that the operation needing it
// fails at once with Redis's refusal, and that the server's ACL LOG names
// what was refused: no call waits for its context, no waiter for ever.
func TestACLMissing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	cmd := aclCommand(t, "dlock", "reset")
	full := rand.Text()
	setUser(t, admin, cmd, "dlock", full)
	const ttl = 600 * time.Millisecond // a waiter looks again after TTL/6

	lock := func(_ *testing.T, ctx context.Context, c, _ *dlock.Client) error {
		_, err := c.Mutex("m").Lock(ctx)
		return err
	}
	// lockHeld is a Lock that must wait: peer holds the lock, for 10s, so
	// that a loaded machine's pauses do not free it first.
	lockHeld := func(_ *testing.T, ctx context.Context, c, peer *dlock.Client) error {
		l, err := peer.Mutex("m").Lock(ctx)
		if err != nil {
			return err
		}
		defer l.Unlock(ctx)
		if err := l.Extend(ctx, 10*time.Second); err != nil {
			return err
		}
		_, err = c.Mutex("m").Lock(ctx)
		return err
	}
	// waitLatch is a Wait for a latch peer armed.
	waitLatch := func(_ *testing.T, ctx context.Context, c, peer *dlock.Client) error {
		if _, err := peer.CountDownLatch("l").TrySetCount(ctx, 1); err != nil {
			return err
		}
		defer peer.CountDownLatch("l").Delete(ctx)
		return c.CountDownLatch("l").Wait(ctx)
	}

	for _, tc := range []struct {
		name   string
		drop   string // the rule taken away
		reason string // ACL LOG's reason: "command", "key" or "channel"
		object string // what ACL LOG names, "" for any key or channel
		op     func(t *testing.T, ctx context.Context, c, peer *dlock.Client) error
		flush  bool // SCRIPT FLUSH first: the server does not know the scripts
	}{
		{"evalsha", "+evalsha", "command", "evalsha", lock, false},
		{"eval", "+eval", "command", "eval", lock, true},
		{"keys", "~dlock:*", "key", "", lock, false},
		{"time", "+time", "command", "time", lock, false},
		{"set", "+set", "command", "set", lock, false},
		{"hset", "+hset", "command", "hset", lockHeld, false},
		{"zadd", "+zadd", "command", "zadd", lockHeld, false},
		{"ssubscribe", "+ssubscribe", "command", "ssubscribe", lockHeld, false},
		{"channels", "&dlock:*", "channel", "", lockHeld, false},
		{"ssubscribe-latch", "+ssubscribe", "command", "ssubscribe", waitLatch, false},
		{"hget-latch", "+hget", "command", "hget", waitLatch, false},
		// A release that grants the lock to a waiter cannot tell it: the
		// release fails, and the waiter finds the lock at its next look.
		{"spublish", "+spublish", "command", "spublish", func(t *testing.T, ctx context.Context, c, peer *dlock.Client) error {
			l, err := c.Mutex("m").Lock(ctx)
			if err != nil {
				t.Fatalf("Lock: %v", err)
			}
			waiter := goLock(peer.Mutex("m").Lock)
			waitQueued(t, admin, "dlock:{m}:waiters")
			err = l.Unlock(ctx)
			handedTo(t, "a release refused SPUBLISH", waiter)
			return err
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			name := "dlock-no-" + tc.name
			password := rand.Text()
			setUser(t, admin, cmd, name, password, tc.drop)
			if err := admin.ACLLogReset(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if tc.flush {
				if err := admin.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			c := clientOn(t, userClient(t, srv, name, password), dlock.WithTTL(ttl))
			peer := clientOn(t, userClient(t, srv, "dlock", full), dlock.WithTTL(ttl))
			octx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			start := time.Now()
			err := tc.op(t, octx, c, peer)
			took := time.Since(start)
			switch {
			case err == nil:
				t.Fatalf("without %s: no error", tc.drop)
			case took > 2*time.Second || errors.Is(err, context.DeadlineExceeded):
				t.Fatalf("without %s: the error came after %v: %v", tc.drop, took.Round(time.Millisecond), err)
			case !refusal(err):
				t.Fatalf("without %s: %v, want Redis's refusal", tc.drop, err)
			}
			t.Logf("without %s, after %v: %v", tc.drop, took.Round(time.Millisecond), err)
			entries, err := admin.ACLLog(ctx, 100).Result()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(entries, func(e *redis.ACLLogEntry) bool {
				return e.Username == name && e.Reason == tc.reason && (tc.object == "" || e.Object == tc.object)
			}) {
				t.Fatalf("without %s: ACL LOG has no %s refusal of %q for %s", tc.drop, tc.reason, tc.object, name)
			}
		})
	}
}

// TestACLWaitReplicas checks the additions docs/acl.md gives for
// WithWaitReplicas: without them WAIT is refused; with them it runs (no
// replica acknowledges: the server has none), and Check can count the
// replicas.
func TestACLWaitReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	password := rand.Text()
	setUser(t, admin, aclCommand(t, "dlock", "reset"), "dlock", password)
	c := clientOn(t, userClient(t, srv, "dlock", password), dlock.WithWaitReplicas(1, 50*time.Millisecond))
	if _, err := c.Mutex("m").TryLock(ctx); err == nil || !strings.Contains(err.Error(), "'wait'") {
		t.Fatalf("TryLock without +wait: %v, want WAIT refused", err)
	}
	setUser(t, admin, aclCommand(t, "dlock", "+wait"), "dlock", password)
	if _, err := c.Mutex("m").TryLock(ctx); !errors.Is(err, dlock.ErrNotReplicated) {
		t.Fatalf("TryLock with no replica: %v, want ErrNotReplicated", err)
	}
	if err := c.Check(ctx); err == nil || !strings.Contains(err.Error(), "has 0 connected") {
		t.Fatalf("Check with no replica: %v, want the replicas counted", err)
	}
}

// TestACLOnCall lists and inspects locks of every kind, some with waiters,
// and reads an election's leader, as the read-only user of docs/acl.md:
// nothing is refused, each command granted is used, and taking or taking
// away a lock is refused.
func TestACLOnCall(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	password := rand.Text()
	setUser(t, admin, aclCommand(t, "dlock", "reset"), "dlock", password)
	// Leases and registrations long enough not to be renewed meanwhile, so
	// that the server's counts of commands are the on-call user's.
	c := clientOn(t, userClient(t, srv, "dlock", password), dlock.WithTTL(time.Minute))
	held := map[dlock.LockID]func(context.Context) (*dlock.Lease, error){
		{Kind: dlock.KindMutex, Name: "m"}:     c.Mutex("m").Lock,
		{Kind: dlock.KindFairMutex, Name: "f"}: c.FairMutex("f").Lock,
		{Kind: dlock.KindRWMutex, Name: "rw"}:  c.RWMutex("rw").RLock,
		{Kind: dlock.KindSemaphore, Name: "s"}: func(ctx context.Context) (*dlock.Lease, error) {
			return c.Semaphore("s", 2).Acquire(ctx, 1)
		},
		{Kind: dlock.KindElection, Name: "e"}: func(ctx context.Context) (*dlock.Lease, error) {
			_, err := c.Election("e").Campaign(ctx, "leader")
			return nil, err
		},
	}
	for id, lock := range held {
		if _, err := lock(ctx); err != nil {
			t.Fatalf("%v: %v", id, err)
		}
	}
	// A waiter of each kind whose queue Inspect reads apart from the
	// holders' (HEXISTS), and a candidate in line; the Client's Close ends
	// their waits.
	waiting := map[dlock.LockID]string{
		{Kind: dlock.KindRWMutex, Name: "rw"}:  "rw:{rw}:waiters",
		{Kind: dlock.KindSemaphore, Name: "s"}: "sem:{s}:waiters",
		{Kind: dlock.KindElection, Name: "e"}:  "election:{e}:waiters",
	}
	goLock(c.RWMutex("rw").Lock)
	goLock(func(ctx context.Context) (*dlock.Lease, error) { return c.Semaphore("s", 2).Acquire(ctx, 2) })
	goLock(func(ctx context.Context) (*dlock.Lease, error) {
		_, err := c.Election("e").Campaign(ctx, "candidate")
		return nil, err
	})
	for _, queue := range waiting {
		waitQueued(t, admin, dlock.DefaultPrefix+queue)
	}
	if _, err := c.CountDownLatch("l").TrySetCount(ctx, 3); err != nil {
		t.Fatal(err)
	}
	cmd := aclCommand(t, "dlock-oncall", "reset")
	onCallPassword := rand.Text()
	setUser(t, admin, cmd, "dlock-oncall", onCallPassword)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	oncall := clientOn(t, userClient(t, srv, "dlock-oncall", onCallPassword))
	var found []dlock.LockID
	for id, err := range oncall.Locks(ctx, "*") {
		if err != nil {
			t.Fatalf("Locks: %v", err)
		}
		found = append(found, id)
	}
	if len(found) != len(held)+1 {
		t.Fatalf("Locks found %v, want the %d locks held and the latch", found, len(held))
	}
	for _, id := range found {
		s, err := oncall.Inspect(ctx, id.Kind, id.Name)
		switch {
		case err != nil:
			t.Fatalf("Inspect %v: %v", id, err)
		case id.Kind == dlock.KindCountDownLatch && s.Count != 3,
			id.Kind != dlock.KindCountDownLatch && len(s.Holders) != 1,
			waiting[id] != "" && len(s.Waiters) != 1:
			t.Fatalf("Inspect %v = %+v, want what was taken and the waiter", id, s)
		}
	}
	if l, err := oncall.Election("e").Leader(ctx); err != nil || l.Value != "leader" {
		t.Fatalf("Leader = %+v, %v; want the leader", l, err)
	}
	refusedOnly(t, admin, "dlock-oncall")
	allUsed(t, cmd, commandsUsed(t, admin))

	if _, err := oncall.Mutex("n").TryLock(ctx); err == nil || !refusal(err) {
		t.Fatalf("TryLock as the on-call user: %v, want a refusal", err)
	}
	if _, err := oncall.ForceRelease(ctx, dlock.KindMutex, "m"); err == nil || !refusal(err) {
		t.Fatalf("ForceRelease as the on-call user: %v, want a refusal", err)
	}
}

// TestACLCluster runs the primitives on a Redis Cluster as the user of
// docs/acl.md with its additions for a Cluster, made on every node: no node
// refuses it anything it needs.
func TestACLCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	password := rand.Text()
	var nodes []*redis.Client
	for _, addr := range cl.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = node.Close() })
		setUser(t, node, aclCommand(t, "dlock", "reset"), "dlock", password)
		setUser(t, node, aclCommand(t, "dlock", "+cluster|slots"), "dlock", password)
		nodes = append(nodes, node)
	}
	user := func() *redis.ClusterClient {
		opt := cl.Options()
		opt.Username, opt.Password = "dlock", password
		rdb := redis.NewClusterClient(opt)
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	var handed atomic.Int64
	a := clientOn(t, user())
	b := clientOn(t, user(), handOffs(&handed))
	exerciseACL(t, cl.Client(t), dlock.DefaultPrefix, a, b, &handed)
	for _, node := range nodes {
		refusedOnly(t, node, "dlock")
	}
}

// TestACLSentinel runs the primitives through Sentinel, logged in to the data
// server as the user of docs/acl.md and to the sentinel as its sentinel
// user: neither refuses anything.
func TestACLSentinel(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, 0, 1)
	password, sentinelPassword := rand.Text(), rand.Text()
	primary := s.Servers()[0].Client(t)
	setUser(t, primary, aclCommand(t, "dlock", "reset"), "dlock", password)
	sentinel := s.Sentinels()[0].Client(t)
	setUser(t, sentinel, aclCommand(t, "dlock-sentinel", "reset"), "dlock-sentinel", sentinelPassword)
	user := func() *redis.Client {
		opt := s.FailoverOptions()
		opt.Username, opt.Password = "dlock", password
		opt.SentinelUsername, opt.SentinelPassword = "dlock-sentinel", sentinelPassword
		rdb := redis.NewFailoverClient(opt)
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	var handed atomic.Int64
	a := clientOn(t, user())
	b := clientOn(t, user(), handOffs(&handed))
	exerciseACL(t, primary, dlock.DefaultPrefix, a, b, &handed)
	refusedOnly(t, primary, "dlock")
	refusedOnly(t, sentinel, "dlock-sentinel")
}
