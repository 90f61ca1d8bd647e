// Package redistest starts private redis-server processes for tests, examples
// and benchmarks: on a free loopback port, with persistence off, stopped by
// PID. It never uses a server it did not start. LaunchCluster and
// StartCluster form a Redis Cluster of such servers, and fail it over on
// demand.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// InstallHint says how to get redis-server when it is missing.
const InstallHint = "redis-server was not found on PATH; install it (Debian/Ubuntu: apt-get install redis-server, macOS: brew install redis) and run again, or set " + ServerEnv + " to the server to run"

// ServerEnv names the environment variable that chooses the server binary
// the tests run: a name on PATH or a path ("valkey-server", say); by
// default redis-server.
const ServerEnv = "DLOCK_REDIS_SERVER"

// Binary returns the path of the server binary the tests run: the one
// ServerEnv names, else redis-server on PATH.
func Binary() (string, error) {
	name := os.Getenv(ServerEnv)
	if name == "" {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			return "", errors.New(InstallHint)
		}
		return bin, nil
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s=%q: %w", ServerEnv, name, err)
	}
	return bin, nil
}

// Server is one redis-server process started by Launch or Start.
type Server struct {
	Addr     string // host:port on loopback
	Port     int
	Password string // the --requirepass the server was started with, or ""

	args []string
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// Launch starts a redis-server on a free loopback port, with persistence off
// and DEBUG allowed from loopback, plus extra configuration as command-line
// arguments (e.g. "--maxmemory", "1mb"). dir holds its log. It returns once
// the server answers PING. If extra holds "--requirepass", P, the server's
// Password is P, and the readiness check and Options use it.
func Launch(dir string, extra ...string) (*Server, error) {
	return launch(dir, freePort, func(int) []string { return extra })
}

// launch starts a redis-server on a port from pick, with the arguments every
// server gets and then those extra returns for that port. It tries five ports
// before it gives up.
func launch(dir string, pick func() (int, error), extra func(port int) []string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		port, err := pick()
		if err != nil {
			return nil, err
		}
		more := extra(port)
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, Password: requirepass(more), dir: dir}
		s.args = append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no",
			"--dir", dir, "--logfile", filepath.Join(dir, fmt.Sprintf("redis-%d.log", port)),
			"--enable-debug-command", "local",
		}, more...)
		if lastErr = s.start(bin); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// requirepass returns the value of the last "--requirepass" in args, as
// redis-server would use it, or "" if there is none.
func requirepass(args []string) string {
	pass := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--requirepass" {
			pass = args[i+1]
			i++
		}
	}
	return pass
}

// Start is Launch for a test: the server is killed when the test ends, and a
// failure to start fails the test.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s, err := Launch(t.TempDir(), extra...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// StartN starts n independent servers: a RedLock's nodes, which are the
// full tier's (Full).
func StartN(t testing.TB, n int, extra ...string) []*Server {
	t.Helper()
	Full(t, fmt.Sprintf("%d servers", n))
	ss := make([]*Server, n)
	for i := range ss {
		ss[i] = Start(t, extra...)
	}
	return ss
}

// Client returns a go-redis client for s, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	rdb := redis.NewClient(s.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Options returns go-redis options for s: its address, and its password if it
// has one.
func (s *Server) Options() *redis.Options {
	return &redis.Options{Addr: s.Addr, Password: s.Password}
}

// PID returns the server's process id, or 0 if it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Pause stops the server with SIGSTOP: it keeps its connections but answers
// nothing, as a stalled server would.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP, true) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT, false) }

// Kill ends the server with SIGKILL and waits for it to exit. Its data, which
// is in memory only, is gone.
func (s *Server) Kill() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd, s.paused = nil, false
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused process must run to die
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-exited
	return nil
}

// Restart kills the server and starts a new, empty one on the same port.
func (s *Server) Restart() error {
	if err := s.Kill(); err != nil {
		return err
	}
	bin, err := Binary()
	if err != nil {
		return err
	}
	var lastErr error
	for range 50 { // the port may take a moment to be free again
		if lastErr = s.start(bin); lastErr == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return lastErr
}

// Close kills the server.
func (s *Server) Close() error { return s.Kill() }

// signal sends sig to the server and records whether it is now paused.
func (s *Server) signal(sig syscall.Signal, paused bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redistest: server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return err
	}
	s.paused = paused
	return nil
}

// answers reports whether the server is running and not paused, so that
// commands sent to it get replies.
func (s *Server) answers() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil && !s.paused
}

func (s *Server) start(bin string) error {
	cmd := exec.Command(bin, s.args...)
	dieWithParent(cmd)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.Password, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.Port)))
			return fmt.Errorf("redistest: redis-server on port %d exited at start: %s%s", s.Port, out.String(), lastLines(string(log), 5))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		if err == nil {
			// Another server may hold the port while ours is failing to
			// bind it: only ours counts.
			err = samePID(rdb.Info(ctx, "server"), cmd.Process.Pid)
		}
		cancel()
		if err == nil {
			s.mu.Lock()
			s.cmd, s.exited = cmd, exited
			s.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redistest: redis-server on port %d did not answer: %w", s.Port, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// samePID checks that an INFO server reply comes from process pid.
func samePID(info *redis.StringCmd, pid int) error {
	text, err := info.Result()
	if err != nil {
		return err
	}
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if v != strconv.Itoa(pid) {
				return fmt.Errorf("another redis-server (pid %s) answers on the port", v)
			}
			return nil
		}
	}
	return errors.New("INFO server has no process_id")
}

func freePort() (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redistest: find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if claim(port) {
			return port, nil
		}
	}
	return 0, errors.New("redistest: the kernel offered only ports this process has used")
}

// claimed holds every port a server of this process was given. A port is
// never given twice: a server killed to be restarted or to rejoin later
// comes back on its port, which a test running in parallel must not have
// taken meanwhile.
var claimed struct {
	sync.Mutex
	ports map[int]bool
}

// claim reports whether ports were all unclaimed, and if so claims them.
func claim(ports ...int) bool {
	claimed.Lock()
	defer claimed.Unlock()
	for _, p := range ports {
		if claimed.ports[p] {
			return false
		}
	}
	if claimed.ports == nil {
		claimed.ports = make(map[int]bool)
	}
	for _, p := range ports {
		claimed.ports[p] = true
	}
	return true
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
