package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// The environment variables the package reads.
const (
	// ServerEnv names the server binary NewServer runs: a name on PATH or
	// a path. Unset or empty: redis-server.
	ServerEnv = "DLOCK_REDIS_SERVER"
	// SkipEnv, set to "1", makes NewServer skip the test, instead of
	// failing it, when the server binary is not installed.
	SkipEnv = "DLOCKTEST_SKIP_WITHOUT_SERVER"
)

// installHint says what to install when no server binary is found.
const installHint = "install Redis 7.0 or later (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) or Valkey (apt-get install valkey-server, then " +
	ServerEnv + "=valkey-server), or set " + ServerEnv + " to the path of a server binary; " +
	SkipEnv + "=1 skips such tests instead"

// Server is a private Redis (or Valkey) server started for one test by
// NewServer, and a dlock Client of it.
type Server struct {
	// Addr is the server's address: 127.0.0.1 and a port that was free.
	Addr string
	// Client is a dlock Client of the server, made with dlock.New and
	// dlock's defaults (TTL 30 s, key prefix "dlock:") over a go-redis
	// client with go-redis's defaults. It is closed when the test ends,
	// before the server stops, which releases what it still holds. A test
	// that needs other options, or a second Client (a rival process, say),
	// makes its own from Addr.
	Client *dlock.Client
}

// NewServer starts a server for the test on a free loopback port, with
// persistence off, and stops it (SIGKILL, so its data is gone) when the
// test ends. It returns once the server answers. The binary is the one
// DLOCK_REDIS_SERVER names, else redis-server on PATH. If it is not
// installed, NewServer fails the test saying what to install, or skips it
// when DLOCKTEST_SKIP_WITHOUT_SERVER is "1". A server older than 7.0, which
// lacks what dlock needs, fails the test.
func NewServer(t testing.TB) *Server {
	if nilT(t, "NewServer") {
		return nil
	}
	t.Helper()
	bin, err := binary()
	if err != nil {
		if os.Getenv(SkipEnv) == "1" {
			t.Skipf("dlocktest.NewServer: %v (skipped: %s=1)", err, SkipEnv)
		}
		t.Fatalf("dlocktest.NewServer: %v", err)
	}
	dir, err := os.MkdirTemp("", "dlocktest-")
	if err != nil {
		t.Fatalf("dlocktest.NewServer: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p, err := launch(bin, dir)
	if err != nil {
		t.Fatalf("dlocktest.NewServer: %v", err)
	}
	t.Cleanup(p.stop)
	rdb := redis.NewClient(&redis.Options{Addr: p.addr})
	c, err := dlock.New(rdb)
	if err != nil {
		_ = rdb.Close()
		t.Fatalf("dlocktest.NewServer: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Logf("dlocktest: closing the Server's Client: %v", err)
		}
		_ = rdb.Close()
	})
	return &Server{Addr: p.addr, Client: c}
}

// binary returns the path of the server binary to run.
func binary() (string, error) {
	name := os.Getenv(ServerEnv)
	if name == "" {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			return "", fmt.Errorf("redis-server was not found on PATH: %s", installHint)
		}
		return bin, nil
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s=%q: %v: %s", ServerEnv, name, err, installHint)
	}
	return bin, nil
}

// process is a server NewServer started.
type process struct {
	addr   string
	cmd    *exec.Cmd
	exited chan struct{}
}

// launch starts bin on a free port, trying another port if the one it
// picked was taken meanwhile.
func launch(bin, dir string) (*process, error) {
	var err error
	for range 5 {
		var p *process
		if p, err = start(bin, dir); err == nil {
			return p, nil
		}
		var old *tooOld
		if errors.As(err, &old) {
			return nil, err
		}
	}
	return nil, err
}

// tooOld is the error of a server older than dlock needs.
type tooOld struct{ version string }

func (e *tooOld) Error() string {
	return fmt.Sprintf("the server is version %s; dlock needs Redis 7.0 or later: %s", e.version, installHint)
}

func start(bin, dir string) (*process, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	logfile := filepath.Join(dir, fmt.Sprintf("server-%d.log", port))
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", logfile)
	dieWithParent(cmd)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()

	rdb := redis.NewClient(&redis.Options{Addr: p.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-p.exited:
			log, _ := os.ReadFile(logfile)
			return nil, fmt.Errorf("%s on port %d exited at start: %s%s", bin, port, out.String(), lastLines(string(log), 5))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := rdb.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			// Another server may answer on the port while ours fails to
			// bind it: only ours counts.
			if field(info, "process_id") != strconv.Itoa(cmd.Process.Pid) {
				err = fmt.Errorf("another server (pid %s) answers on port %d", field(info, "process_id"), port)
			} else if v := field(info, "redis_version"); major(v) < 7 {
				p.stop()
				return nil, &tooOld{v}
			} else {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s on port %d did not answer: %w", bin, port, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stop kills the server and waits for it to exit.
func (p *process) stop() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// field returns the value of name in an INFO reply, "" if absent.
func field(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// major returns the major version in a version string, 0 if unknown.
func major(version string) int {
	s, _, _ := strings.Cut(version, ".")
	n, _ := strconv.Atoi(s)
	return n
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// nilT reports whether t is nil, or a nil pointer in an interface, and if
// so writes why to standard error: there is no test to fail.
func nilT(t testing.TB, fn string) bool {
	if t != nil {
		if v := reflect.ValueOf(t); v.Kind() != reflect.Pointer || !v.IsNil() {
			return false
		}
	}
	fmt.Fprintf(os.Stderr, "dlocktest.%s: nil testing.TB: there is no test to fail, and nothing was done\n", fn)
	return true
}
