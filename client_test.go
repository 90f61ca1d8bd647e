package dlock_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestCheckRefusedClient: against a Redis that requires a password, Check
// fails when the Redis client has none or a wrong one, as every lock does,
// and says why; with the right one it passes, and so it does for the ACL
// users of docs/acl.md, which Redis serves but does not tell its
// maxmemory-policy (CONFIG GET refused, and PING too for the on-call user).
func TestCheckRefusedClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	password := rand.Text()
	srv := redistest.Start(t, "--requirepass", password)
	admin := srv.Client(t)
	for _, tc := range []struct{ name, password, want string }{
		{"no password", "", "NOAUTH"},
		{"wrong password", password + "x", "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: tc.password})
			t.Cleanup(func() { rdb.Close() })
			c := clientOn(t, rdb)
			// Redis answers a script call of a client without a password
			// with a protocol error, not NOAUTH: the error says what it means.
			if _, err := c.Mutex("m").TryLock(ctx); err == nil || !strings.Contains(err.Error(), "Redis refuses the client: no password or a wrong one") {
				t.Fatalf("TryLock with %s: %v; want an error saying Redis refuses the client", tc.name, err)
			} else {
				t.Logf("TryLock with %s: %v", tc.name, err)
			}
			err := c.Check(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check with %s: %v; want an error saying %s", tc.name, err, tc.want)
			}
			t.Logf("Check with %s: %v", tc.name, err)
		})
	}

	if err := clientOn(t, admin).Check(ctx); err != nil {
		t.Errorf("Check with the right password: %v", err)
	}
	for _, user := range []string{"dlock", "dlock-oncall"} {
		setUser(t, admin, aclCommand(t, user, "reset"), user, password)
		if err := clientOn(t, userClient(t, srv, user, password)).Check(ctx); err != nil {
			t.Errorf("Check as the ACL user %s of %s: %v; want nil: Redis serves it, and only will not tell the policy", user, aclDoc, err)
		}
	}
	refusedOnly(t, admin, "dlock") // CONFIG GET, and nothing more
}

// TestClientName: Inspect names the Client of every holder and waiter, as
// WithClientName gave it or "host:pid"; Redis keeps one record per Client,
// none per acquisition, and Close removes it.
func TestClientName(t *testing.T) {
	t.Parallel()
	_, rdb, srv := newClient(t)
	ctx := context.Background()
	nrdb := srv.Client(t)
	var sets atomic.Int64
	nrdb.AddHook(setCounter{&sets})
	named := clientOn(t, nrdb, dlock.WithClientName("billing-worker-7"))
	plain := clientOn(t, srv.Client(t))
	host, _ := os.Hostname()
	if want := fmt.Sprintf("%s:%d", host, os.Getpid()); plain.Name() != want {
		t.Errorf("default name %q, want %q", plain.Name(), want)
	}
	if named.Name() != "billing-worker-7" {
		t.Errorf("Name() = %q", named.Name())
	}

	l, err := named.Mutex("job").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := waitFor(plain.Mutex("job").Lock, 30*time.Second)
	if !within(5*time.Second, func() bool { return rdb.ZCard(ctx, "dlock:{job}:waiters").Val() == 1 }) {
		t.Fatal("waiter not registered")
	}
	// Many acquisitions write no more records: one per Client.
	for i := range 50 {
		l2, err := named.Mutex(fmt.Sprint("other-", i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l2.Unlock(ctx)
	}
	if keys := rdb.Keys(ctx, "dlock:client:*").Val(); len(keys) != 2 {
		t.Errorf("client records %v, want one per Client", keys)
	}
	if n := sets.Load(); n != 1 {
		t.Errorf("the Client sent %d SETs for 51 acquisitions, want one", n)
	}

	st, err := plain.Inspect(ctx, dlock.KindMutex, "job")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 1 || st.Holders[0].ClientName != "billing-worker-7" {
		t.Errorf("holders %+v, want one named billing-worker-7", st.Holders)
	}
	if len(st.Waiters) != 1 || st.Waiters[0].ClientName != plain.Name() {
		t.Errorf("waiters %+v, want one named %q", st.Waiters, plain.Name())
	}
	if ttl := rdb.PTTL(ctx, "dlock:client:"+named.ID()).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("the record's TTL is %v: it must expire with the Client's use", ttl)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l2 := outcomeLease(t, <-waiting); l2 != nil {
		l2.Unlock(ctx)
	}
	if err := named.Close(); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, "dlock:client:"+named.ID()).Val(); n != 0 {
		t.Error("Close left the Client's record")
	}
}

// TestClientNameBadInput: a bad name is an error of New, which sends
// nothing; the option belongs to a Client.
func TestClientNameBadInput(t *testing.T) {
	t.Parallel()
	c, rdb, srv := newClient(t)
	for _, name := range []string{"", strings.Repeat("n", dlock.MaxValueLen+1)} {
		if _, err := dlock.New(srv.Client(t), dlock.WithClientName(name)); err == nil || !strings.Contains(err.Error(), "WithClientName") {
			t.Errorf("New with WithClientName of %d bytes: %v", len(name), err)
		}
	}
	if _, err := c.Mutex("x", dlock.WithClientName("a")).TryLock(context.Background()); err == nil || !strings.Contains(err.Error(), "Client only") {
		t.Errorf("WithClientName given to a Mutex: %v", err)
	}
	if n := rdb.DBSize(context.Background()).Val(); n != 0 {
		t.Errorf("bad input left %d keys", n)
	}
}

// setCounter counts the SET commands a go-redis client sends.
type setCounter struct{ n *atomic.Int64 }

func (setCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c setCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "set" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (setCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestClientNameRenewedWithRounds: while a Client holds a lease, its record
// is written by the renewal rounds, in the same pipeline as their extends,
// not by requests of its own; it lives as long as the Client holds.
func TestClientNameRenewedWithRounds(t *testing.T) {
	t.Parallel()
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprintf("WithWaitReplicas %v", wait), func(t *testing.T) {
			t.Parallel()
			var srv *redistest.Server
			opts := []dlock.Option{dlock.WithClientName("renewer"), dlock.WithRecordEvery(300 * time.Millisecond)}
			if wait {
				srv, _ = replicated(t, 1)
				opts = append(opts, dlock.WithWaitReplicas(1, time.Second))
			} else {
				srv = redistest.Start(t)
			}
			rdb := srv.Client(t)
			rc := &recordCounter{}
			rdb.AddHook(rc)
			c := clientOn(t, rdb, opts...)
			ctx := context.Background()
			// Two leases, so that each round is a pipeline of two extends.
			var leases []*dlock.Lease
			for _, name := range []string{"a", "b"} {
				l, err := c.Mutex(name, dlock.WithTTL(600*time.Millisecond)).Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				leases = append(leases, l)
			}
			time.Sleep(2 * time.Second)
			alone, withRound := rc.counts()
			switch {
			case !wait && (alone != 1 || withRound < 3):
				t.Errorf("record written %d times on its own and %d times with a renewal round; want once on its own (the first acquisition), then with the rounds", alone, withRound)
			case wait && alone < 4:
				// With WAIT, the round's pipeline is the leases' server's:
				// the record goes beside it, on its own connection.
				t.Errorf("record written %d times over 2s of rounds, want one per round", alone)
			}
			if v := srv.Client(t).Get(ctx, "dlock:client:"+c.ID()).Val(); v != "renewer" {
				t.Errorf("record %q after 2s of renewals", v)
			}
			for _, l := range leases {
				l.Unlock(ctx)
			}
		})
	}
}

// recordCounter counts the writes of Clients' records a go-redis client
// sends: on their own, or in a pipeline with a script call.
type recordCounter struct {
	mu              sync.Mutex
	alone, withCall int
}

func (rc *recordCounter) counts() (int, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.alone, rc.withCall
}

func isRecordSet(cmd redis.Cmder) bool {
	if cmd.Name() != "set" {
		return false
	}
	key, _ := cmd.Args()[1].(string)
	return strings.HasPrefix(key, "dlock:client:")
}

func (*recordCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (rc *recordCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isRecordSet(cmd) {
			rc.mu.Lock()
			rc.alone++
			rc.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (rc *recordCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		set, call := false, false
		for _, cmd := range cmds {
			set = set || isRecordSet(cmd)
			call = call || cmd.Name() == "evalsha" || cmd.Name() == "eval"
		}
		if set {
			rc.mu.Lock()
			if call {
				rc.withCall++
			} else {
				rc.alone++
			}
			rc.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}
