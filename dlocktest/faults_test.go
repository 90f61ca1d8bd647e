package dlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/redis/go-redis/v9"
)

// faultSwitch is what the checks below use of a switch, so that they can
// run against a broken one too.
type faultSwitch struct {
	addr                string
	cut, pause, restore func()
	loseNextReply       func() <-chan struct{}
}

func realSwitch(t *testing.T, addr string) faultSwitch {
	f := dlocktest.NewFaults(t, addr)
	return faultSwitch{f.Addr, f.Cut, f.Pause, f.Restore, f.LoseNextReply}
}

// passSwitch is a broken switch: a proxy that forwards everything, whatever
// it is told. The checks must fail on it.
func passSwitch(t *testing.T, addr string) faultSwitch {
	p := faultproxy.Start(t, addr)
	return faultSwitch{p.Addr(), func() {}, func() {}, func() {}, func() <-chan struct{} {
		return p.Inject(faultproxy.Rule{Fault: faultproxy.Pass, Times: 1}).Hit()
	}}
}

func client(t *testing.T, addr string, o redis.Options) *redis.Client {
	o.Addr = addr
	rdb := redis.NewClient(&o)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// checkCut: after Cut a request fails and nothing reaches Redis; after
// Restore requests go through.
func checkCut(t *testing.T, sw faultSwitch, direct *redis.Client) error {
	ctx := context.Background()
	rdb := client(t, sw.addr, redis.Options{})
	if err := rdb.Ping(ctx).Err(); err != nil {
		return err
	}
	sw.cut()
	err := rdb.Incr(ctx, "cut").Err()
	t.Logf("INCR after Cut: %v", err)
	if err == nil {
		return errors.New("INCR after Cut succeeded")
	}
	if n, _ := direct.Get(ctx, "cut").Int(); n != 0 {
		return fmt.Errorf("INCR after Cut reached Redis (count %d)", n)
	}
	sw.restore()
	if n, err := rdb.Incr(ctx, "cut").Result(); err != nil || n != 1 {
		return fmt.Errorf("INCR after Restore = %d, %v; want 1", n, err)
	}
	return nil
}

// checkPause: after Pause a request times out; the switch still holds it,
// and forwards it on Restore, so that it runs late, once; after Restore
// requests go through.
func checkPause(t *testing.T, sw faultSwitch, direct *redis.Client) error {
	ctx := context.Background()
	rdb := client(t, sw.addr, redis.Options{ReadTimeout: 200 * time.Millisecond})
	if err := rdb.Ping(ctx).Err(); err != nil {
		return err
	}
	sw.pause()
	err := rdb.Incr(ctx, "paused").Err()
	t.Logf("INCR while paused: %v", err)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		sw.restore()
		return fmt.Errorf("INCR while paused: %v, want a timeout", err)
	}
	if n, _ := direct.Get(ctx, "paused").Int(); n != 0 {
		sw.restore()
		return fmt.Errorf("INCR while paused reached Redis (count %d)", n)
	}
	sw.restore()
	if n, err := rdb.Incr(ctx, "after").Result(); err != nil || n != 1 {
		return fmt.Errorf("INCR after Restore = %d, %v; want 1", n, err)
	}
	// The held INCR goes out on its own connection, racing the one above.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, _ := direct.Get(ctx, "paused").Int()
		if n == 1 {
			return nil
		}
		if n > 1 || time.Now().After(deadline) {
			return fmt.Errorf("the INCR go-redis gave up on ran %d times after Restore, want 1", n)
		}
	}
}

// checkLoseNextReply: the request runs, its reply is lost; go-redis without
// retries returns io.EOF, with its default retries it runs the request again.
// A pub/sub message is not a reply: it arrives, and the next command loses
// its reply instead.
func checkLoseNextReply(t *testing.T, sw faultSwitch, direct *redis.Client) error {
	ctx := context.Background()
	once := client(t, sw.addr, redis.Options{MaxRetries: -1})
	if err := once.Ping(ctx).Err(); err != nil {
		return err
	}
	hit := sw.loseNextReply()
	err := once.Incr(ctx, "lost").Err()
	t.Logf("INCR with its reply lost, MaxRetries -1: %v", err)
	if !errors.Is(err, io.EOF) {
		return fmt.Errorf("INCR with its reply lost, MaxRetries -1: %v, want io.EOF", err)
	}
	<-hit
	if n, _ := direct.Get(ctx, "lost").Int(); n != 1 {
		return fmt.Errorf("INCR with its reply lost ran %d times, want 1", n)
	}

	retried := client(t, sw.addr, redis.Options{})
	if err := retried.Ping(ctx).Err(); err != nil {
		return err
	}
	sw.loseNextReply()
	n, err := retried.Incr(ctx, "retried").Result()
	t.Logf("INCR with its reply lost, default MaxRetries: %d, %v", n, err)
	if err != nil || n != 2 {
		return fmt.Errorf("INCR with its reply lost, default MaxRetries = %d, %v; want 2 (run again)", n, err)
	}

	sub := once.Subscribe(ctx, "news")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		return err
	}
	hit = sw.loseNextReply()
	if err := direct.Publish(ctx, "news", "hello").Err(); err != nil {
		return err
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Payload != "hello" {
		return fmt.Errorf("pub/sub message after LoseNextReply: %v, %v", msg, err)
	}
	select {
	case <-hit:
		return errors.New("LoseNextReply took a pub/sub message")
	default:
	}
	if err := once.Ping(ctx).Err(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("PING after the pub/sub message: %v, want io.EOF (its reply lost)", err)
	}
	return nil
}

var checks = []struct {
	name  string
	check func(*testing.T, faultSwitch, *redis.Client) error
}{
	{"Cut", checkCut},
	{"Pause", checkPause},
	{"LoseNextReply", checkLoseNextReply},
}

// TestFaults: the switch does what its documentation says go-redis sees.
func TestFaults(t *testing.T) {
	srv := dlocktest.NewServer(t)
	direct := client(t, srv.Addr, redis.Options{})
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if err := direct.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.check(t, realSwitch(t, srv.Addr), direct); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFaultsChecksCanFail: the checks of TestFaults fail on a switch that
// forwards everything, so they cannot pass while the switch does nothing.
func TestFaultsChecksCanFail(t *testing.T) {
	srv := dlocktest.NewServer(t)
	direct := client(t, srv.Addr, redis.Options{})
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if err := direct.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			err := c.check(t, passSwitch(t, srv.Addr), direct)
			if err == nil {
				t.Fatal("the check passed on a switch that forwards everything")
			}
			t.Logf("as it should, the check failed: %v", err)
		})
	}
}

// dlockThrough returns a dlock Client whose requests go through the switch
// at addr, used once so that its first-use requests are done.
func dlockThrough(t *testing.T, addr string, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(client(t, addr, redis.Options{}), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.Mutex("warm-up").TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFaultsLostReplies: a Lock and an Unlock whose replies are lost run
// twice in Redis and answer as if once: one hold, the fence Redis keeps,
// the lock released.
func TestFaultsLostReplies(t *testing.T) {
	srv := dlocktest.NewServer(t)
	f := dlocktest.NewFaults(t, srv.Addr)
	c := dlockThrough(t, f.Addr)
	ctx := context.Background()

	hit := f.LoseNextReply()
	l, err := c.Mutex("twice").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-hit:
	default:
		t.Fatal("no reply was lost")
	}
	st, err := srv.Client.Inspect(ctx, dlock.KindMutex, "twice")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 1 || st.Holders[0].Holds != 1 || st.Holders[0].Fence != l.Fence() || st.Holders[0].Owner != l.Owner() {
		t.Fatalf("after a Lock whose reply was lost: %+v, want one hold of %s with fence %d", st.Holders, l.Owner(), l.Fence())
	}

	hit = f.LoseNextReply()
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock whose reply was lost: %v", err)
	}
	<-hit
	if st, err := srv.Client.Inspect(ctx, dlock.KindMutex, "twice"); err != nil || len(st.Holders) != 0 {
		t.Fatalf("after the Unlock: %+v, %v; want no holders", st, err)
	}
}

// TestFaultsCutAndPauseLoseLeases: a lease whose Client is cut off, or
// whose traffic is paused, is lost at its local deadline; after Restore the
// Client takes the lock again, with a higher fence.
func TestFaultsCutAndPauseLoseLeases(t *testing.T) {
	srv := dlocktest.NewServer(t)
	for _, how := range []string{"Cut", "Pause"} {
		t.Run(how, func(t *testing.T) {
			f := dlocktest.NewFaults(t, srv.Addr)
			c := dlockThrough(t, f.Addr, dlock.WithTTL(500*time.Millisecond))
			defer f.Restore() // before the Client's Close, so that it releases at once
			ctx := context.Background()
			l, err := c.Mutex(how).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if how == "Cut" {
				f.Cut()
			} else {
				f.Pause()
			}
			select {
			case <-l.Done():
			case <-time.After(time.Minute): // a bound against a hang, far above the TTL
				t.Fatal("the lease outlived its TTL with its Client cut off")
			}
			if !errors.Is(l.Err(), dlock.ErrLockLost) || !strings.Contains(l.Err().Error(), "not renewed before its deadline") {
				t.Fatalf("Err = %v", l.Err())
			}
			t.Logf("lease: %v", l.Err())
			f.Restore()
			l2, err := c.Mutex(how).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if l2.Fence() <= l.Fence() {
				t.Fatalf("fence %d after Restore, not above %d", l2.Fence(), l.Fence())
			}
			if err := l2.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFaultsGoRedis pins down what go-redis (default options but a short
// ReadTimeout) does under Cut and Pause, as Faults documents it: the
// switch's requests counted by a rule that lets them pass.
func TestFaultsGoRedis(t *testing.T) {
	srv := dlocktest.NewServer(t)
	for _, how := range []string{"Pause", "Cut"} {
		t.Run(how, func(t *testing.T) {
			p := faultproxy.Start(t, srv.Addr)
			rdb := client(t, p.Addr(), redis.Options{ReadTimeout: 200 * time.Millisecond})
			ctx := context.Background()
			if err := rdb.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			accepted := p.Accepted()
			incr := p.Inject(faultproxy.Rule{Match: faultproxy.CommandIs("INCR")})
			hello := p.Inject(faultproxy.Rule{Match: faultproxy.CommandIs("HELLO")})
			if how == "Pause" {
				p.Pause()
			} else {
				p.Refuse(true)
				p.Cut()
			}
			err := rdb.Incr(ctx, "x").Err()
			p.Resume()
			p.Refuse(false)
			t.Logf("%s: INCR: %v; connections accepted since: %d, INCRs read: %d, HELLOs read: %d", how, err, p.Accepted()-accepted, incr.Hits(), hello.Hits())
			var ne net.Error
			switch {
			case how == "Pause" && (!errors.As(err, &ne) || !ne.Timeout() || incr.Hits() != 1 || hello.Hits() < 1):
				t.Fatal("want a timeout, after the INCR and a new connection's HELLO were sent")
			case how == "Cut" && (!errors.Is(err, io.EOF) || incr.Hits() != 0):
				t.Fatal("want io.EOF, and no INCR read")
			}
		})
	}
}
