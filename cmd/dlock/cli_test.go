package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// queued holds the Mutex "job" with one waiter behind it, and leads the
// Election "jobs" with one candidate in line, on a server of its own; it
// returns a Client there and the --redis flag of the commands.
func queued(t *testing.T) (*dlock.Client, []string) {
	t.Helper()
	ctx := context.Background()
	c, rdb, flags := admin(t)
	l, err := c.Mutex("job").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Unlock(ctx) })
	ld, err := c.Election("jobs").Campaign(ctx, "host-a:8080")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ld.Resign(ctx) })
	other := newLockClient(t, rdb)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() { other.Mutex("job").Lock(wctx) })
	wg.Go(func() { other.Election("jobs").Campaign(wctx, "host-b:8080") })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		m, err := c.Inspect(ctx, dlock.KindMutex, "job")
		if err != nil {
			t.Fatal(err)
		}
		e, err := c.Inspect(ctx, dlock.KindElection, "jobs")
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Waiters) == 1 && len(e.Waiters) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiters: Mutex %+v, Election %+v; want one each", m.Waiters, e.Waiters)
		}
	}
	return c, flags
}

// TestFlagsAnywhere: every command takes its flags after its positional
// arguments as well as before, as people type them; "--" still ends the
// flags, and a flag the command does not know, or a value missing, is still
// a usage error that names it.
func TestFlagsAnywhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, flags := queued(t)
	if err := c.Semaphore("pool", 3).SetPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	cmd := func(args ...string) (string, error) {
		t.Helper()
		return runCmd(t, "", args...)
	}
	after := func(args ...string) []string { return append(args, flags...) }

	out, err := cmd(after("inspect", "job", "-json", "--kind", "Mutex")...)
	var st dlock.LockState
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.Name != "job" || st.Kind != dlock.KindMutex {
		t.Errorf("inspect job -json --kind Mutex --redis …: %v\n%s", err, out)
	}
	out, err = cmd(after("ls", "jo*", "-json")...)
	if err != nil || !strings.HasPrefix(out, "{") || !strings.Contains(out, `"name":"job"`) {
		t.Errorf("ls jo* -json --redis …: %v\n%s", err, out)
	}
	out, err = cmd(after("leader", "jobs", "-json")...)
	var el struct {
		Leader     *struct{ Owner string }
		Candidates []struct{ Owner string }
	}
	if err != nil || json.Unmarshal([]byte(out), &el) != nil || el.Leader == nil || len(el.Candidates) != 1 {
		t.Errorf("leader jobs -json --redis …: %v\n%s", err, out)
	}
	out, err = cmd(after("permits", "pool", "4")...)
	if err != nil || !strings.Contains(out, "total set to 4") {
		t.Errorf("permits pool 4 --redis …: %v\n%s", err, out)
	}
	out, err = cmd(after("release", "free", "--force", "-y")...)
	if err != nil || !strings.Contains(out, "nothing to release") {
		t.Errorf("release free --force -y --redis …: %v\n%s", err, out)
	}
	// watch runs until its context ends; piped, it prints the lock's state.
	wctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(wctx, after("watch", "job", "--interval", "20ms"), nil, pw, io.Discard)
		pw.Close()
	}()
	line, _ := bufio.NewReader(pr).ReadString('\n')
	cancel()
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil || !strings.Contains(line, "holders=") || !strings.Contains(line, "waiters=1") {
		t.Errorf("watch job --interval 20ms --redis …: %v, printed %q", err, line)
	}

	// After "--" everything is a name, also what starts with '-'.
	if _, err := cmd(append(append([]string{"inspect"}, flags...), "--", "-json")...); err == nil || !strings.Contains(err.Error(), `a lock named "-json"`) {
		t.Errorf("inspect --redis … -- -json: %v, want it to look for a lock named -json", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{after("inspect", "job", "-bogus"), "-bogus"},
		{after("ls", "*", "--bogus=1"), "-bogus"},
		{append(after("inspect", "job"), "--kind"), "needs an argument: -kind"},
		{after("inspect", "job", "other"), `want one NAME, got ["job" "other"]`},
		{after("permits", "pool", "-2"), "-2"},
		{[]string{"demo", "--procs", "2", "extra"}, `unexpected argument "extra"`},
	} {
		_, err := cmd(tc.args...)
		if _, ok := errors.AsType[*usageError](err); !ok || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
	if out, err := cmd("ls", "-h"); err != nil || !strings.Contains(out, "Usage: dlock ls") {
		t.Errorf("ls -h: %v\n%s", err, out)
	}
}

// TestFlagsFirst: the flags of a command line are put before its
// positional arguments as the flag package reads them.
func TestFlagsFirst(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Bool("json", false, "")
	fs.String("kind", "", "")
	for _, tc := range []struct{ in, want []string }{
		{[]string{"a", "-json", "--kind", "Mutex", "b"}, []string{"-json", "--kind", "Mutex", "--", "a", "b"}},
		{[]string{"--kind=Mutex", "a", "-json=false"}, []string{"--kind=Mutex", "-json=false", "--", "a"}},
		{[]string{"a", "--", "-json", "--kind"}, []string{"--", "a", "-json", "--kind"}},
		{[]string{"--kind", "--", "a"}, []string{"--kind", "--", "--", "a"}}, // "--" as kind's value, as fs.Parse reads it
		{[]string{"-", "-x", "a"}, []string{"-x", "--", "-", "a"}},
		{[]string{"a", "--kind"}, []string{"--kind"}},
		{nil, []string{"--"}},
	} {
		if got := flagsFirst(fs, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("flagsFirst(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestJSONMilliseconds: every -json output gives each duration as a whole
// number of milliseconds, in a field whose name ends in _ms; no other number
// is a duration.
func TestJSONMilliseconds(t *testing.T) {
	t.Parallel()
	_, flags := queued(t)
	// The numbers that are not durations.
	counts := []string{"fence", "term", "queued", "holds", "permits", "used", "count"}
	var check func(path string, v any) int
	check = func(path string, v any) (durations int) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				n, isNum := x.(float64)
				switch {
				case strings.HasSuffix(k, "_ms"):
					// The TTLs here are the default 30 s, and a waiter's
					// registration a part of it.
					if !isNum || n != float64(int64(n)) || n <= 0 || n > 30_000 {
						t.Errorf("%s.%s = %v: want whole milliseconds, at most 30000", path, k, x)
					}
					durations++
				case isNum && !slices.Contains(counts, k):
					t.Errorf("%s.%s = %v: a number that is no count, not in a field named …_ms", path, k, x)
				default:
					durations += check(path+"."+k, x)
				}
			}
		case []any:
			for _, x := range v {
				durations += check(path+"[]", x)
			}
		}
		return durations
	}
	for _, args := range [][]string{
		{"ls", "-json"},
		{"inspect", "-json", "job"},
		{"inspect", "-json", "jobs"},
		{"leader", "-json", "jobs"},
	} {
		out, err := runCmd(t, "", append(append([]string{args[0]}, flags...), args[1:]...)...)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		durations := 0
		for line := range strings.Lines(out) {
			var v any
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatalf("%q printed %q: %v", args, line, err)
			}
			durations += check(args[0], v)
		}
		// A holder and a waiter of each lock (the leader and a candidate).
		if want := 2 * strings.Count(out, "\n"); durations != want {
			t.Errorf("%q: %d durations in fields named …_ms, want %d:\n%s", args, durations, want, out)
		}
	}
}

// TestRegistrationColumn: the column of the time a waiter's registration
// has left says so, in inspect and in leader.
func TestRegistrationColumn(t *testing.T) {
	t.Parallel()
	_, flags := queued(t)
	for _, args := range [][]string{{"inspect", "job"}, {"leader", "jobs"}} {
		out, err := runCmd(t, "", append(append([]string{args[0]}, flags...), args[1:]...)...)
		if err != nil || !strings.Contains(out, "REGISTRATION LEFT") || strings.Contains(out, "REGISTERED") {
			t.Errorf("%q: %v, want a column REGISTRATION LEFT:\n%s", args, err, out)
		}
	}
}

// TestNoPassword: every command, refused by a Redis that wants a password
// it was not given, says so and how to give one.
func TestNoPassword(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "sesame")
	url := "redis://" + srv.Addr
	t.Setenv("REDIS_USERNAME", "")
	t.Setenv("REDIS_PASSWORD", "")
	for _, args := range [][]string{
		{"ls"}, {"inspect", "x"}, {"watch", "x"}, {"leader", "x"}, {"permits", "x"}, {"permits", "x", "3"},
		{"release", "--force", "-y", "x"},
	} {
		_, err := runCmd(t, "", append([]string{args[0], "--redis", url}, args[1:]...)...)
		if err == nil || !strings.Contains(err.Error(), "dlock "+args[0]+": Redis refuses the connection: no password or a wrong one") ||
			!strings.Contains(err.Error(), "REDIS_PASSWORD") || !strings.Contains(err.Error(), "redis://:PASSWORD@") || exitCode(err, io.Discard) != 1 {
			t.Errorf("%q without a password: %v (exit status %d), want it to name REDIS_PASSWORD and redis://:PASSWORD@", args, err, exitCode(err, io.Discard))
		}
	}
	// watch of a kind given goes on looking, and prints the failure once.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"watch", "--kind", "Mutex", "--interval", "20ms", "--redis", url, "x"}, nil, &out, io.Discard); err != nil ||
		strings.Count(out.String(), "error: Redis refuses the connection") != 1 || !strings.Contains(out.String(), "REDIS_PASSWORD") {
		t.Errorf("watch --kind Mutex without a password: %v\n%s", err, &out)
	}
	// The demo reads the password from its URL only.
	_, err := runCmd(t, "", "demo", "--redis", url)
	if err == nil || !strings.Contains(err.Error(), "dlock demo: Redis at "+srv.Addr+" refuses the connection") ||
		!strings.Contains(err.Error(), "redis://:PASSWORD@") || strings.Contains(err.Error(), "REDIS_PASSWORD") {
		t.Errorf("demo without a password: %v", err)
	}
	// A wrong password says so too, with Redis's words.
	t.Setenv("REDIS_PASSWORD", "wrong")
	if _, err := runCmd(t, "", "ls", "--redis", url); err == nil || !strings.Contains(err.Error(), "REDIS_PASSWORD") || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("ls with a wrong password: %v", err)
	}
}

// TestPermitsNoTotal: permits of a Semaphore Redis keeps no total of is an
// answer, as leader's "nobody leads": it says so and exits 0, writing
// nothing.
func TestPermitsNoTotal(t *testing.T) {
	t.Parallel()
	_, rdb, flags := admin(t)
	out, err := runCmd(t, "", append(append([]string{"permits"}, flags...), "nothing")...)
	if err != nil || exitCode(err, io.Discard) != 0 || !strings.Contains(out, `Semaphore "nothing": no total under the prefix "dlock:"`) ||
		!strings.Contains(out, "dlock permits nothing N") {
		t.Errorf("permits of a Semaphore Redis holds nothing of: %v (exit status %d)\n%s", err, exitCode(err, io.Discard), out)
	}
	if n := rdb.DBSize(t.Context()).Val(); n != 0 {
		t.Errorf("%d keys written by reading a total: %q", n, rdb.Keys(t.Context(), "*").Val())
	}
}

// TestDemoLeavesNoKeys: the demo, run on a Redis of the user's (here a
// server of the test's own), leaves no key behind, as it says it does: not
// the sale's, not the locks', not the order ids' generator's (whose state
// would otherwise live a day); nor when it is interrupted mid-sale.
func TestDemoLeavesNoKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	demo := func(ctx context.Context, args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		err := run(ctx, append([]string{"demo", "--redis", "redis://" + srv.Addr, "--procs", "2", "--workers", "2"}, args...), nil, &stdout, &stderr)
		if keys := rdb.Keys(t.Context(), "*").Val(); len(keys) != 0 {
			t.Errorf("demo %q: %v; keys left after it: %q\nstdout:\n%s", args, err, keys, &stdout)
		}
		return stdout.String(), err
	}
	out, err := demo(t.Context(), "--vouchers", "10", "--buyers", "40")
	if err != nil || !strings.Contains(out, "are deleted at the end") {
		t.Errorf("demo: %v, want it to say its keys are deleted at the end:\n%s", err, out)
	}
	// Interrupted once the first sale has begun (its clicks are counted),
	// long before its 300,000 clicks are made.
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		defer cancel()
		for ctx.Err() == nil {
			if keys := rdb.Keys(ctx, "*:clicks").Val(); len(keys) > 0 {
				if n, _ := rdb.Get(ctx, keys[0]).Int64(); n > 0 {
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	if _, err := demo(ctx, "--strategies", "script,dlock", "--buyers", "100000"); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "interrupted during script") {
		t.Errorf("interrupted demo: %v, want it to say it was interrupted during the script strategy", err)
	}
}
