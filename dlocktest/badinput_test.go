package dlocktest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/redis/go-redis/v9"
)

// TestNilT: a nil testing.TB, or a nil pointer in one, is reported on
// standard error; nothing panics and nothing is started.
func TestNilT(t *testing.T) {
	srv := dlocktest.NewServer(t)
	ctx := context.Background()
	l, err := srv.Client.Mutex("nil-t").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var typed *testing.T
	for _, tb := range []testing.TB{nil, typed} {
		if s := dlocktest.NewServer(tb); s != nil {
			t.Errorf("NewServer(%#v) = %v, want nil", tb, s)
		}
		if f := dlocktest.NewFaults(tb, srv.Addr); f != nil {
			t.Errorf("NewFaults(%#v) = %v, want nil", tb, f)
		}
		dlocktest.Lose(tb, l)
		dlocktest.Steal(tb, l)
	}
	if l.Err() != nil {
		t.Fatalf("the lease ended through a nil testing.TB: %v", l.Err())
	}
	var f *dlocktest.Faults
	f.Cut()
	f.Pause()
	f.Restore()
	_ = f.LoseNextReply()
	(&dlocktest.Faults{}).Cut()
}

// TestBadInput: what Lose, Steal and NewFaults cannot act on fails the
// test with a message that says why.
func TestBadInput(t *testing.T) {
	srv := dlocktest.NewServer(t)
	ctx := context.Background()
	unlocked, err := srv.Client.Mutex("unlocked").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := unlocked.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lost, err := srv.Client.Mutex("lost").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dlocktest.Lose(t, lost)
	outer, err := srv.Client.Mutex("reentered").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	octx, cancel := outer.Context(ctx)
	defer cancel()
	inner, err := srv.Client.Mutex("reentered").Lock(octx)
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var nilLD *dlock.Leadership

	for _, c := range []struct {
		name string
		call func(t testing.TB)
		want string
	}{
		{"Lose nil Lease", func(t testing.TB) { dlocktest.Lose(t, (*dlock.Lease)(nil)) }, "nil or zero lease"},
		{"Steal nil Lease", func(t testing.TB) { dlocktest.Steal(t, (*dlock.Lease)(nil)) }, "nil or zero lease"},
		{"Lose zero Lease", func(t testing.TB) { dlocktest.Lose(t, &dlock.Lease{}) }, "nil or zero lease"},
		{"Lose nil Leadership", func(t testing.TB) { dlocktest.Lose(t, nilLD) }, "nil or zero lease"},
		{"Steal zero Leadership", func(t testing.TB) { dlocktest.Steal(t, &dlock.Leadership{}) }, "nil or zero lease"},
		{"Lose unlocked", func(t testing.TB) { dlocktest.Lose(t, unlocked) }, "already ended"},
		{"Lose lost", func(t testing.TB) { dlocktest.Lose(t, lost) }, "already ended"},
		{"Steal lost", func(t testing.TB) { dlocktest.Steal(t, lost) }, "already ended"},
		{"Lose unlocked re-entry", func(t testing.TB) { dlocktest.Lose(t, inner) }, "was unlocked"},
		{"NewFaults empty", func(t testing.TB) { dlocktest.NewFaults(t, "") }, "want a server's host:port"},
		{"NewFaults no port", func(t testing.TB) { dlocktest.NewFaults(t, "localhost") }, "want a server's host:port"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fatal, _ := new(recorder).run(c.call)
			if !strings.Contains(fatal, c.want) {
				t.Fatalf("reported %q, want it to say %q", fatal, c.want)
			}
			t.Log(fatal)
		})
	}
	if outer.Err() != nil {
		t.Fatalf("a failed Lose ended the outer hold: %v", outer.Err())
	}
}

// TestLoseRedLock: a RedLock Client's leases are refused with a message
// saying so (errors.ErrUnsupported).
func TestLoseRedLock(t *testing.T) {
	var nodes []redis.UniversalClient
	for range 3 {
		rdb := redis.NewClient(&redis.Options{Addr: dlocktest.NewServer(t).Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		nodes = append(nodes, rdb)
	}
	c, err := dlock.NewRedLock(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Mutex("red").Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fatal, _ := new(recorder).run(func(t testing.TB) { dlocktest.Lose(t, l) })
	if !strings.Contains(fatal, "RedLock") || !strings.Contains(fatal, "unsupported") {
		t.Fatalf("reported %q, want an unsupported RedLock", fatal)
	}
	if l.Err() != nil {
		t.Fatalf("the refused lease ended: %v", l.Err())
	}
}

// TestNewServerMissing: without the server binary NewServer fails the test
// saying what to install, and skips it only with
// DLOCKTEST_SKIP_WITHOUT_SERVER=1.
func TestNewServerMissing(t *testing.T) {
	t.Setenv(dlocktest.ServerEnv, "no-such-redis-server")
	for _, skip := range []string{"", "0", "1"} {
		t.Run("skip="+skip, func(t *testing.T) {
			t.Setenv(dlocktest.SkipEnv, skip)
			var s *dlocktest.Server
			fatal, skipped := new(recorder).run(func(t testing.TB) { s = dlocktest.NewServer(t) })
			msg := fatal
			if skip == "1" {
				msg = skipped
				if fatal != "" {
					t.Fatalf("failed (%q), want a skip", fatal)
				}
			} else if skipped != "" {
				t.Fatalf("skipped (%q), want a failure", skipped)
			}
			if s != nil || !strings.Contains(msg, "no-such-redis-server") || !strings.Contains(msg, "apt-get install redis-server") {
				t.Fatalf("NewServer = %v, reported %q; want nil and what to install", s, msg)
			}
			t.Log(msg)
		})
	}
}

// TestNewServer: the server answers, its Client works, and both are gone
// when the test ends.
func TestNewServer(t *testing.T) {
	var addr string
	t.Run("test", func(t *testing.T) {
		srv := dlocktest.NewServer(t)
		addr = srv.Addr
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer rdb.Close()
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		l, err := srv.Client.Mutex("x").TryLock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_ = l // released by the Client's Close when the test ends
	})
	if addr == "" {
		return // the subtest failed; an empty Addr would be go-redis's default, 6379
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("PING after the test ended: %v, want connection refused", err)
	}
}
