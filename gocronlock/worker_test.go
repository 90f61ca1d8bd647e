package gocronlock_test

// Worker processes: the test binary run again with envRole set is one
// instance of a service, with its own dlock Client and gocron scheduler.
// Its job records each run in Redis, in the list runsKey, one entry a run,
// in the order Redis received them.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/gocronlock"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

const (
	envRole   = "GOCRONLOCK_TEST_ROLE"
	envParams = "GOCRONLOCK_TEST_PARAMS"
	runsKey   = "gocronlock-test:runs"
	// refusedKey lists the Locker workers' runs skipped on a lock error,
	// as runsKey lists runs.
	refusedKey = "gocronlock-test:refused"
)

// params are a worker's instructions.
type params struct {
	Addr string // the Redis server: locks and the runs list
	Name string // the instance, as recorded in its runs
	Job  string // the job's name (and so its lock's), or the Election's

	// The Locker's worker: its job fires every Interval, Ticks times, on
	// Schedule (see lockerWorker); tick k was due at Base+k×Interval. Its
	// Locker has min hold MinHold, or the default if DefaultHold, and logs
	// to LogFile, as JSON lines.
	MinHold          time.Duration
	DefaultHold      bool
	LogFile          string
	Schedule         string
	Base             time.Time
	Offset, Interval time.Duration
	Ticks            int

	// The Elector's worker: the Election's TTL and the job's interval; it
	// runs until its stdin closes.
	TTL time.Duration
}

func runWorker(role string) int {
	var p params
	if err := json.Unmarshal([]byte(os.Getenv(envParams)), &p); err != nil {
		fmt.Fprintln(os.Stderr, "worker: params:", err)
		return 2
	}
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer rdb.Close()
	var err error
	switch role {
	case "locker":
		err = lockerWorker(rdb, p)
	case "elector":
		err = electorWorker(rdb, p)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker %s: %v\n", p.Name, err)
		return 1
	}
	return 0
}

// The Locker worker's schedules.
const (
	// startAt: a DurationJob that fires first at Base+Offset
	// (gocron.WithStartDateTime), then every Interval.
	startAt = "start-at"
	// started: a DurationJob whose scheduler starts at
	// Base+Offset-Interval: it fires at Base+Offset, then every Interval,
	// as in a service started then.
	started = "started"
	// aligned: as started, with AlignedStart: it fires at Base, then every
	// Interval (Base is a multiple of Interval).
	aligned = "aligned"
	// cron: a CronJob every second (Interval is 1s), its scheduler started
	// at Base+Offset-Interval: it fires at Base, then every second (Base is
	// a whole second).
	cron = "cron"
)

// lockerWorker fires the job p.Ticks times through a Locker, recording
// "tick instance" for each run, and exits once its last tick has fired and
// its locks are released.
func lockerWorker(rdb *redis.Client, p params) error {
	c, err := dlock.New(rdb)
	if err != nil {
		return err
	}
	defer c.Close()
	opts := []gocronlock.Option{gocronlock.WithMinHold(p.MinHold)}
	if p.DefaultHold {
		opts = nil
	}
	if p.LogFile != "" {
		f, err := os.Create(p.LogFile)
		if err != nil {
			return err
		}
		defer f.Close()
		opts = append(opts, gocronlock.WithLogger(slog.New(slog.NewJSONHandler(f, nil))))
	}
	locker, err := gocronlock.NewLocker(c, opts...)
	if err != nil {
		return err
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		return err
	}
	record := func(key string) error {
		tick := time.Since(p.Base) / p.Interval
		if time.Now().Before(p.Base) {
			tick = -1
		}
		return rdb.RPush(context.Background(), key, fmt.Sprintf("%d %s", tick, p.Name)).Err()
	}
	refused := gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
		if !errors.Is(err, dlock.ErrNotAcquired) {
			fmt.Fprintln(os.Stderr, "lock:", err)
		}
		_ = record(refusedKey)
	})
	// The job's definition and start option, when the scheduler starts, and
	// when the job fires first.
	def := gocron.DurationJob(p.Interval)
	var startOpt []gocron.JobOption
	start, first := p.Base.Add(p.Offset-p.Interval), p.Base.Add(p.Offset)
	switch p.Schedule {
	case startAt:
		startOpt = []gocron.JobOption{gocron.WithStartAt(gocron.WithStartDateTime(first))}
		start = time.Now()
	case started:
	case aligned:
		startOpt = []gocron.JobOption{gocronlock.AlignedStart(p.Interval)}
		first = p.Base
	case cron:
		if p.Interval != time.Second {
			return fmt.Errorf("a cron schedule with interval %v: only 1s is supported", p.Interval)
		}
		def = gocron.CronJob("* * * * * *", true)
		first = p.Base
	default:
		return fmt.Errorf("unknown schedule %q", p.Schedule)
	}
	time.Sleep(time.Until(start))
	if _, err := s.NewJob(def, gocron.NewTask(record, runsKey),
		append(startOpt, gocron.WithName(p.Job), gocron.WithEventListeners(refused))...); err != nil {
		return err
	}
	s.Start()
	time.Sleep(time.Until(first.Add(time.Duration(p.Ticks-1)*p.Interval + p.Interval/2)))
	if err := s.Shutdown(); err != nil {
		return err
	}
	return locker.Close()
}

// electorWorker runs the job every p.Interval through an Elector, recording
// "instance term" for each run, until its stdin closes.
func electorWorker(rdb *redis.Client, p params) error {
	c, err := dlock.New(rdb, dlock.WithTTL(p.TTL))
	if err != nil {
		return err
	}
	defer c.Close()
	elector, err := gocronlock.NewElector(c.Election(p.Job), p.Name)
	if err != nil {
		return err
	}
	defer elector.Close()
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		return err
	}
	record := func() error {
		ld := elector.Leadership()
		if ld == nil {
			return nil // the leadership ended since IsLeader
		}
		return rdb.RPush(context.Background(), runsKey, fmt.Sprintf("%s %d", p.Name, ld.Term())).Err()
	}
	if _, err := s.NewJob(gocron.DurationJob(p.Interval), gocron.NewTask(record), gocron.WithName(p.Job)); err != nil {
		return err
	}
	s.Start()
	fmt.Println("started")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return s.Shutdown()
}

// proc is a worker process.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startWorker starts a worker process with role and p, and returns once it
// has printed its first line, if wait is set. It is killed when the test
// ends if it still runs.
func startWorker(t *testing.T, role string, p params, wait bool) *proc {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+role, envParams+"="+string(b))
	cmd.Stderr = &testWriter{t: t, prefix: p.Name + ": "}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	if wait {
		if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
			t.Fatalf("%s: its first line: %v", p.Name, err)
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return &proc{name: p.Name, cmd: cmd, stdin: stdin}
}

// stop closes the worker's stdin and waits for it to exit, failing the test
// if it failed.
func (w *proc) stop(t *testing.T) {
	t.Helper()
	_ = w.stdin.Close()
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("%s: %v", w.name, err)
	}
}

// kill ends the worker with SIGKILL and waits until it has exited.
func (w *proc) kill(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("%s: %v", w.name, err)
	}
	_ = w.cmd.Wait()
}

// runs returns the runs recorded, each split in its two fields.
func runs(t *testing.T, rdb *redis.Client) [][2]string {
	t.Helper()
	return list(t, rdb, runsKey)
}

// list returns the entries of the list key, each split in its two fields.
func list(t *testing.T, rdb *redis.Client, key string) [][2]string {
	t.Helper()
	all, err := rdb.LRange(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([][2]string, len(all))
	for i, r := range all {
		a, b, ok := strings.Cut(r, " ")
		if !ok {
			t.Fatalf("run %d: unreadable %q", i, r)
		}
		out[i] = [2]string{a, b}
	}
	return out
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// testWriter sends a worker's stderr to the test log.
type testWriter struct {
	t      *testing.T
	prefix string
}

func (w *testWriter) Write(p []byte) (int, error) {
	for l := range strings.SplitSeq(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + l)
	}
	return len(p), nil
}
