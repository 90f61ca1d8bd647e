package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
)

// groupCall is what one Do returned.
type groupCall struct {
	val    []byte
	shared bool
	err    error
}

// burst has callers goroutines in each of the Clients call Do on key at
// once, with fn as their function, and returns what each call returned.
func burst(t *testing.T, groups []*dlock.Group, callers int, key string, fn func(context.Context) ([]byte, error)) []groupCall {
	t.Helper()
	var mu sync.Mutex
	var calls []groupCall
	var wg sync.WaitGroup
	for _, g := range groups {
		for range callers {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				v, shared, err := g.Do(ctx, key, fn)
				mu.Lock()
				calls = append(calls, groupCall{v, shared, err})
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return calls
}

// queuedFor waits until n callers wait in line for key of the Group name.
func queuedFor(t *testing.T, c *dlock.Client, name string, n int) error {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := c.Inspect(context.Background(), dlock.KindGroup, name)
		if err != nil {
			return err
		}
		if len(s.Holders) == 1 && s.Queued == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d waiting, %d holding; want %d waiting behind the runner", s.Queued, len(s.Holders), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGroupBurst: callers in four Clients (one wait in Redis each, however
// many Group values of the name they use) ask one
// key while its function runs: it runs once per burst, the caller that ran
// it alone says shared false, and every caller gets its value.
func TestGroupBurst(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var groups []*dlock.Group
	var clients []*dlock.Client
	for range 4 {
		c := clientOn(t, srv.Client(t))
		clients = append(clients, c)
		// Two Group values of one name share the Client's wait.
		groups = append(groups, c.Group("reports"), c.Group("reports"))
	}
	var runs atomic.Int64
	for b := range 3 {
		want := fmt.Sprintf("report %d", b)
		calls := burst(t, groups, 4, "2026-11", func(ctx context.Context) ([]byte, error) {
			runs.Add(1)
			// Every other Client waits in line, once, before this returns.
			if err := queuedFor(t, clients[0], "reports/2026-11", 3); err != nil {
				return nil, err
			}
			return []byte(want), nil
		})
		if got := runs.Load(); got != int64(b+1) {
			t.Fatalf("burst %d: the function ran %d times in all, want %d", b, got, b+1)
		}
		ran := 0
		for _, c := range calls {
			if c.err != nil || string(c.val) != want {
				t.Errorf("burst %d: a caller got %q, %v; want %q", b, c.val, c.err, want)
			}
			if !c.shared {
				ran++
			}
		}
		if len(calls) != 32 || ran != 1 {
			t.Errorf("burst %d: %d calls, %d of them not shared; want 32 and 1", b, len(calls), ran)
		}
	}
}

// TestGroupErrorShared: an error fn returns is a result: the callers of
// another Client get its message as a *ResultError, those of the runner's
// own Client the error itself.
func TestGroupErrorShared(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c1, c2 := clientOn(t, srv.Client(t)), clientOn(t, srv.Client(t))
	boom := errors.New("boom")
	var runs atomic.Int64
	calls := burst(t, []*dlock.Group{c1.Group("g"), c2.Group("g")}, 3, "k", func(ctx context.Context) ([]byte, error) {
		runs.Add(1)
		if err := queuedFor(t, c1, "g/k", 1); err != nil {
			return nil, err
		}
		return nil, boom
	})
	if runs.Load() != 1 {
		t.Fatalf("the function ran %d times, want 1", runs.Load())
	}
	own, remote := 0, 0
	for _, call := range calls {
		var re *dlock.ResultError
		switch {
		case errors.Is(call.err, boom):
			own++
		case errors.As(call.err, &re) && re.Msg == "boom" && call.shared:
			remote++
		default:
			t.Errorf("a caller got %q, %v, shared %v", call.val, call.err, call.shared)
		}
	}
	if own != 3 || remote != 3 {
		t.Errorf("%d callers got the error itself and %d its message; want 3 and 3", own, remote)
	}
}

// TestGroupRunnerGivesUp: the runner's callers all leave (their contexts
// end), or its Client is closed, while fn runs: fn's context ends, its
// error is not shared, and the caller next in line runs fn.
func TestGroupRunnerGivesUp(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"callers leave", "Client closed"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			c1, c2 := clientOn(t, srv.Client(t)), clientOn(t, srv.Client(t))
			started := make(chan struct{})
			ctx1, cancel1 := context.WithCancel(context.Background())
			defer cancel1()
			done1 := make(chan error, 1)
			go func() {
				_, _, err := c1.Group("g").Do(ctx1, "k", func(ctx context.Context) ([]byte, error) {
					close(started)
					<-ctx.Done()
					return nil, ctx.Err()
				})
				done1 <- err
			}()
			<-started
			done2 := make(chan groupCall, 1)
			go func() {
				v, shared, err := c2.Group("g").Do(context.Background(), "k", func(ctx context.Context) ([]byte, error) {
					return []byte("second"), nil
				})
				done2 <- groupCall{v, shared, err}
			}()
			if err := queuedFor(t, c1, "g/k", 1); err != nil {
				t.Fatal(err)
			}
			if how == "Client closed" {
				if err := c1.Close(); err != nil {
					t.Fatal(err)
				}
				if err := <-done1; !errors.Is(err, dlock.ErrClosed) {
					t.Errorf("the runner's caller after its Client closed: %v, want ErrClosed", err)
				}
			} else {
				cancel1()
				if err := <-done1; !errors.Is(err, context.Canceled) || !errors.Is(err, dlock.ErrNotAcquired) {
					t.Errorf("the runner's caller: %v, want ErrNotAcquired and context.Canceled", err)
				}
			}
			select {
			case r := <-done2:
				if r.err != nil || string(r.val) != "second" || r.shared {
					t.Errorf("the caller next in line got %q, shared %v, %v; want its own run's value", r.val, r.shared, r.err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the caller next in line did not run the function")
			}
		})
	}
}

// TestGroupLeaseLost: a runner whose lease is lost mid-run shares nothing;
// its process gets in line again, and gets the result of the caller that
// runs fn next.
func TestGroupLeaseLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c1, c2 := clientOn(t, srv.Client(t)), clientOn(t, srv.Client(t))
	started := make(chan struct{})
	start := sync.OnceFunc(func() { close(started) })
	done1 := make(chan groupCall, 1)
	var runs atomic.Int64
	go func() {
		v, shared, err := c1.Group("g", dlock.WithTTL(time.Second)).Do(context.Background(), "k", func(ctx context.Context) ([]byte, error) {
			runs.Add(1)
			start()
			<-ctx.Done()
			return []byte("lost"), nil
		})
		done1 <- groupCall{v, shared, err}
	}()
	<-started
	done2 := make(chan groupCall, 1)
	go func() {
		v, shared, err := c2.Group("g").Do(context.Background(), "k", func(ctx context.Context) ([]byte, error) {
			runs.Add(1)
			return []byte("second"), nil
		})
		done2 <- groupCall{v, shared, err}
	}()
	if err := queuedFor(t, c1, "g/k", 1); err != nil {
		t.Fatal(err)
	}
	// The runner's lease is lost with its key.
	if err := rdb.Del(context.Background(), "dlock:group:{g/k}").Err(); err != nil {
		t.Fatal(err)
	}
	for i, ch := range []chan groupCall{done2, done1} {
		select {
		case r := <-ch:
			if r.err != nil || string(r.val) != "second" || r.shared != (i == 1) {
				t.Errorf("caller %d got %q, shared %v, %v; want the second run's value", 2-i, r.val, r.shared, r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("caller %d did not return", 2-i)
		}
	}
	if runs.Load() != 2 {
		t.Errorf("the function ran %d times, want 2", runs.Load())
	}
}

// TestGroupResultTTL: without WithResultTTL a caller that comes after the
// result runs fn again; with it, it gets the result until the TTL passes.
func TestGroupResultTTL(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	var runs atomic.Int64
	fn := func(ctx context.Context) ([]byte, error) {
		return fmt.Appendf(nil, "run %d", runs.Add(1)), nil
	}
	g := c.Group("nottl")
	if _, _, err := g.Do(ctx, "warm-up", fn); err != nil { // the Client's first use
		t.Fatal(err)
	}
	runs.Store(0)
	rc := countRequests(rdb)
	for i := range 2 {
		v, shared, err := g.Do(ctx, "k", fn)
		if err != nil || shared || string(v) != fmt.Sprintf("run %d", i+1) {
			t.Errorf("call %d without a result TTL: %q, shared %v, %v", i, v, shared, err)
		}
		// Nobody in line: the acquire, the result's write, the release.
		if n := rc.take(); n != 3 {
			t.Errorf("call %d alone sent %d requests, want 3", i, n)
		}
	}
	runs.Store(0)
	g = c.Group("ttl", dlock.WithResultTTL(3*time.Second))
	want := []struct {
		val    string
		shared bool
	}{{"run 1", false}, {"run 1", true}, {"run 2", false}}
	for i, w := range want {
		if i == 2 {
			time.Sleep(3200 * time.Millisecond)
		}
		v, shared, err := g.Do(ctx, "k", fn)
		if err != nil || shared != w.shared || string(v) != w.val {
			t.Errorf("call %d with a result TTL: %q, shared %v, %v; want %q, shared %v", i, v, shared, err, w.val, w.shared)
		}
	}
}

// TestGroupMaxResultLen: a value over the limit is an error for its
// process's callers and is not shared: the caller next in line runs fn.
func TestGroupMaxResultLen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c1, c2 := clientOn(t, srv.Client(t)), clientOn(t, srv.Client(t))
	var runs atomic.Int64
	fn := func(ctx context.Context) ([]byte, error) {
		if runs.Add(1) == 1 {
			if err := queuedFor(t, c1, "g/k", 1); err != nil {
				return nil, err
			}
		}
		return bytes.Repeat([]byte("x"), 11), nil
	}
	// c1's caller runs first; c2's waits behind it.
	calls := make(chan groupCall, 2)
	do := func(g *dlock.Group) {
		v, shared, err := g.Do(context.Background(), "k", fn)
		calls <- groupCall{v, shared, err}
	}
	go do(c1.Group("g", dlock.WithMaxResultLen(10)))
	if err := queuedFor(t, c2, "g/k", 0); err != nil {
		t.Fatal(err)
	}
	go do(c2.Group("g", dlock.WithMaxResultLen(11)))
	ok, tooLong := 0, 0
	for range 2 {
		call := <-calls
		switch {
		case call.err == nil && len(call.val) == 11 && !call.shared:
			ok++
		case call.err != nil && strings.Contains(call.err.Error(), "at most 10 are shared"):
			tooLong++
		default:
			t.Errorf("a caller got %q, shared %v, %v", call.val, call.shared, call.err)
		}
	}
	if ok != 1 || tooLong != 1 || runs.Load() != 2 {
		t.Errorf("%d ran and got the value, %d got the length error, %d runs; want 1, 1, 2", ok, tooLong, runs.Load())
	}
}

// TestGroupBadInput: each mistake is a clear error, nothing panics, and
// nothing is written.
func TestGroupBadInput(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	fn := func(ctx context.Context) ([]byte, error) { return []byte("v"), nil }
	var nilGroup *dlock.Group
	var nilClient *dlock.Client
	cases := []struct {
		name string
		do   func() error
		want string
	}{
		{"nil Group", func() error { _, _, err := nilGroup.Do(ctx, "k", fn); return err }, "nil or zero Group"},
		{"zero Group", func() error { _, _, err := new(dlock.Group).Do(ctx, "k", fn); return err }, "nil or zero Group"},
		{"nil Client", func() error { _, _, err := nilClient.Group("g").Do(ctx, "k", fn); return err }, "nil or zero Client"},
		{"nil context", func() error { _, _, err := c.Group("g").Do(nil, "k", fn); return err }, "nil context"}, //nolint:staticcheck // the mistake under test
		{"nil function", func() error { _, _, err := c.Group("g").Do(ctx, "k", nil); return err }, "nil function"},
		{"empty key", func() error { _, _, err := c.Group("g").Do(ctx, "", fn); return err }, "empty key"},
		{"empty name", func() error { _, _, err := c.Group("").Do(ctx, "k", fn); return err }, "empty name"},
		{"a '/' in the name", func() error { _, _, err := c.Group("a/b").Do(ctx, "k", fn); return err }, "must not contain '/'"},
		{"too long", func() error { _, _, err := c.Group("g").Do(ctx, strings.Repeat("k", dlock.MaxNameLen), fn); return err }, "at most MaxNameLen"},
		{"WithoutRenewal", func() error { _, _, err := c.Group("g", dlock.WithoutRenewal()).Do(ctx, "k", fn); return err }, "WithoutRenewal"},
		{"negative result TTL", func() error { _, _, err := c.Group("g", dlock.WithResultTTL(-1)).Do(ctx, "k", fn); return err }, "negative"},
		{"negative length", func() error { _, _, err := c.Group("g", dlock.WithMaxResultLen(-1)).Do(ctx, "k", fn); return err }, "at least 1 byte"},
		{"zero length", func() error { _, _, err := c.Group("g", dlock.WithMaxResultLen(0)).Do(ctx, "k", fn); return err }, "at least 1 byte"},
		{"a Group's option to a Mutex", func() error { _, err := c.Mutex("m", dlock.WithResultTTL(time.Second)).TryLock(ctx); return err }, "applies to a Group only"},
	}
	for _, tc := range cases {
		err := tc.do()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	// Do within its own function would wait for itself.
	g := c.Group("g")
	_, _, err := g.Do(ctx, "self", func(ctx context.Context) ([]byte, error) {
		_, _, err := g.Do(ctx, "self", fn)
		return nil, err
	})
	if !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "within its own function") {
		t.Errorf("Do within its own function: %v", err)
	}
	if keys := allKeys(t, rdb); len(keys) > 0 && !onlyGroupSelf(keys) {
		t.Errorf("bad input wrote %v", keys)
	}
}

// onlyGroupSelf tells whether keys are those the one valid call of
// TestGroupBadInput (key "self") and its Client's record leave.
func onlyGroupSelf(keys []string) bool {
	for _, k := range keys {
		if !strings.HasPrefix(k, "dlock:group:{g/self}") && !clientRecord(k) {
			return false
		}
	}
	return true
}

// TestGroupUnsupported: on a RedLock Client, and on one made
// WithoutScripts, Do says so, with errors.ErrUnsupported, and sends
// nothing.
func TestGroupUnsupported(t *testing.T) {
	t.Parallel()
	_, rdbs := redLockNodes(t, 3)
	_, rdb, _ := newClient(t)
	for what, c := range map[string]*dlock.Client{"a RedLock Client": redLockOn(t, rdbs), "a Client WithoutScripts": clientOn(t, rdb, dlock.WithoutScripts())} {
		_, _, err := c.Group("g").Do(context.Background(), "k", func(ctx context.Context) ([]byte, error) {
			t.Errorf("fn ran on %s", what)
			return nil, nil
		})
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("Do on %s: %v, want errors.ErrUnsupported", what, err)
		}
	}
	if keys := allKeys(t, rdb); len(keys) > 0 && !onlyClientRecords(keys) {
		t.Errorf("Do on a Client WithoutScripts wrote %v", keys)
	}
}

// onlyClientRecords tells whether keys are all Clients' records.
func onlyClientRecords(keys []string) bool {
	for _, k := range keys {
		if !clientRecord(k) {
			return false
		}
	}
	return true
}

// TestGroupFaults: through the fault proxy, the runner's requests lose
// their replies (go-redis sends them again) or reach Redis late: the
// callers waiting still get the one run's result, and a late copy of a
// runner's share changes nothing.
func TestGroupFaults(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"group_result", "group_share", "acquire", "release"} {
		t.Run("lost reply of "+op, func(t *testing.T) {
			t.Parallel()
			c1, p, direct := proxied(t)
			c2 := clientOn(t, direct)
			in := dropOnce(t, p, op)
			var runs atomic.Int64
			fn := func(ctx context.Context) ([]byte, error) {
				runs.Add(1)
				// The other Client's callers join while this runs.
				if err := queuedFor(t, c2, "g/k", 1); err != nil {
					return nil, err
				}
				return []byte("v"), nil
			}
			// The proxied Client's callers come first: its requests run
			// fn and share the result; but for the read of the result,
			// which only a caller in line makes: then they come second.
			order := []*dlock.Client{c1, c1, c2, c2}
			if op == "group_result" {
				order = []*dlock.Client{c2, c2, c1, c1}
			}
			var mu sync.Mutex
			var calls []groupCall
			var wg sync.WaitGroup
			for i, c := range order {
				if i == 2 {
					if err := queuedFor(t, c2, "g/k", 0); err != nil {
						t.Fatal(err)
					}
				}
				wg.Go(func() {
					v, shared, err := c.Group("g").Do(context.Background(), "k", fn)
					mu.Lock()
					calls = append(calls, groupCall{v, shared, err})
					mu.Unlock()
				})
			}
			wg.Wait()
			checkHit(t, in)
			unshared := 0
			for _, call := range calls {
				if call.err != nil || string(call.val) != "v" {
					t.Errorf("a caller got %q, %v", call.val, call.err)
				}
				if !call.shared {
					unshared++
				}
			}
			if runs.Load() != 1 || unshared != 1 {
				t.Errorf("fn ran %d times, %d callers unshared; want 1 and 1", runs.Load(), unshared)
			}
		})
	}
	t.Run("late share", func(t *testing.T) {
		t.Parallel()
		c1, p, direct := proxied(t)
		c2 := clientOn(t, direct)
		ctx := context.Background()
		// The first copy of the runner's share is held back: its reply
		// never comes, the runner's Redis client gives up on it after its
		// read timeout and sends it again, and the runner releases. A later
		// caller runs fn again and shares its own result; then the held
		// copy reaches Redis.
		in := p.Inject(faultproxy.Rule{Match: script("group_share"), Fault: faultproxy.HoldRequest, Times: 1})
		run := func(c *dlock.Client, v string) {
			t.Helper()
			got, shared, err := c.Group("g").Do(ctx, "k", func(ctx context.Context) ([]byte, error) {
				return []byte(v), nil
			})
			if err != nil || string(got) != v || shared {
				t.Fatalf("a caller alone got %q, shared %v, %v; want its own run's %q", got, shared, err, v)
			}
		}
		run(c1, "first")
		checkHit(t, in)
		run(c2, "second")
		in.Release()
		select {
		case <-in.Delivered():
		case <-time.After(10 * time.Second):
			t.Fatal("the held share never reached Redis")
		}
		if v := direct.HGet(ctx, "dlock:group:{g/k}:result", "v").Val(); v != "second" {
			t.Errorf("after the late share the result is %q, want the second run's", v)
		}
	})
}

// TestGroupNothingLeftBehind: keys used several times leave nothing in
// Redis after the TTL of their runner's lease, or their result TTL if
// longer; a key keeps at most two keys while idle (its free lock and its
// result), whatever the number of calls.
func TestGroupNothingLeftBehind(t *testing.T) {
	t.Parallel()
	c, rdb, _ := newClient(t, dlock.WithTTL(time.Second))
	ctx := context.Background()
	fn := func(ctx context.Context) ([]byte, error) { return []byte("v"), nil }
	short, long := c.Group("short"), c.Group("long", dlock.WithResultTTL(5*time.Second))
	for i := range 100 {
		for _, g := range []*dlock.Group{short, long} {
			for range 3 {
				if _, _, err := g.Do(ctx, fmt.Sprint(i), fn); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	groupKeys := func(name string) []string {
		var ks []string
		for _, k := range allKeys(t, rdb) {
			if strings.HasPrefix(k, "dlock:group:{"+name+"/") {
				ks = append(ks, k)
			}
		}
		return ks
	}
	// Upper bounds, and expiries after the last use: on a loaded machine the
	// loop can outlast the keys it began with.
	if n := len(groupKeys("short")); n > 200 {
		t.Errorf("%d keys for 100 keys used 3 times each, want at most 200 (a free lock and a result each)", n)
	}
	if !within(2*time.Second, func() bool { return len(groupKeys("short")) == 0 }) {
		t.Errorf("%d keys left 2s after the last use, with a TTL of 1s", len(groupKeys("short")))
	}
	results := 0
	for _, k := range groupKeys("long") {
		if strings.HasSuffix(k, ":result") {
			results++
		}
	}
	if n := len(groupKeys("long")); results == 0 || n > 200 {
		t.Errorf("%d keys, %d of them results, of a result TTL of 5s after the lock's TTL; want the results, and at most 200 keys", n, results)
	}
	if !within(5*time.Second, func() bool { return len(groupKeys("long")) == 0 }) {
		t.Errorf("%d keys left 5s after the last use, with a result TTL of 5s", len(groupKeys("long")))
	}
}
