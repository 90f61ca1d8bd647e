package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// admin starts a redis-server and returns a dlock Client on it, and the
// --redis flag of the commands.
func admin(t *testing.T, opts ...dlock.Option) (*dlock.Client, *redis.Client, []string) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	return newLockClient(t, rdb, opts...), rdb, []string{"--redis", "redis://" + srv.Addr}
}

func newLockClient(t *testing.T, rdb redis.UniversalClient, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// runCmd runs the dlock command args with stdin, and returns what it
// printed.
func runCmd(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	out, _, err := runCmdErr(t, stdin, args...)
	return out, err
}

// runCmdErr runs the dlock command args with stdin, and returns what it
// printed on stdout and on stderr.
func runCmdErr(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(t.Context(), args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), err
}

// owner returns the owner id of the one holder of kind's lock name.
func owner(t *testing.T, c *dlock.Client, kind dlock.Kind, name string) string {
	t.Helper()
	s, err := c.Inspect(context.Background(), kind, name)
	if err != nil || len(s.Holders) != 1 {
		t.Fatalf("inspect %s %q: %v %+v", kind, name, err, s)
	}
	return s.Holders[0].Owner
}

// TestLs: one line per lock, each kind with its holders, waiters and fence,
// filtered by the pattern; -json gives the same locks as objects.
func TestLs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _, flags := admin(t)
	m, err := c.Mutex("order:1").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(ctx)
	s, err := c.Semaphore("pool", 3).Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unlock(ctx)
	if _, err := c.CountDownLatch("batch").TrySetCount(ctx, 4); err != nil {
		t.Fatal(err)
	}
	out, err := runCmd(t, "", append([]string{"ls"}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "KIND") {
		t.Fatalf("ls printed:\n%s", out)
	}
	want := map[string][]string{
		"CountDownLatch": {"batch", "count 4"},
		"Mutex":          {"order:1", owner(t, c, dlock.KindMutex, "order:1"), itoa(m.Fence())},
		"Semaphore":      {"pool", "(2)", "(2/3 permits)", itoa(s.Fence())},
	}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		for _, w := range want[f[0]] {
			if !strings.Contains(line, w) {
				t.Errorf("ls line %q lacks %q", line, w)
			}
		}
		delete(want, f[0])
	}
	if len(want) > 0 {
		t.Errorf("ls listed no %v:\n%s", want, out)
	}
	out, err = runCmd(t, "", append([]string{"ls", "-json"}, append(flags, "order:*")...)...)
	if err != nil {
		t.Fatal(err)
	}
	var st dlock.LockState
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Name != "order:1" || len(st.Holders) != 1 || st.Holders[0].Fence != m.Fence() {
		t.Errorf("ls -json order:* printed %q (%v)", out, err)
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestInspectCommand: holders, re-entries and waiters for people, and -json
// for programs; a name nothing is held under is an error.
func TestInspectCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, flags := admin(t)
	l, err := c.Mutex("job").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	lctx, done := l.Context(ctx)
	defer done()
	if _, err := c.Mutex("job").Lock(lctx); err != nil {
		t.Fatal(err)
	}
	waiter := newLockClient(t, rdb, dlock.WithClientName("queue-worker-2"))
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { waiter.Mutex("job").Lock(wctx) })
	for rdb.ZCard(ctx, "dlock:{job}:waiters").Val() != 1 {
		time.Sleep(5 * time.Millisecond)
	}
	out, err := runCmd(t, "", append([]string{"inspect"}, append(flags, "job")...)...)
	if err != nil {
		t.Fatal(err)
	}
	// Each owner id is followed by its Client's name (WithClientName's, or
	// host:pid).
	for _, w := range []string{`Mutex "job"`, owner(t, c, dlock.KindMutex, "job") + "@" + c.Name(), "@" + waiter.Name(), "x2", itoa(l.Fence()), "waiters  1 queued", "ago"} {
		if !strings.Contains(out, w) {
			t.Errorf("inspect printed no %q:\n%s", w, out)
		}
	}
	out, err = runCmd(t, "", append([]string{"inspect", "-json", "--kind", "mutex"}, append(flags, "job")...)...)
	var st dlock.LockState
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.Holders[0].Holds != 2 || len(st.Waiters) != 1 || st.Holders[0].ClientName != c.Name() {
		t.Errorf("inspect -json: %v\n%s", err, out)
	}
	if _, err := runCmd(t, "", append([]string{"inspect"}, append(flags, "nothing")...)...); err == nil || !strings.Contains(err.Error(), "holds nothing") {
		t.Errorf("inspect of nothing: %v", err)
	}
	var ue *usageError
	if _, err := runCmd(t, "", append([]string{"inspect", "--kind", "spin"}, append(flags, "job")...)...); !errors.As(err, &ue) {
		t.Errorf("inspect --kind spin: %v, want a usage error", err)
	}
}

// fencedStore takes writes only with a fence at least the highest it has
// seen, as a resource a lock's fence protects does.
type fencedStore struct {
	mu      sync.Mutex
	highest int64
}

func (s *fencedStore) write(fence int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.highest {
		return false
	}
	s.highest = fence
	return true
}

// TestReleaseCommand: without --force nothing happens; asked, "n" (or no
// answer) keeps the lock and exits with status 1; "y" takes it from the stuck holder and hands it to the waiter, whose
// fenced writes then make the resource reject the evicted holder's; the
// evicted holder's Done closes at its next renewal.
func TestReleaseCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, flags := admin(t, dlock.WithTTL(600*time.Millisecond))
	store := &fencedStore{}
	stuck, err := c.Mutex("stuck").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store.write(stuck.Fence())
	waiter := newLockClient(t, rdb)
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := waiter.Mutex("stuck").Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	for rdb.ZCard(ctx, "dlock:{stuck}:waiters").Val() != 1 {
		time.Sleep(5 * time.Millisecond)
	}
	var ue *usageError
	if _, err := runCmd(t, "", append([]string{"release"}, append(flags, "stuck")...)...); !errors.As(err, &ue) {
		t.Errorf("release without --force: %v, want a usage error", err)
	}
	for _, answer := range []string{"n\n", "", "maybe\n"} {
		out, err := runCmd(t, answer, append([]string{"release", "--force"}, append(flags, "stuck")...)...)
		if err == nil || !strings.Contains(out, "[y/N]") || !strings.Contains(err.Error(), "not released") || exitCode(err, io.Discard) != 1 {
			t.Errorf("release answered %q: %v (exit status %d), want status 1 saying it was not released\n%s", answer, err, exitCode(err, io.Discard), out)
		}
		if err := stuck.Err(); err != nil {
			t.Fatalf("the holder after the answer %q: %v", answer, err)
		}
	}
	stuckOwner := owner(t, c, dlock.KindMutex, "stuck")
	out, err := runCmd(t, "y\n", append([]string{"release", "--force"}, append(flags, "stuck")...)...)
	if err != nil || !strings.Contains(out, "evicted "+stuckOwner) {
		t.Fatalf("release answered y: %v\n%s", err, out)
	}
	var l *dlock.Lease
	select {
	case l = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not given the lock")
	}
	if l == nil {
		t.FailNow()
	}
	defer l.Unlock(ctx)
	if !store.write(l.Fence()) || store.write(stuck.Fence()) {
		t.Errorf("fences: new holder %d, evicted %d: the resource took the evicted holder's write", l.Fence(), stuck.Fence())
	}
	if !strings.Contains(out, "evicted") || !strings.Contains(out, itoa(stuck.Fence())) {
		t.Errorf("release printed:\n%s", out)
	}
	select {
	case <-stuck.Done():
		if !errors.Is(stuck.Err(), dlock.ErrLockLost) {
			t.Errorf("evicted lease's Err = %v", stuck.Err())
		}
	case <-time.After(2 * time.Second):
		t.Error("the evicted holder's Done did not close")
	}
	out, err = runCmd(t, "", append([]string{"release", "--force", "-y"}, append(flags, "free")...)...)
	if err != nil || !strings.Contains(out, "nothing to release") {
		t.Errorf("release of a free lock: %v\n%s", err, out)
	}
}

// TestWatchPiped: piped, watch prints a line when the lock changes hands,
// counting the hand-offs it sees.
func TestWatchPiped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, flags := admin(t)
	other := newLockClient(t, rdb)
	pr, pw := io.Pipe()
	wctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(wctx, append([]string{"watch", "--kind", "Mutex", "--interval", "20ms"}, append(flags, "w")...), nil, pw, io.Discard)
		pw.Close()
	}()
	// Every line watch prints, in order, until the test stops reading; the
	// rest is drained, so that watch is never blocked on the pipe.
	printed, stop := make(chan string), make(chan struct{})
	go func() {
		defer close(printed)
		lines := bufio.NewScanner(pr)
		for lines.Scan() {
			select {
			case printed <- lines.Text():
			case <-stop:
			}
		}
	}()
	// next skips the lines printed before the state changed (a line whose
	// rate changed, or printed just before the Lock or Unlock that follows
	// it) and returns the first that shows all of want.
	next := func(want ...string) string {
		t.Helper()
		timeout := time.After(5 * time.Second)
		last := ""
		for {
			select {
			case line, ok := <-printed:
				if !ok {
					t.Fatalf("watch ended; its last line %q", last)
				}
				if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(line, w) }) {
					return line
				}
				last = line
			case <-timeout:
				t.Fatalf("watch printed no line with %q within 5s; its last %q", want, last)
			}
		}
	}
	next("holders=-", "handoffs=0")
	l, err := c.Mutex("w").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next("holders="+owner(t, c, dlock.KindMutex, "w"), itoa(l.Fence()), "handoffs=1")
	l.Unlock(ctx)
	next("holders=-")
	l2, err := other.Mutex("w").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next("holders="+owner(t, c, dlock.KindMutex, "w"), "handoffs=2")
	l2.Unlock(ctx)
	next("holders=-")
	close(stop)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch: %v", err)
	}
}

// TestWatchTerminal: in a terminal (a tmux pane), watch redraws its view in
// place as the lock changes hands.
func TestWatchTerminal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, flags := admin(t)
	screen := watchPane(t, append(append([]string{"--interval", "50ms"}, flags...), "tmux-lock")...)
	screen(`Mutex "tmux-lock"`, "holders  none: free", "hand-offs: 0 seen")
	l, err := c.Mutex("tmux-lock").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := owner(t, c, dlock.KindMutex, "tmux-lock")
	screen(first, itoa(l.Fence()), "hand-offs: 1 seen")
	other := newLockClient(t, rdb)
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, _ := other.Mutex("tmux-lock").Lock(ctx)
		got <- l
	}()
	screen("waiters  1 queued")
	l.Unlock(ctx)
	l2 := <-got
	if l2 == nil {
		t.Fatal("the waiter did not get the lock")
	}
	defer l2.Unlock(ctx)
	s := screen(itoa(l2.Fence()), "hand-offs: 2 seen", "waiters  none")
	if strings.Contains(s, first) {
		t.Errorf("the pane still shows the first holder:\n%s", s)
	}
	if n := strings.Count(s, "dlock watch"); n != 1 {
		t.Errorf("the view is drawn %d times on the screen, want once, in place:\n%s", n, s)
	}
}

// watchPane runs dlock watch with args in a terminal, a tmux pane 120
// columns wide and 30 lines high, and returns a function that waits until the
// pane shows each of want at once, and returns what it shows. The command is
// this test binary, which TestMain makes behave as dlock.
func watchPane(t *testing.T, args ...string) (screen func(want ...string) string) {
	t.Helper()
	redistest.Full(t, "a terminal, tmux")
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatal("tmux is needed to test watch in a terminal (apt-get install tmux)")
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "tmux.sock")
	const session = "watch"
	tm := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tmux, append([]string{"-S", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	cmd := append([]string{"env", workerEnv + "=1", bin, "watch"}, args...)
	tm("new-session", "-d", "-s", session, "-x", "120", "-y", "30", strings.Join(cmd, " ")+"; sleep 60")
	t.Cleanup(func() { exec.Command(tmux, "-S", sock, "kill-server").Run() })
	return func(want ...string) string {
		t.Helper()
		var s string
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			s = tm("capture-pane", "-p", "-t", session)
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(s, w)
			}
			if ok {
				return s
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("the pane never showed %q; it shows:\n%s", want, s)
		return ""
	}
}

// TestConnect: the commands reach a Cluster (--cluster), a Sentinel set-up
// (--master) and a server that wants a password (REDIS_PASSWORD), and say
// clearly when they cannot.
func TestConnect(t *testing.T) {
	ctx := context.Background()
	lsHas := func(t *testing.T, want string, args ...string) {
		t.Helper()
		out, err := runCmd(t, "", append([]string{"ls"}, args...)...)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("ls %v: %v\n%s", args, err, out)
		}
	}
	t.Run("Cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3, 0)
		c := newLockClient(t, cl.Client(t))
		for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
			l, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Unlock(ctx)
		}
		out, err := runCmd(t, "", "ls", "--cluster", "--redis", strings.Join(cl.Addrs(), ","))
		if err != nil || strings.Count(out, "\nMutex") != 6 {
			t.Errorf("ls on a Cluster: %v\n%s", err, out)
		}
	})
	t.Run("Sentinel", func(t *testing.T) {
		s := redistest.StartSentinel(t, 1, 1)
		c := newLockClient(t, s.Client(t))
		l, err := c.Mutex("s").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
		lsHas(t, "Mutex", "--master", redistest.SentinelMaster, "--redis", strings.Join(s.SentinelAddrs(), ","))
	})
	t.Run("Password", func(t *testing.T) {
		srv := redistest.Start(t, "--requirepass", "sesame")
		c := newLockClient(t, srv.Client(t))
		l, err := c.Mutex("p").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
		t.Setenv("REDIS_PASSWORD", "wrong")
		if _, err := runCmd(t, "", "ls", "--redis", "redis://"+srv.Addr); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("ls with a wrong password: %v", err)
		}
		t.Setenv("REDIS_PASSWORD", "sesame")
		lsHas(t, "Mutex", "--redis", "redis://"+srv.Addr)
	})
	t.Run("Unreachable", func(t *testing.T) {
		_, err := runCmd(t, "", "inspect", "--timeout", "200ms", "--redis", "redis://127.0.0.1:1", "x")
		if err == nil || !strings.Contains(err.Error(), "inspect") {
			t.Errorf("inspect of an unreachable Redis: %v", err)
		}
	})
}

// TestPrefixFromEnv: DLOCK_PREFIX sets --prefix for every command, which a
// --prefix given overrides; a command that finds nothing says under which
// prefix it looked.
func TestPrefixFromEnv(t *testing.T) {
	ctx := context.Background()
	c, _, flags := admin(t, dlock.WithPrefix("app:"))
	l, err := c.Mutex("job").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	t.Setenv("DLOCK_PREFIX", "")
	out, errOut, err := runCmdErr(t, "", append([]string{"ls"}, flags...)...)
	if err != nil || strings.Contains(out, "job") || !strings.Contains(errOut, `nothing under the prefix "dlock:" matches "*"`) {
		t.Errorf("ls without the Clients' prefix: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if _, err := runCmd(t, "", append([]string{"inspect"}, append(flags, "job")...)...); err == nil || !strings.Contains(err.Error(), `under the prefix "dlock:"`) {
		t.Errorf("inspect without the Clients' prefix: %v", err)
	}

	t.Setenv("DLOCK_PREFIX", "app:")
	out, err = runCmd(t, "", append([]string{"ls"}, flags...)...)
	if err != nil || !strings.Contains(out, "job") {
		t.Errorf("ls with DLOCK_PREFIX=app:: %v\n%s", err, out)
	}
	out, err = runCmd(t, "", append([]string{"inspect"}, append(flags, "job")...)...)
	if err != nil || !strings.Contains(out, itoa(l.Fence())) {
		t.Errorf("inspect with DLOCK_PREFIX=app:: %v\n%s", err, out)
	}
	out, err = runCmd(t, "", append([]string{"ls", "--prefix", "other:"}, flags...)...)
	if err != nil || strings.Contains(out, "job") {
		t.Errorf("ls --prefix other: with DLOCK_PREFIX=app:: %v\n%s", err, out)
	}
	out, err = runCmd(t, "", "ls", "-h")
	if err != nil || !strings.Contains(out, "DLOCK_PREFIX") {
		t.Errorf("ls -h does not name DLOCK_PREFIX: %v\n%s", err, out)
	}
}

// TestEmptyName: a command about one lock given the empty name says so, as a
// usage error, before it reaches Redis.
func TestEmptyName(t *testing.T) {
	t.Parallel()
	_, _, flags := admin(t)
	for _, args := range [][]string{{"inspect", ""}, {"watch", ""}, {"release", "--force", "-y", ""}, {"permits", ""}, {"permits", "", "3"}} {
		args = append(append([]string{args[0]}, flags...), args[1:]...)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		var out bytes.Buffer
		err := run(ctx, args, strings.NewReader(""), &out, io.Discard)
		cancel()
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "empty NAME") {
			t.Errorf("%q: %v, want a usage error saying the name is empty\n%s", args, err, out.String())
		}
	}
}

// TestPermitsCommand: dlock permits NAME prints a Semaphore's total and use;
// dlock permits NAME N sets the total for every process at once, waking a
// waiter that now fits; bad input is a usage error and writes nothing.
func TestPermitsCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, flags := admin(t)
	held, err := c.Semaphore("pool", 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	other := newLockClient(t, rdb)
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := other.Semaphore("pool", 5).Acquire(ctx, 2) // more than the total 1: waits for it to be raised
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	for rdb.ZCard(ctx, "dlock:sem:{pool}:waiters").Val() != 1 {
		time.Sleep(5 * time.Millisecond)
	}
	permits := func(args ...string) (string, error) {
		return runCmd(t, "", append(append([]string{"permits"}, flags...), args...)...)
	}
	out, err := permits("pool")
	if err != nil || !strings.Contains(out, `Semaphore "pool": 1 of 1 permits in use, 1 waiter queued`) {
		t.Errorf("permits pool: %v\n%s", err, out)
	}
	out, err = permits("pool", "3")
	if err != nil || !strings.Contains(out, "total set to 3 for every process (it was 1)") {
		t.Errorf("permits pool 3: %v\n%s", err, out)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		defer l.Release(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter for 2 permits not served after the total was raised to 3")
	}
	if v, err := rdb.Get(ctx, "dlock:sem:{pool}:total").Result(); err != nil || v != "3" {
		t.Errorf("total in Redis: %q, %v; want 3", v, err)
	}
	out, err = permits("pool")
	if err != nil || !strings.Contains(out, `Semaphore "pool": 3 of 3 permits in use, 0 waiters queued`) {
		t.Errorf("permits pool after the raise: %v\n%s", err, out)
	}
	var ue *usageError
	for _, bad := range [][]string{{"pool", "0"}, {"pool", "-2"}, {"pool", "x"}, {"pool", "3", "4"}, {}} {
		if _, err := permits(bad...); !errors.As(err, &ue) {
			t.Errorf("permits %q: %v, want a usage error", bad, err)
		}
	}
	if out, err := permits("pool", "9007199254740993"); err == nil {
		t.Errorf("permits pool 2^53+1: no error\n%s", out)
	}
	if v, _ := rdb.Get(ctx, "dlock:sem:{pool}:total").Result(); v != "3" {
		t.Errorf("total in Redis after bad input: %q, want 3", v)
	}
}

// TestTLS: a lock held through a TLS connection to a server whose
// certificate a private CA signed, and which asks for client certificates,
// is listed and force-released by the commands over TLS, given by a
// rediss:// URL or by --tls-* flags with host:port. Without the CA the
// command fails saying to give it; a half-given client certificate is a
// usage error.
func TestTLS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts := redistest.StartTLSFiles(t, true)
	rdb := redis.NewClient(&redis.Options{Addr: ts.Addr, TLSConfig: ts.Config})
	t.Cleanup(func() { rdb.Close() })
	c := newLockClient(t, rdb, dlock.WithTTL(2*time.Second)) // renewed, so told of the release, every 2/3 s
	l, err := c.Mutex("over-tls").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holder := owner(t, c, dlock.KindMutex, "over-tls")
	certs := []string{"--tls-ca-cert", ts.CAFile, "--tls-cert", ts.CertFile, "--tls-key", ts.KeyFile}
	for _, redisFlag := range []string{"rediss://" + ts.Addr, ts.Addr} {
		args := append([]string{"ls", "--redis", redisFlag}, certs...)
		out, err := runCmd(t, "", args...)
		if err != nil || !strings.Contains(out, "over-tls") || !strings.Contains(out, holder) {
			t.Errorf("dlock %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	// A host that does not trust the CA is told what to give.
	_, err = runCmd(t, "", "ls", "--redis", "rediss://"+ts.Addr, "--tls-cert", ts.CertFile, "--tls-key", ts.KeyFile)
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); !ok || !strings.Contains(err.Error(), "--tls-ca-cert FILE") {
		t.Errorf("ls without the CA: %v, want the unknown authority and the --tls-ca-cert hint", err)
	}
	// --tls-insecure skips the check (the server still wants a certificate).
	if _, err := runCmd(t, "", "ls", "--redis", ts.Addr, "--tls-insecure", "--tls-cert", ts.CertFile, "--tls-key", ts.KeyFile); err != nil {
		t.Errorf("ls --tls-insecure: %v", err)
	}
	// A server that asks for a client certificate refuses a client without.
	if _, err := runCmd(t, "", "ls", "--redis", ts.Addr, "--tls-ca-cert", ts.CAFile); err == nil {
		t.Error("ls without a client certificate succeeded on a server that asks for one")
	}
	var ue *usageError
	for _, half := range [][]string{{"--tls-cert", ts.CertFile}, {"--tls-key", ts.KeyFile}} {
		_, err := runCmd(t, "", append([]string{"ls", "--redis", ts.Addr}, half...)...)
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "go together") {
			t.Errorf("ls %v: %v, want a usage error", half, err)
		}
	}
	if _, err := runCmd(t, "", "ls", "--redis", ts.Addr, "--tls-ca-cert", filepath.Join(t.TempDir(), "none.pem")); !errors.As(err, &ue) {
		t.Errorf("ls with a missing CA file: %v, want a usage error", err)
	}

	// The lock is released over TLS as by any connection: its holder hears.
	args := append([]string{"release", "--force", "-y", "--redis", "rediss://" + ts.Addr}, append(certs, "over-tls")...)
	if out, err := runCmd(t, "", args...); err != nil {
		t.Fatalf("dlock %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder of a lock released over TLS was not told")
	}
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Errorf("the released holder's Err: %v, want ErrLockLost", l.Err())
	}
}
