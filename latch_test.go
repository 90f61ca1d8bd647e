package dlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func latchKey(name string) string     { return "dlock:latch:{" + name + "}" }
func latchChannel(name string) string { return latchKey(name) + ":zero" }

// latchKeys returns the keys in rdb but the records of a latch's last
// opening (":opened"), failing the test if one would outlive its 10s.
func latchKeys(t *testing.T, rdb *redis.Client) []string {
	t.Helper()
	var keys []string
	for _, k := range stateKeys(rdb, "*") {
		if !strings.HasSuffix(k, ":opened") {
			keys = append(keys, k)
		} else if ttl := rdb.PTTL(context.Background(), k).Val(); ttl <= 0 || ttl > 10*time.Second {
			t.Errorf("%s expires in %v, want within 10s", k, ttl)
		}
	}
	return keys
}

func TestLatch(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	l := c.CountDownLatch("jobs")
	if n, err := l.Count(ctx); n != 0 || err != nil {
		t.Fatalf("Count of a latch never set = %d, %v; want 0", n, err)
	}
	if err := l.Wait(ctx); err != nil {
		t.Fatalf("Wait on a latch with no count: %v", err)
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatalf("CountDown of a latch with no count: %v", err)
	}
	if rdb.Exists(ctx, latchKey("jobs")).Val() != 0 {
		t.Fatal("CountDown of a latch with no count made a key")
	}

	if ok, err := l.TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount(2) on an open latch = %v, %v; want true", ok, err)
	}
	if ok, err := l.TrySetCount(ctx, 5); ok || err != nil {
		t.Fatalf("TrySetCount(5) while the count is set = %v, %v; want false", ok, err)
	}
	if n, err := l.Count(ctx); n != 2 || err != nil {
		t.Fatalf("Count = %d, %v; want 2", n, err)
	}
	if got := rdb.HGet(ctx, latchKey("jobs"), "count").Val(); got != "2" {
		t.Fatalf("count in Redis = %q, want \"2\"", got)
	}

	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.Count(ctx); n != 1 {
		t.Fatalf("Count after one CountDown = %d, want 1", n)
	}
	select {
	case err := <-done:
		t.Fatalf("Wait returned with the count at 1: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Wait did not return after the count reached zero")
	}
	if keys := latchKeys(t, rdb); len(keys) != 0 {
		t.Fatalf("keys left after the latch opened: %q", keys)
	}
	if n, _ := l.Count(ctx); n != 0 {
		t.Fatalf("Count of an open latch = %d", n)
	}

	if ok, err := l.TrySetCount(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetCount(3) after the latch opened = %v, %v; want true", ok, err)
	}
	if n, _ := l.Count(ctx); n != 3 {
		t.Fatalf("Count after re-arming = %d, want 3", n)
	}

	if _, err := c.CountDownLatch("a{b}").TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, "dlock:latch:{a%7Bb%7D}").Val() != 1 {
		t.Errorf("keys of latch \"a{b}\": %q, want its hash tag escaped", rdb.Keys(ctx, "dlock:latch:{a*").Val())
	}
}

func TestLatchBadInput(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	for _, count := range []int64{0, -1, math.MinInt64} {
		if ok, err := c.CountDownLatch("bad").TrySetCount(ctx, count); ok || err == nil {
			t.Errorf("TrySetCount(%d) = %v, %v; want an error", count, ok, err)
		}
	}
	if rdb.Exists(ctx, latchKey("bad")).Val() != 0 {
		t.Error("a rejected TrySetCount set the count")
	}
	rdb.Set(ctx, latchKey("junk"), "not a number", 0)
	for _, tc := range []struct {
		name string
		l    *dlock.CountDownLatch
		ctx  context.Context
	}{
		{"empty name", c.CountDownLatch(""), ctx},
		{"nil client", (*dlock.Client)(nil).CountDownLatch("x"), ctx},
		{"nil latch", nil, ctx},
		{"zero latch", &dlock.CountDownLatch{}, ctx},
		{"nil context", c.CountDownLatch("x"), nil},
		{"count is not a number", c.CountDownLatch("junk"), ctx},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name != "count is not a number" {
				if _, err := tc.l.TrySetCount(tc.ctx, 1); err == nil {
					t.Error("TrySetCount succeeded")
				}
			}
			if err := tc.l.CountDown(tc.ctx); err == nil {
				t.Error("CountDown succeeded")
			}
			if _, err := tc.l.Count(tc.ctx); err == nil {
				t.Error("Count succeeded")
			}
			if err := tc.l.Wait(tc.ctx); err == nil {
				t.Error("Wait succeeded")
			} else if !strings.HasPrefix(err.Error(), "dlock: ") {
				t.Errorf("Wait error %q lacks the package prefix", err)
			}
		})
	}
	if keys := stateKeys(rdb, "*"); !slices.Equal(keys, []string{latchKey("junk")}) {
		t.Errorf("keys after bad calls: %q", keys)
	}
}

// TestLatchWakesAll: the last CountDown wakes every waiter of three Clients
// over pub/sub, not by their fallback re-check. The waiters have waited
// 450ms, so their next re-check is at about 700ms; each must return within
// 150ms of the CountDown, having sent one request (its check of the count)
// since.
func TestLatchWakesAll(t *testing.T) {
	// Not parallel: it runs before the parallel tests start, alone, for
	// what it checks is timing the rest of the suite would disturb.
	srv := redistest.Start(t)
	ctx := context.Background()
	const clients, perClient = 3, 5
	counters := make([]*requestCounter, clients)
	latches := make([]*dlock.CountDownLatch, clients)
	for i := range clients {
		counters[i] = new(requestCounter)
		rdb := redis.NewClient(srv.Options())
		rdb.AddHook(counters[i])
		t.Cleanup(func() { _ = rdb.Close() })
		latches[i] = clientOn(t, rdb).CountDownLatch("all")
	}
	setter := clientOn(t, srv.Client(t)).CountDownLatch("all")
	if _, err := setter.TrySetCount(ctx, 2); err != nil {
		t.Fatal(err)
	}
	type woken struct {
		at  time.Time
		err error
	}
	results := make(chan woken, clients*perClient)
	start := time.Now()
	for _, l := range latches {
		for range perClient {
			go func() {
				err := l.Wait(ctx)
				results <- woken{time.Now(), err}
			}()
		}
	}
	if err := setter.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(start.Add(450 * time.Millisecond)))
	select {
	case r := <-results:
		t.Fatalf("a Wait returned with the count at 1: %v", r.err)
	default:
	}
	for _, rc := range counters {
		rc.reset()
	}
	if err := setter.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	opened := time.Now()
	var slowest time.Duration
	for range clients * perClient {
		select {
		case r := <-results:
			if r.err != nil {
				t.Fatalf("Wait: %v", r.err)
			}
			slowest = max(slowest, r.at.Sub(opened))
		case <-time.After(5 * time.Second):
			t.Fatal("not every Wait returned after the latch opened")
		}
	}
	if limit := 150 * time.Millisecond; slowest > limit {
		t.Errorf("the last waiter returned %v after the latch opened, want within %v", slowest, limit)
	}
	for i, rc := range counters {
		if n := rc.requests.Load(); n > perClient {
			t.Errorf("client %d sent %d requests for its %d waiters after the latch opened, want one each", i, n, perClient)
		}
	}
	t.Logf("%d waiters woken, the last %v after the latch opened", clients*perClient, slowest)
}

func TestLatchWaitContext(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	l := c.CountDownLatch("ctx")
	if _, err := l.TrySetCount(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		ctx   func() (context.Context, context.CancelFunc)
		want  error
		after time.Duration // when ctx ends
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		}, context.DeadlineExceeded, 100 * time.Millisecond},
		{"cancelled while waiting", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			stop := time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, func() { stop.Stop(); cancel() }
		}, context.Canceled, 100 * time.Millisecond},
		{"cancelled before", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, context.Canceled, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			err := l.Wait(ctx)
			took := time.Since(start)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), `wait for latch "ctx"`) {
				t.Fatalf("Wait = %v, want an error matching %v that names the latch", err, tc.want)
			}
			if limit := tc.after + 100*time.Millisecond; took > limit {
				t.Errorf("Wait returned %v after the call, want within %v", took, limit)
			}
		})
	}
	if n, _ := l.Count(context.Background()); n != 1 {
		t.Errorf("Count after Waits gave up = %d, want 1", n)
	}
	if keys := stateKeys(rdb, "*"); !slices.Equal(keys, []string{latchKey("ctx")}) {
		t.Errorf("keys after Waits gave up: %q", keys)
	}
}

func TestLatchClose(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := c.CountDownLatch("close")
	if _, err := l.TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range cap(errs) {
		go func() { errs <- l.Wait(ctx) }()
	}
	if !within(time.Second, func() bool { return subscribers(rdb, latchChannel("close")) == 1 }) {
		t.Fatal("the waiters did not subscribe")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for range cap(errs) {
		select {
		case err := <-errs:
			if !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("waiting Wait after Close: %v, want ErrClosed", err)
			}
		case <-time.After(time.Second):
			t.Fatal("Close did not wake a waiter")
		}
	}
	if _, err := l.TrySetCount(ctx, 1); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TrySetCount after Close: %v, want ErrClosed", err)
	}
	if err := l.CountDown(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("CountDown after Close: %v, want ErrClosed", err)
	}
	if _, err := l.Count(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Count after Close: %v, want ErrClosed", err)
	}
	if err := l.Wait(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Wait after Close: %v, want ErrClosed", err)
	}
	if n := rdb.HGet(ctx, latchKey("close"), "count").Val(); n != "1" {
		t.Errorf("count after Close = %q, want \"1\"", n)
	}
}

// TestLatchStrayMessage: messages on the latch's channel that the latch did
// not send (a waiter's name, "*" while the count is above zero) neither open
// it nor harm the process.
func TestLatchStrayMessage(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	l := c.CountDownLatch("stray")
	if _, err := l.TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	if !within(time.Second, func() bool { return subscribers(rdb, latchChannel("stray")) == 1 }) {
		t.Fatal("the waiter did not subscribe")
	}
	for _, msg := range []string{"someone", "*"} {
		if err := rdb.SPublish(ctx, latchChannel("stray"), msg).Err(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Wait returned on a stray message with the count at 1: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("Wait did not return after the latch opened")
	}
}

// Environment of a latch worker: its mode, one of
//
//	countdown  sleep 50–250ms, count "latch-started" up, count the latch down, print "done"
//	broken     as countdown, with a count down that opens the latch at once
//	wait       print "waiting", wait for the latch, print "opened"
const envLatchMode = "DLOCK_TEST_LATCH_MODE"

// openAtOnce is a broken count down: it opens the latch on the first call,
// as a latch that deleted its count instead of decrementing it would.
//
// KEYS[1] the latch's count; ARGV[1] its channel.
var openAtOnce = redis.NewScript(`
redis.call('DEL', KEYS[1])
redis.call('SPUBLISH', ARGV[1], '*')
return 0`)

// latchWorker is the "latch" worker role, on the latch p.Name.
func latchWorker(c *dlock.Client, p workerParams) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := c.CountDownLatch(p.Name)
	switch mode := os.Getenv(envLatchMode); mode {
	case "countdown", "broken":
		rdb := lockRedis()
		defer rdb.Close()
		time.Sleep(50*time.Millisecond + rand.N(200*time.Millisecond))
		if err := rdb.Incr(ctx, "latch-started").Err(); err != nil {
			return err
		}
		var err error
		if mode == "broken" {
			err = openAtOnce.Run(ctx, rdb, []string{latchKey(p.Name)}, latchChannel(p.Name)).Err()
		} else {
			err = l.CountDown(ctx)
		}
		if err != nil {
			return err
		}
		fmt.Println("done")
	case "wait":
		fmt.Println("waiting")
		if err := l.Wait(ctx); err != nil {
			return err
		}
		fmt.Println("opened")
	default:
		return fmt.Errorf("unknown %s %q", envLatchMode, mode)
	}
	return nil
}

// latchCmd returns the command that runs a latch worker on srv.
func latchCmd(t *testing.T, srv *redistest.Server, mode, name string) *exec.Cmd {
	return latchCmdOn(t, srv.Addr, srv, mode, name)
}

// latchCmdOn is latchCmd with the latch at lockAddr, a deployment's address
// as lockRedis reads it.
func latchCmdOn(t *testing.T, lockAddr string, res *redistest.Server, mode, name string) *exec.Cmd {
	cmd := workerOn(t, "latch", "", lockAddr, res, workerParams{Name: name, TTL: time.Second})
	cmd.Env = append(cmd.Env, envLatchMode+"="+mode)
	return cmd
}

// latchOutcome is what the parent saw when its Wait returned.
type latchOutcome struct {
	started int64    // workers that had begun to count down
	count   int64    // the latch's count
	reports []string // each worker's output, after all exited
	waited  time.Duration
}

func (o latchOutcome) violations(procs int) []string {
	var v []string
	if o.started != int64(procs) {
		v = append(v, fmt.Sprintf("Wait returned when %d of %d workers had begun to count down", o.started, procs))
	}
	if o.count != 0 {
		v = append(v, fmt.Sprintf("Wait returned with the count at %d", o.count))
	}
	for i, r := range o.reports {
		if r != "done" {
			v = append(v, fmt.Sprintf("worker %d reported %q, want \"done\"", i, r))
		}
	}
	return v
}

// latchProcesses arms a latch with procs, starts procs workers in mode that
// each count it down once, and waits for it.
func latchProcesses(t *testing.T, mode string, procs int, d deployment) latchOutcome {
	srv := redistest.Start(t)
	lockAddr, rdb := d.start(t)
	l := clientOn(t, rdb).CountDownLatch("procs")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ok, err := l.TrySetCount(ctx, int64(procs)); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	cmds := make([]*exec.Cmd, procs)
	outs := make([]strings.Builder, procs)
	for i := range cmds {
		cmds[i] = latchCmdOn(t, lockAddr, srv, mode, "procs")
		cmds[i].Stdout = &outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatalf("start worker: %v", err)
		}
	}
	start := time.Now()
	err := l.Wait(ctx)
	var o latchOutcome
	o.waited = time.Since(start)
	o.started, _ = rdb.Get(ctx, "latch-started").Int64()
	o.count, _ = l.Count(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		o.reports = append(o.reports, strings.TrimSpace(outs[i].String()))
	}
	return o
}

// TestLatchProcesses: 4 worker processes each count a latch of 4 down once,
// after a random delay; the parent's Wait must return only after all four
// have begun, with the count at zero. A count down that opens the latch at
// once must be caught by the same checks.
func TestLatchProcesses(t *testing.T) {
	t.Parallel()
	const procs = 4
	for _, d := range deployments {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel() // servers of its own
			o := latchProcesses(t, "countdown", procs, d)
			for _, v := range o.violations(procs) {
				t.Error(v)
			}
			t.Logf("Wait returned after %v", o.waited)
		})
	}
	t.Run("broken-latch-is-caught", func(t *testing.T) {
		t.Parallel()
		o := latchProcesses(t, "broken", procs, single)
		v := o.violations(procs)
		if len(v) == 0 {
			t.Fatalf("a latch that opens at the first count down passed the checks: %+v", o)
		}
		t.Logf("caught, as it must be: %v", v)
	})
}

// lines sends each line read from r, and closes at the end of r.
func lines(r io.Reader) <-chan string {
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		s := bufio.NewScanner(r)
		for s.Scan() {
			ch <- s.Text()
		}
	}()
	return ch
}

func expectLine(t *testing.T, ch <-chan string, want string, d time.Duration) {
	t.Helper()
	select {
	case got, ok := <-ch:
		if !ok || got != want {
			t.Fatalf("worker said %q (open %v), want %q", got, ok, want)
		}
	case <-time.After(d):
		t.Fatalf("worker did not say %q within %v", want, d)
	}
}

// TestLatchKilledWaiter: a waiting process killed with SIGKILL leaves nothing
// in Redis, and the latch still opens for the waiters of another process and
// of this one.
func TestLatchKilledWaiter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const name = "killed"
	l := clientOn(t, rdb).CountDownLatch(name)
	if _, err := l.TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	outs := make([]<-chan string, 2)
	cmds := make([]*exec.Cmd, 2)
	for i := range cmds {
		cmds[i] = latchCmd(t, srv, "wait", name)
		stdout, err := cmds[i].StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmds[i].Process.Kill(); _ = cmds[i].Wait() }()
		outs[i] = lines(stdout)
		expectLine(t, outs[i], "waiting", 10*time.Second)
	}
	done := make(chan error, 1)
	go func() { done <- clientOn(t, srv.Client(t)).CountDownLatch(name).Wait(ctx) }()
	if !within(5*time.Second, func() bool { return subscribers(rdb, latchChannel(name)) == 3 }) {
		t.Fatalf("%d waiting processes subscribed, want 3", subscribers(rdb, latchChannel(name)))
	}

	if err := cmds[0].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmds[0].Wait()
	if !within(2*time.Second, func() bool { return subscribers(rdb, latchChannel(name)) == 2 }) {
		t.Error("the killed waiter's subscription outlived it")
	}
	if keys := stateKeys(rdb, "*"); !slices.Equal(keys, []string{latchKey(name)}) {
		t.Errorf("keys with waiters, one killed: %q, want only the count", keys)
	}

	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	expectLine(t, outs[1], "opened", 2*time.Second)
	if err := cmds[1].Wait(); err != nil {
		t.Errorf("surviving waiter: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Wait in this process: %v", err)
		}
	case <-time.After(time.Second):
		t.Error("the waiter in this process did not return")
	}
	if keys := latchKeys(t, rdb); len(keys) != 0 {
		t.Errorf("keys left after the latch opened: %q", keys)
	}
}

// replied is a go-redis hook that signals, without blocking, after each reply
// to a read of a latch's count (HGET; GET of an earlier version's string).
type replied chan struct{}

func (r replied) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r replied) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); n == "hget" || n == "get" { // the count: a hash field, or an earlier version's string
			select {
			case r <- struct{}{}:
			default:
			}
		}
		return err
	}
}

func (r replied) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// BenchmarkLatch measures the latch:
//   - countdown: CountDown of a latch that stays closed, back to back; req/op
//     must be 1.
//   - wake: one cycle is TrySetCount(1), a Wait in another Client that reads
//     the count and sleeps, and the CountDown that opens the latch.
//     wake-p50-µs and wake-p99-µs run from that CountDown returning to the
//     Wait returning (negative when the Wait returned first); req/op is the
//     waiting Client's requests per Wait.
func BenchmarkLatch(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()

	b.Run("countdown", func(b *testing.B) {
		var rc requestCounter
		l := clientOn(b, benchRedis(b, srv, &rc, 0)).CountDownLatch("bench-countdown")
		if _, err := l.TrySetCount(ctx, math.MaxInt64); err != nil {
			b.Fatal(err)
		}
		for range warmUps {
			if err := l.CountDown(ctx); err != nil {
				b.Fatal(err)
			}
		}
		rc.reset()
		b.ReportAllocs()
		for b.Loop() {
			if err := l.CountDown(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if reqPerOp := rc.report(b, b.N); reqPerOp != 1 {
			b.Errorf("%.3f requests per CountDown, want 1", reqPerOp)
		}
	})

	b.Run("wake", func(b *testing.B) {
		setter := clientOn(b, srv.Client(b)).CountDownLatch("bench-wake")
		var rc requestCounter
		seen := make(replied, 1)
		rdb := benchRedis(b, srv, &rc, 0)
		rdb.AddHook(seen)
		waiter := clientOn(b, rdb).CountDownLatch("bench-wake")
		type woken struct {
			at  time.Time
			err error
		}
		cycle := func() (time.Duration, error) {
			if _, err := setter.TrySetCount(ctx, 1); err != nil {
				return 0, err
			}
			done := make(chan woken, 1)
			go func() {
				err := waiter.Wait(ctx)
				done <- woken{time.Now(), err}
			}()
			<-seen // the waiter read the count, 1: it sleeps next
			err := setter.CountDown(ctx)
			counted := time.Now()
			w := <-done
			select {
			case <-seen: // the waiter's last read, 0
			default:
			}
			return w.at.Sub(counted), errors.Join(err, w.err)
		}
		for range warmUps {
			if _, err := cycle(); err != nil {
				b.Fatal(err)
			}
		}
		rc.reset()
		var wakes []time.Duration
		for b.Loop() {
			d, err := cycle()
			if err != nil {
				b.Fatal(err)
			}
			wakes = append(wakes, d)
		}
		rc.report(b, b.N)
		b.ReportMetric(micros(percentile(wakes, 0.50)), "wake-p50-µs")
		b.ReportMetric(micros(percentile(wakes, 0.99)), "wake-p99-µs")
	})
}

// TestLatchKeysPerName: however many calls a latch has had, Redis holds at
// most its own two keys (its hash while armed, the record of its last
// opening): no call leaves a key of its own, and a retried call is told
// from what those keys hold.
func TestLatchKeysPerName(t *testing.T) {
	t.Parallel()
	redistest.Full(t, "thousands of names")
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	l := c.CountDownLatch("n")
	own := []string{latchKey("n"), latchKey("n") + ":opened"}
	const rounds = 300
	for round := range rounds {
		ok1, err1 := l.TrySetCount(ctx, 3)
		ok2, err2 := l.TrySetCount(ctx, 5)
		err := errors.Join(err1, err2, l.CountDown(ctx), l.CountDown(ctx), l.CountDown(ctx), l.CountDown(ctx))
		ok3, err3 := l.TrySetCount(ctx, 2)
		err = errors.Join(err, err3, l.CountDown(ctx))
		ok4, err4 := l.Delete(ctx)
		ok5, err5 := l.Delete(ctx)
		n, err6 := l.Count(ctx)
		if err = errors.Join(err, err4, err5, err6); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !ok1 || ok2 || !ok3 || !ok4 || ok5 || n != 0 {
			t.Fatalf("round %d: TrySetCount %v %v %v, Delete %v %v, Count %d; want true false true, true false, 0", round, ok1, ok2, ok3, ok4, ok5, n)
		}
		for _, k := range allKeys(t, rdb) {
			if !slices.Contains(own, k) {
				t.Fatalf("round %d (%d calls): key %q, want only the latch's own %q", round, 11*(round+1), k, own)
			}
		}
	}
	if n := rdb.DBSize(ctx).Val(); n > 2 {
		t.Errorf("%d keys after %d calls, want at most 2", n, 11*rounds)
	}
}

// TestLatchEarlierVersion: a latch armed by an earlier version of dlock, whose
// count is a string, reads as armed and counts down as before; a key that
// holds anything else under a latch's name makes every call fail with an
// error that says so, before anything is written.
func TestLatchEarlierVersion(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	rdb.Set(ctx, latchKey("old"), "2", 0)
	l := c.CountDownLatch("old")
	if n, err := l.Count(ctx); n != 2 || err != nil {
		t.Fatalf("Count of a latch armed as a string = %d, %v; want 2", n, err)
	}
	if ok, err := l.TrySetCount(ctx, 5); ok || err != nil {
		t.Fatalf("TrySetCount on a latch armed as a string = %v, %v; want false", ok, err)
	}
	if n, err := l.Count(ctx); n != 2 || err != nil {
		t.Fatalf("Count after a call converted it = %d, %v; want 2", n, err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	for range 2 {
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Wait did not return after the count reached zero")
	}
	rdb.Set(ctx, latchKey("old2"), "1", 0)
	if ok, err := c.CountDownLatch("old2").Delete(ctx); !ok || err != nil {
		t.Fatalf("Delete of a latch armed as a string = %v, %v; want true", ok, err)
	}

	rdb.RPush(ctx, latchKey("list"), "x")
	rdb.HSet(ctx, latchKey("junk"), "count", "many")
	for _, name := range []string{"list", "junk"} {
		l := c.CountDownLatch(name)
		if err := l.CountDown(ctx); err == nil || !strings.Contains(err.Error(), latchKey(name)) {
			t.Errorf("CountDown of %s: %v, want an error naming the key", name, err)
		}
		if _, err := l.Delete(ctx); err == nil {
			t.Errorf("Delete of %s: no error", name)
		}
		if _, err := l.Count(ctx); err == nil {
			t.Errorf("Count of %s: no error", name)
		}
	}
	if got := rdb.HGetAll(ctx, latchKey("junk")).Val(); len(got) != 1 || got["count"] != "many" {
		t.Errorf("%s after the failed calls: %v", latchKey("junk"), got)
	}
	if n := rdb.LLen(ctx, latchKey("list")).Val(); n != 1 {
		t.Errorf("%s after the failed calls: %d elements", latchKey("list"), n)
	}
}
