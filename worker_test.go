package dlock_test

// Multi-process safety tests: the test binary re-executes itself as worker
// processes (TestMain dispatches on workerEnv), so locks are contended by real
// OS processes, each with its own Client, and faults are real signals.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Environment of a worker process.
const (
	workerEnv   = "DLOCK_TEST_WORKER"   // the role; TestMain runs the worker when set
	envRedis    = "DLOCK_TEST_REDIS"    // address of the lock's Redis
	envResource = "DLOCK_TEST_RESOURCE" // address of the fenced resource's Redis
	envMutant   = "DLOCK_TEST_MUTANT"   // name of a broken acquire script to use
	envParams   = "DLOCK_TEST_PARAMS"   // workerParams as JSON
	// envDebug, set in the test's environment, makes every worker log
	// what its Client does to its stderr, which the test log shows.
	envDebug = "DLOCK_WORKER_DEBUG"
)

type workerParams struct {
	Name       string
	TTL        time.Duration
	Goroutines int
	Iterations int
	Fair       bool  // use a FairMutex instead of a Mutex
	Permits    int64 // of the Semaphore the "sem" workers use
	ReadShare  int   // percent of the "rw" workers' acquisitions that are reads
	Write      bool  // the "rwhold" worker takes the write lock, not a read lock
	// AutoPipeline makes the worker's Client send its requests through the
	// Redis client's autopipeliner.
	AutoPipeline bool
	// Abandon is how many names of each kind the "abandon" worker holds, and
	// Waits how many it waits for, before it is killed.
	Abandon, Waits int
	// For is how long the "chaos" worker keeps taking the lock.
	For time.Duration
	// Names: the "chaos" worker's goroutines each take one of this many
	// locks at a time (0 or 1: the one lock Name); Extend: they call
	// Lease.Extend in some critical sections, shortening or lengthening it.
	Names  int
	Extend bool
	// Deploy is where runWorkers puts the locks.
	Deploy deployment
	// WaitReplicas: the worker's Client waits for one replica
	// (WithWaitReplicas); for a Deploy with replicas.
	WaitReplicas bool
	// NoScripts: the worker's Client is made with WithoutScripts.
	NoScripts bool
}

// A deployment is where a test's locks live.
type deployment string

const (
	single     deployment = ""         // one redis-server
	onCluster  deployment = "cluster"  // a Redis Cluster of three primaries with a replica each
	onSentinel deployment = "sentinel" // a primary with two replicas and three sentinels
	onRedLock  deployment = "redlock"  // five independent servers, locks held by a majority (NewRedLock)
)

// deployments are those the multi-process hammers run on.
var deployments = []deployment{single, onCluster, onSentinel}

func (d deployment) String() string {
	if d == single {
		return "dlock"
	}
	return string(d)
}

// start starts d for t, and returns its address as a worker process is given
// it (see lockRedis) and a client of it.
func (d deployment) start(t *testing.T) (addr string, rdb redis.UniversalClient) {
	t.Helper()
	switch d {
	case onCluster:
		cl := redistest.StartCluster(t, 3, 1)
		return strings.Join(cl.Addrs(), ","), cl.Client(t)
	case onSentinel:
		s := redistest.StartSentinel(t, 2, 3)
		return sentinelScheme + strings.Join(s.SentinelAddrs(), ","), s.Client(t)
	case onRedLock:
		srvs := redistest.StartN(t, 5)
		addrs := make([]string, len(srvs))
		for i, s := range srvs {
			addrs[i] = s.Addr
		}
		return redLockScheme + strings.Join(addrs, ","), srvs[0].Client(t)
	}
	srv := redistest.Start(t)
	return srv.Addr, srv.Client(t)
}

// sentinelScheme starts the address of a Sentinel deployment given to a
// worker: the sentinels' addresses follow, joined by commas.
const sentinelScheme = "sentinel:"

// redLockScheme starts the address of a RedLock's nodes given to a worker:
// their addresses follow, joined by commas. The first node also holds the
// hammer's counter.
const redLockScheme = "redlock:"

// locker is what the workers need of a Mutex or a FairMutex.
type locker interface {
	Lock(ctx context.Context) (*dlock.Lease, error)
}

func (p workerParams) lock(c *dlock.Client) locker {
	if p.Fair {
		return c.FairMutex(p.Name)
	}
	return c.Mutex(p.Name)
}

// fencedWrite is the protected resource: it accepts a write only if its fence
// is greater than that of every write it accepted before, and counts both.
//
// KEYS[1] resource hash: last, accepted, rejected; ARGV[1] fence.
// Returns 1 accepted, 0 rejected.
var fencedWrite = redis.NewScript(`
local last = tonumber(redis.call('HGET', KEYS[1], 'last') or '0')
if tonumber(ARGV[1]) > last then
  redis.call('HSET', KEYS[1], 'last', ARGV[1])
  redis.call('HINCRBY', KEYS[1], 'accepted', 1)
  return 1
end
redis.call('HINCRBY', KEYS[1], 'rejected', 1)
return 0`)

func runWorker(role string) int {
	if m := os.Getenv(envMutant); m != "" && !dlock.UseMutant(m) {
		fmt.Fprintf(os.Stderr, "worker: unknown mutant %q\n", m)
		return 2
	}
	var p workerParams
	if err := json.Unmarshal([]byte(os.Getenv(envParams)), &p); err != nil {
		fmt.Fprintf(os.Stderr, "worker: params: %v\n", err)
		return 2
	}
	var members []redis.UniversalClient
	if addrs, ok := strings.CutPrefix(os.Getenv(envRedis), redLockScheme); ok {
		for a := range strings.SplitSeq(addrs, ",") {
			m := redis.NewClient(&redis.Options{Addr: a})
			defer m.Close()
			members = append(members, m)
		}
	}
	var lockRDB redis.UniversalClient
	if members != nil {
		lockRDB = members[0]
	} else {
		lockRDB = lockRedis()
		defer lockRDB.Close()
	}
	resRDB := redis.NewClient(&redis.Options{Addr: os.Getenv(envResource)})
	defer resRDB.Close()
	opts := []dlock.Option{dlock.WithTTL(p.TTL)}
	if os.Getenv(envDebug) != "" {
		opts = append(opts, dlock.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	if p.AutoPipeline {
		opts = append(opts, dlock.WithAutoPipeline())
	}
	if p.WaitReplicas {
		opts = append(opts, dlock.WithWaitReplicas(1, time.Second))
	}
	if p.NoScripts {
		opts = append(opts, dlock.WithoutScripts())
	}
	var c *dlock.Client
	var err error
	if members != nil {
		// The hammers run beside other tests: on a busy machine a member
		// may answer later than the default 100 ms, which refuses the
		// acquire; mutual exclusion is what the hammers check.
		opts = append(opts, dlock.WithNodeTimeout(500*time.Millisecond))
		c, err = dlock.NewRedLock(members, opts...)
	} else {
		c, err = dlock.New(lockRDB, opts...)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker: %v\n", err)
		return 2
	}
	defer c.Close()
	switch role {
	case "hammer":
		err = hammerWorker(c, lockRDB, resRDB, p)
	case "hold":
		err = holdWorker(c, resRDB, p)
	case "sem":
		err = semWorker(c, resRDB, p)
	case "semhold":
		err = semHoldWorker(c, p)
	case "latch":
		err = latchWorker(c, p)
	case "multilock":
		err = multiLockWorker(c, lockRDB, resRDB, p, false)
	case "multilock-broken":
		err = multiLockWorker(c, lockRDB, resRDB, p, true)
	case "multihold":
		err = multiHoldWorker(c, p)
	case "abandon":
		err = abandonWorker(c, p)
	case "chaos":
		err = chaosWorker(c, resRDB, p)
	case "allocs":
		err = allocsWorker(c, p)
	case "resume":
		err = resumeWorker(c, p)
	case "rw":
		err = rwWorker(c, resRDB, p)
	case "rwhold":
		err = rwHoldWorker(c, p)
	case "candidate", "observer":
		err = electionWorker(role, c, resRDB, p)
	case "group":
		err = groupWorker(c, resRDB, p)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker %s: %v\n", role, err)
		return 1
	}
	return 0
}

// lockRedis returns a client of the lock's Redis, as a worker process is
// given it: one server's address, a Cluster's joined by commas, or
// sentinelScheme and the sentinels' addresses.
func lockRedis() redis.UniversalClient {
	addr := os.Getenv(envRedis)
	if sentinels, ok := strings.CutPrefix(addr, sentinelScheme); ok {
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: strings.Split(sentinels, ",")})
	}
	if addrs := strings.Split(addr, ","); len(addrs) > 1 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	}
	return redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
}

// hammerReport is what a hammer worker prints when done.
type hammerReport struct {
	Acquired     int64
	UnlockErrors int64
	FirstError   string
}

// hammerWorker runs p.Goroutines goroutines, each taking the lock
// p.Iterations times. Under the lock it increments a counter in Redis by a
// read, a pause and a write (lost updates show two holders at once), and makes
// a fenced write to the resource.
func hammerWorker(c *dlock.Client, lockRDB redis.UniversalClient, resRDB *redis.Client, p workerParams) error {
	ctx := context.Background()
	m := p.lock(c)
	var rep hammerReport
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
	var wg sync.WaitGroup
	for range p.Goroutines {
		wg.Go(func() {
			for range p.Iterations {
				l, err := m.Lock(ctx)
				if err != nil {
					fail(err)
					return
				}
				atomic.AddInt64(&rep.Acquired, 1)
				n, err := lockRDB.Get(ctx, "counter").Int64()
				if err != nil && !errors.Is(err, redis.Nil) {
					fail(err)
					return
				}
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				if err := lockRDB.Set(ctx, "counter", n+1, 0).Err(); err != nil {
					fail(err)
					return
				}
				if err := fencedWrite.Run(ctx, resRDB, []string{"resource"}, l.Fence()).Err(); err != nil {
					fail(err)
					return
				}
				if err := l.Unlock(ctx); err != nil {
					atomic.AddInt64(&rep.UnlockErrors, 1)
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		rep.FirstError = firstErr.Error()
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// holdReport is what a hold worker prints after it is told to go on.
type holdReport struct {
	DoneClosed    bool          // Done was closed after the worker resumed
	DoneAfter     time.Duration // how long after "go" Done was seen closed
	ErrIsLost     bool          // Err matched ErrLockLost
	Accepted      bool          // the resource accepted its fenced write
	UnlockNotHeld bool          // Unlock reported ErrNotHeld
}

// holdWorker takes the lock, makes one fenced write, prints its fence, and
// waits for a line on stdin. Then it reports whether it noticed losing the
// lease, and tries a second fenced write as a holder that did not check would.
func holdWorker(c *dlock.Client, resRDB *redis.Client, p workerParams) error {
	ctx := context.Background()
	l, err := p.lock(c).Lock(ctx)
	if err != nil {
		return err
	}
	if err := fencedWrite.Run(ctx, resRDB, []string{"resource"}, l.Fence()).Err(); err != nil {
		return err
	}
	fmt.Printf("%d\n", l.Fence())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	start := time.Now()
	var rep holdReport
	select {
	case <-l.Done():
		rep.DoneClosed, rep.DoneAfter = true, time.Since(start)
	case <-time.After(2 * time.Second):
	}
	rep.ErrIsLost = errors.Is(l.Err(), dlock.ErrLockLost)
	accepted, err := fencedWrite.Run(ctx, resRDB, []string{"resource"}, l.Fence()).Int()
	if err != nil {
		return err
	}
	rep.Accepted = accepted == 1
	rep.UnlockNotHeld = errors.Is(l.Unlock(ctx), dlock.ErrNotHeld)
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// worker returns the command that runs this test binary as a worker.
func worker(t *testing.T, role, mutant string, lockSrv, resSrv *redistest.Server, p workerParams) *exec.Cmd {
	t.Helper()
	return workerOn(t, role, mutant, lockSrv.Addr, resSrv, p)
}

// workerOn is worker with the locks at lockAddr: one server's address, or a
// Cluster's, joined by commas.
func workerOn(t *testing.T, role, mutant, lockAddr string, resSrv *redistest.Server, p workerParams) *exec.Cmd {
	t.Helper()
	redistest.Full(t, "worker processes")
	params, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		workerEnv+"="+role, envMutant+"="+mutant, envParams+"="+string(params),
		envRedis+"="+lockAddr, envResource+"="+resSrv.Addr)
	cmd.Stderr = &testWriter{t: t, prefix: role + ": "}
	return cmd
}

// startEvents starts cmd, a worker that reads commands on its stdin and
// prints one JSON event of type E a line on its stdout: it returns the
// worker's stdin and its events, a line that is not one coming as
// unreadable(line). The worker is resumed (if stopped) and killed when t
// ends.
func startEvents[E any](t *testing.T, cmd *exec.Cmd, unreadable func(line string) E) (io.WriteCloser, chan E) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	events := make(chan E, 10000)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e E
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				e = unreadable(sc.Text())
			}
			events <- e
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return stdin, events
}

// killAfterFirstLine starts a worker, waits for the first line it prints (it
// has the lock by then), kills it with SIGKILL and returns that line and when
// it was killed. The worker's stdin is held open until then.
func killAfterFirstLine(t *testing.T, role string, lockSrv, resSrv *redistest.Server, p workerParams) (string, time.Time) {
	t.Helper()
	cmd := worker(t, role, "", lockSrv, resSrv, p)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("worker %s: read its first line: %v", role, err)
	}
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	return line, killed
}

// testWriter sends a worker's stderr to the test log.
type testWriter struct {
	t      *testing.T
	prefix string
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s%s", w.prefix, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// hammerOutcome is what the hammer test checks.
type hammerOutcome struct {
	acquired, unlockErrors, counter, accepted, rejected int64
	workerErrors                                        []string
}

// violations lists every way the outcome breaks mutual exclusion.
func (o hammerOutcome) violations() []string {
	var v []string
	if o.counter != o.acquired {
		v = append(v, fmt.Sprintf("counter = %d after %d acquisitions: lost updates, two holders at once", o.counter, o.acquired))
	}
	if o.rejected != 0 {
		v = append(v, fmt.Sprintf("the resource rejected %d fenced writes made under the lock", o.rejected))
	}
	if o.accepted != o.acquired {
		v = append(v, fmt.Sprintf("the resource accepted %d fenced writes for %d acquisitions", o.accepted, o.acquired))
	}
	if o.unlockErrors != 0 {
		v = append(v, fmt.Sprintf("%d Unlocks failed: a holder had lost its lock", o.unlockErrors))
	}
	return v
}

// runWorkers starts procs worker processes in role, on two new servers (the
// lock's and the resource's), waits for them all and decodes the JSON report
// each printed.
func runWorkers[R any](t *testing.T, role, mutant string, procs int, p workerParams) (lock redis.UniversalClient, resSrv *redistest.Server, reports []R) {
	t.Helper()
	resSrv = redistest.Start(t)
	lockAddr, lock := p.Deploy.start(t)
	cmds := make([]*exec.Cmd, procs)
	outs := make([]strings.Builder, procs)
	for i := range cmds {
		cmds[i] = workerOn(t, role, mutant, lockAddr, resSrv, p)
		cmds[i].Stdout = &outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatalf("start worker: %v", err)
		}
	}
	reports = make([]R, procs)
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		if err := json.Unmarshal([]byte(outs[i].String()), &reports[i]); err != nil {
			t.Fatalf("worker %d report %q: %v", i, outs[i].String(), err)
		}
	}
	return lock, resSrv, reports
}

// hammer runs procs worker processes of goroutines goroutines on one lock.
func hammer(t *testing.T, mutant string, procs int, p workerParams) hammerOutcome {
	lock, resSrv, reports := runWorkers[hammerReport](t, "hammer", mutant, procs, p)
	var o hammerOutcome
	for _, rep := range reports {
		o.acquired += rep.Acquired
		o.unlockErrors += rep.UnlockErrors
		if rep.FirstError != "" {
			o.workerErrors = append(o.workerErrors, rep.FirstError)
		}
	}
	ctx := context.Background()
	o.counter, _ = lock.Get(ctx, "counter").Int64()
	res := resSrv.Client(t).HGetAll(ctx, "resource").Val()
	fmt.Sscan(res["accepted"], &o.accepted)
	fmt.Sscan(res["rejected"], &o.rejected)
	return o
}

// TestProcessesHammer: 4 processes x 4 goroutines take one lock 800 times in
// all. Every critical section's read-modify-write must survive and every
// fenced write must be accepted. The same run with an acquire script that
// ignores the holder must be caught by the same checks.
func TestProcessesHammer(t *testing.T) {
	t.Parallel()
	// A grant lasts a tenth of the TTL, 1 s at most, until the grantee's
	// renewer lengthens it: at 10 s a loaded machine's pauses lose none,
	// and any overlap is the library's.
	p := workerParams{Name: "hammer", TTL: 10 * time.Second, Goroutines: 4, Iterations: 50}
	const procs = 4
	exact := func(t *testing.T, p workerParams) {
		o := hammer(t, "", procs, p)
		if len(o.workerErrors) > 0 {
			t.Fatalf("workers failed: %v", o.workerErrors)
		}
		if want := int64(procs * p.Goroutines * p.Iterations); o.acquired != want {
			t.Fatalf("acquired %d times, want %d", o.acquired, want)
		}
		for _, v := range o.violations() {
			t.Error(v)
		}
	}
	t.Run("dlock", func(t *testing.T) { t.Parallel(); exact(t, p) })
	t.Run("autopipeline", func(t *testing.T) {
		t.Parallel() // servers of its own
		p := p
		p.AutoPipeline = true
		exact(t, p)
	})
	for _, d := range deployments[1:] {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel() // servers of its own
			p := p
			p.Deploy = d
			exact(t, p)
		})
	}
	t.Run("sentinel-wait", func(t *testing.T) {
		t.Parallel() // servers of its own
		p := p
		p.Deploy, p.WaitReplicas = onSentinel, true
		exact(t, p)
	})
	t.Run("redlock", func(t *testing.T) {
		t.Parallel() // servers of its own
		p := p
		p.Deploy = onRedLock
		exact(t, p)
	})
	t.Run("redlock-broken-lock-is-caught", func(t *testing.T) {
		t.Parallel() // servers of its own
		p := p
		p.Deploy = onRedLock
		o := hammer(t, "acquire-ignores-holder", procs, p)
		v := o.violations()
		if len(v) == 0 {
			t.Fatalf("a RedLock whose nodes ignore their holder passed the checks: %+v", o)
		}
		t.Logf("caught, as it must be: %v", v)
	})
	t.Run("broken-lock-is-caught", func(t *testing.T) {
		t.Parallel() // servers of its own
		o := hammer(t, "acquire-ignores-holder", procs, p)
		v := o.violations()
		if len(v) == 0 {
			t.Fatalf("a lock that ignores its holder passed the checks: %+v", o)
		}
		t.Logf("caught, as it must be: %v", v)
	})
}

// pausedOutcome is what the paused-holder test checks.
type pausedOutcome struct {
	fence1, fence2 int64
	takeover       time.Duration // from SIGSTOP of the holder to the next acquisition
	accepted2      bool          // the new holder's fenced write was accepted
	rep            holdReport    // the paused holder's view after SIGCONT
	stillHeld      bool          // the new holder still held the lock after the old one's Unlock
}

func (o pausedOutcome) violations(ttl time.Duration) []string {
	var v []string
	if margin := 500 * time.Millisecond; o.takeover > ttl+margin {
		v = append(v, fmt.Sprintf("the lock was taken over %v after the holder stopped, want within TTL %v + %v", o.takeover, ttl, margin))
	}
	if o.fence2 <= o.fence1 {
		v = append(v, fmt.Sprintf("the new holder's fence %d is not above the paused holder's %d", o.fence2, o.fence1))
	}
	if !o.accepted2 {
		v = append(v, "the new holder's fenced write was rejected")
	}
	if !o.rep.DoneClosed || !o.rep.ErrIsLost {
		v = append(v, fmt.Sprintf("the paused holder did not see its lease lost: %+v", o.rep))
	} else if limit := ttl/3 + 200*time.Millisecond; o.rep.DoneAfter > limit {
		v = append(v, fmt.Sprintf("the paused holder saw its loss %v after resuming, want within %v", o.rep.DoneAfter, limit))
	}
	if o.rep.Accepted {
		v = append(v, "the resource accepted the paused holder's stale fenced write")
	}
	if !o.rep.UnlockNotHeld {
		v = append(v, "the paused holder's Unlock did not report ErrNotHeld")
	}
	if !o.stillHeld {
		v = append(v, "the paused holder's Unlock freed the new holder's lock")
	}
	return v
}

func pausedHolder(t *testing.T, mutant string, p workerParams) pausedOutcome {
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	cmd := worker(t, "hold", mutant, lockSrv, resSrv, p)
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
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	out := bufio.NewReader(stdout)
	var o pausedOutcome
	if _, err := fmt.Fscanln(out, &o.fence1); err != nil {
		t.Fatalf("read the holder's fence: %v", err)
	}

	stopped := time.Now()
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	c := clientOn(t, lockSrv.Client(t), dlock.WithTTL(p.TTL))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Mutex(p.Name).Lock(ctx)
	if err != nil {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		t.Fatalf("Lock while the holder is stopped: %v", err)
	}
	o.takeover, o.fence2 = time.Since(stopped), l.Fence()
	acc, err := fencedWrite.Run(ctx, resSrv.Client(t), []string{"resource"}, l.Fence()).Int()
	if err != nil {
		t.Fatal(err)
	}
	o.accepted2 = acc == 1

	time.Sleep(time.Until(stopped.Add(3 * time.Second)))
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("read the holder's report: %v", err)
	}
	if err := json.Unmarshal([]byte(line), &o.rep); err != nil {
		t.Fatalf("holder report %q: %v", line, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	_, err = l.TTL(ctx)
	o.stillHeld = err == nil
	if err := l.Unlock(ctx); err != nil && o.stillHeld {
		t.Fatalf("Unlock: %v", err)
	}
	return o
}

// TestProcessPausedHolder: a holder with a 1s TTL is stopped with SIGSTOP for
// 3s. Another process gets the lock within the TTL and a higher fence; when
// the first resumes, it sees its lease lost and the resource rejects its
// write. With a fence the lock does not record (the next holder gets a
// lower one), the checks must fail.
func TestProcessPausedHolder(t *testing.T) {
	// Not in parallel: it stops a holder for one TTL and checks the order of
	// what follows, which a busy machine can blur.
	p := workerParams{Name: "paused", TTL: time.Second}
	t.Run("dlock", func(t *testing.T) {
		o := pausedHolder(t, "", p)
		for _, v := range o.violations(p.TTL) {
			t.Error(v)
		}
		t.Logf("takeover after %v, fences %d -> %d, loss seen %v after resuming", o.takeover, o.fence1, o.fence2, o.rep.DoneAfter)
	})
	t.Run("broken-fence-is-caught", func(t *testing.T) {
		o := pausedHolder(t, "unrecorded-fence", p)
		v := o.violations(p.TTL)
		if len(v) == 0 {
			t.Fatalf("a lock handing out a fence it does not record passed the checks: %+v", o)
		}
		t.Logf("caught, as it must be: %v", v)
	})
}

// TestProcessKilledHolder: a Mutex or FairMutex holder with a 1s TTL is
// killed with SIGKILL; the lock must be free again within the TTL and a small
// margin, with a higher fence.
func TestProcessKilledHolder(t *testing.T) {
	t.Parallel()
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "Mutex", true: "FairMutex"}[fair], func(t *testing.T) {
			p := workerParams{Name: "killed", TTL: time.Second, Fair: fair}
			lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
			line, killed := killAfterFirstLine(t, "hold", lockSrv, resSrv, p)
			var fence int64
			if _, err := fmt.Sscanln(line, &fence); err != nil {
				t.Fatalf("holder's fence %q: %v", line, err)
			}
			c := clientOn(t, lockSrv.Client(t))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			l, err := p.lock(c).Lock(ctx)
			if err != nil {
				t.Fatalf("Lock after the holder was killed: %v", err)
			}
			took := time.Since(killed)
			if margin := 300 * time.Millisecond; took > p.TTL+margin {
				t.Errorf("lock free again %v after the kill, want within TTL %v + %v", took, p.TTL, margin)
			}
			if l.Fence() <= fence {
				t.Errorf("fence %d after the killed holder's %d", l.Fence(), fence)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("lock free %v after SIGKILL (TTL %v)", took, p.TTL)
		})
	}
}
