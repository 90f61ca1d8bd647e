package main

// The etcd section: dlock beside etcd's client/v3/concurrency package, on
// a private single-member etcd that the section starts itself (once with
// etcd's defaults, fsync on, and once with --unsafe-no-fsync), in a
// temporary directory, on free loopback ports. dlock runs on the private
// redis-server of the other sections (no persistence).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// etcdInstallHint is the message of a run that cannot find etcd: the
// section fails with it, and the run with the section.
const etcdInstallHint = "etcd was not found on PATH: the etcd section needs it (Debian/Ubuntu: apt-get install etcd-server; .ci/run installs it), or run with " + etcdEnv + " naming the binary"

// etcdEnv names the environment variable that chooses the etcd binary: a
// name on PATH or a path; by default etcd.
const etcdEnv = "DLOCK_BENCH_ETCD"

// etcdBinary returns the path of the etcd binary the section runs.
func etcdBinary() (string, error) {
	name := os.Getenv(etcdEnv)
	if name == "" {
		bin, err := exec.LookPath("etcd")
		if err != nil {
			return "", errors.New(etcdInstallHint)
		}
		return bin, nil
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s=%q: %w", etcdEnv, name, err)
	}
	return bin, nil
}

// etcdServer is one etcd process the section started.
type etcdServer struct {
	setting  string   // "fsync" (etcd's defaults) or "no-fsync"
	args     []string // the command line, binary and ports aside
	endpoint string   // http://127.0.0.1:port
	version  string
	dir      string
	cmd      *exec.Cmd
	exited   chan struct{}
	// done stops the server once, for its user or for the run's stops.
	done func()
}

// etcdArgs are the settings each etcd runs with, apart from its data
// directory and URLs: etcd's defaults, and --unsafe-no-fsync for the
// second setting. Its log (warnings and errors) goes to a file in its
// directory.
func etcdArgs(setting string) []string {
	args := []string{"--logger", "zap", "--log-level", "warn"}
	if setting == "no-fsync" {
		args = append(args, "--unsafe-no-fsync")
	}
	return args
}

// startEtcd starts a single-member etcd with setting's arguments in a
// temporary directory of its own, on two free loopback ports (client and
// peer), and returns once it answers a read. It tries five pairs of ports.
// Its done, or stops, kills it and removes its directory.
func startEtcd(setting string, stops *stopper) (*etcdServer, error) {
	bin, err := etcdBinary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		dir, err := os.MkdirTemp("", "dlock-bench-etcd-")
		if err != nil {
			return nil, err
		}
		s := &etcdServer{setting: setting, args: etcdArgs(setting), dir: dir, exited: make(chan struct{})}
		s.done = stops.add(s.stop)
		if lastErr = s.start(bin); lastErr == nil {
			return s, nil
		}
		s.done()
	}
	return nil, fmt.Errorf("start etcd (%s): %w", setting, lastErr)
}

func (s *etcdServer) start(bin string) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	s.endpoint = client
	log, err := os.Create(filepath.Join(s.dir, "etcd.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	args := append([]string{
		"--name", "bench", "--data-dir", filepath.Join(s.dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "bench=" + peer, "--initial-cluster-state", "new",
		"--log-outputs", "stderr",
	}, s.args...)
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	// If the bench dies without running its stops, etcd dies with it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	cli, err := newEtcdClient(client, nil)
	if err != nil {
		return err
	}
	defer cli.Close()
	for deadline := time.Now().Add(15 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, client)
		if err == nil {
			_, err = cli.Get(ctx, "/dlock-bench/ready")
		}
		cancel()
		if err == nil {
			s.version = st.Version
			return nil
		}
		select {
		case <-s.exited:
			b, _ := os.ReadFile(filepath.Join(s.dir, "etcd.log"))
			return fmt.Errorf("etcd exited at start: %s", lastLines(string(b), 5))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd on %s did not answer within 15 s: %w", client, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop kills the server by its PID, waits for it and removes its directory.
func (s *etcdServer) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
		}
	}
	_ = os.RemoveAll(s.dir)
}

// cpu returns the CPU time the etcd process has used, in seconds (utime +
// stime of /proc/PID/stat, in clock ticks of 1/100 s, Linux's USER_HZ); 0 if
// it cannot be read.
func (s *etcdServer) cpu() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14 and stime 15.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}

// freePorts returns n distinct loopback ports the kernel offered as free.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// newEtcdClient opens an etcd client on endpoint, its log discarded (a
// killed candidate's session makes it warn). With rc, each unary RPC it
// makes counts as a request and a round trip; the messages it sends on its
// watch and lease keep-alive streams are not counted.
func newEtcdClient(endpoint string, rc *reqCounter) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if rc != nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				rc.reqs.Add(1)
				rc.rts.Add(1)
				return invoker(ctx, method, req, reply, cc, opts...)
			})}
	}
	return clientv3.New(cfg)
}

// ---- etcd's concurrency.Mutex as a locker ----

// etcdLocker is one "process" of etcd's Mutex: its own client and its own
// session (etcd's default session TTL, 60 s, kept alive by the client).
type etcdLocker struct {
	cli *clientv3.Client
	s   *concurrency.Session
}

// openEtcdMutex opens lockers on endpoint; the address the harness passes
// is the redis-server's, which etcd has no use for.
func openEtcdMutex(endpoint string) func(string, *reqCounter) (locker, error) {
	return func(_ string, rc *reqCounter) (locker, error) {
		cli, err := newEtcdClient(endpoint, rc)
		if err != nil {
			return nil, err
		}
		s, err := concurrency.NewSession(cli)
		if err != nil {
			_ = cli.Close()
			return nil, err
		}
		return &etcdLocker{cli: cli, s: s}, nil
	}
}

func (l *etcdLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m := concurrency.NewMutex(l.s, "/dlock-bench/mutex/"+key)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

func (l *etcdLocker) close() { _ = l.s.Close(); _ = l.cli.Close() }

// ---- the section ----

// etcdRounds are the section's rounds: of each election row.
type etcdRounds struct{ resign, kill int }

// etcdOut is the section's part of latest.json besides its Mutex rows,
// which are results of scenarios "etcd-uncontended" and "etcd-contended".
type etcdOut struct {
	Version string          `json:"etcd_version"`
	Servers []etcdServerOut `json:"servers"`
	// DataDir is the directory the servers' temporary directories are in,
	// and Filesystem its mount's type; FsyncP50us is the median of 4 KiB
	// writes each followed by fsync in it, measured before the servers
	// started.
	DataDir    string        `json:"data_dir"`
	Filesystem string        `json:"filesystem"`
	FsyncP50us float64       `json:"fsync_p50_us"`
	FsyncN     int           `json:"fsync_n"`
	TTLms      float64       `json:"ttl_ms"`
	Candidates int           `json:"kill_candidates"`
	SliceMs    float64       `json:"mutex_slice_ms"` // the uncontended slice
	Elections  []electionRow `json:"elections"`
}

type etcdServerOut struct {
	Setting string   `json:"setting"`
	Args    []string `json:"args"` // besides its data directory and URLs
}

// runEtcd runs the section: the election rows (resign, then kill) for dlock
// on cfg's redis-server and for both etcd settings, then dlock's Mutex
// beside etcd's with the harness of sections 1 and 3.
func runEtcd(cfg config, stops *stopper, rounds etcdRounds) ([]result, *etcdOut, error) {
	out := &etcdOut{DataDir: os.TempDir(), TTLms: ms(electionTTL), Candidates: electionCandidates, SliceMs: ms(cfg.slice)}
	out.Filesystem = filesystemOf(out.DataDir)
	n := 200
	if rounds.kill < 5 {
		n = 30
	}
	p50, err := fsyncP50(out.DataDir, n)
	if err != nil {
		return nil, nil, err
	}
	out.FsyncP50us, out.FsyncN = us(p50), n
	servers := map[string]*etcdServer{}
	for _, setting := range []string{"fsync", "no-fsync"} {
		s, err := startEtcd(setting, stops)
		if err != nil {
			return nil, nil, err
		}
		defer s.done()
		servers[setting] = s
		out.Version = s.version
		out.Servers = append(out.Servers, etcdServerOut{Setting: setting, Args: s.args})
		fmt.Fprintf(os.Stderr, "  etcd %s (%s) on %s\n", s.version, setting, s.endpoint)
	}
	systems := []electionSystem{
		{system: "dlock", setting: "redis", addr: cfg.addr},
		{system: "etcd", setting: "fsync", addr: servers["fsync"].endpoint},
		{system: "etcd", setting: "no-fsync", addr: servers["no-fsync"].endpoint},
	}
	for _, s := range systems {
		fmt.Fprintf(os.Stderr, "  election %s: %d resign rounds\n", s.label(), rounds.resign)
		ds, err := resignRounds(s, rounds.resign)
		if err != nil {
			return nil, nil, fmt.Errorf("election %s, resign: %w", s.label(), err)
		}
		out.Elections = append(out.Elections, newElectionRow(s, "resign", ds))
	}
	for _, s := range systems {
		fmt.Fprintf(os.Stderr, "  election %s: %d kill rounds\n", s.label(), rounds.kill)
		ds, err := killRounds(s, rounds.kill, stops)
		if err != nil {
			return nil, nil, fmt.Errorf("election %s, kill: %w", s.label(), err)
		}
		out.Elections = append(out.Elections, newElectionRow(s, "kill", ds))
	}

	vs := []variant{
		{lib: "dlock", name: "default", open: openDlock()},
		{lib: "etcd", name: "fsync", open: openEtcdMutex(servers["fsync"].endpoint), serverCPU: servers["fsync"].cpu},
		{lib: "etcd", name: "no-fsync", open: openEtcdMutex(servers["no-fsync"].endpoint), serverCPU: servers["no-fsync"].cpu},
	}
	c := cfg
	c.noFloors = true
	settle(cfg.admin)
	fmt.Fprintln(os.Stderr, "  mutex uncontended")
	un, _, err := runUncontended(c, vs)
	if err != nil {
		return nil, nil, fmt.Errorf("mutex uncontended: %w", err)
	}
	settle(cfg.admin)
	co, err := runContended(c, vs, 16, false)
	if err != nil {
		return nil, nil, fmt.Errorf("mutex contended: %w", err)
	}
	var res []result
	for _, r := range un {
		r.Scenario = "etcd-uncontended"
		res = append(res, etcdRow(r))
	}
	for _, r := range co {
		r.Scenario = "etcd-contended"
		res = append(res, etcdRow(r))
	}
	return res, out, nil
}

// etcdRow leaves the Redis figures out of an etcd row: Redis did none of
// its work. Its requests are etcd's unary RPCs, and the CPU the harness
// measured is the etcd process's.
func etcdRow(r result) result {
	if r.Library != "etcd" {
		return r
	}
	r.ServerCPUusPerOp = r.RedisCPUusPerOp // serverCPU: the etcd process's
	r.RedisCommandsPerOp, r.RedisCPUusPerOp, r.RedisWorkUsPerOp = nil, nil, nil
	r.NotCounted = slices.DeleteFunc(r.NotCounted, func(s string) bool { return s == "redis_work_us_per_op" })
	return r
}

// filesystemOf returns the type of the mount that holds path, from
// /proc/mounts; "unknown" if it cannot tell.
func filesystemOf(path string) string {
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return "unknown"
	}
	best, fs := "", "unknown"
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		mnt := f[1]
		if (path == mnt || strings.HasPrefix(path, strings.TrimSuffix(mnt, "/")+"/")) && len(mnt) > len(best) {
			best, fs = mnt, f[2]
		}
	}
	return fs
}

// fsyncP50 writes 4 KiB and fsyncs it n times in a new file in dir, and
// returns the median time of one write and fsync: what a durable commit
// costs etcd's write-ahead log on this disk, at least.
func fsyncP50(dir string, n int) (time.Duration, error) {
	fh, err := os.CreateTemp(dir, "dlock-bench-fsync-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(fh.Name())
	defer fh.Close()
	buf := make([]byte, 4096)
	var ds []time.Duration
	for range n {
		t0 := time.Now()
		if _, err := fh.Write(buf); err != nil {
			return 0, err
		}
		if err := fh.Sync(); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(t0))
	}
	return pct(ds, .5), nil
}
