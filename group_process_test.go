package dlock_test

// A Group's promises among real OS processes: each worker process (role
// "group") has one Client and many goroutines that call Do on one key in
// bursts; the runner is killed with SIGKILL or stopped with SIGSTOP while
// its function runs.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// groupEvent is one line a group worker prints.
type groupEvent struct {
	Ev     string // "running" (fn, after the other processes joined), "wrote" (fn, at its end), "done" (a Do returned), "burst" (all of a burst's Dos returned)
	Burst  int
	Run    int64  `json:",omitempty"` // of "running" and "wrote": which run of the burst
	Pid    int    `json:",omitempty"`
	Val    string `json:",omitempty"`
	Shared bool   `json:",omitempty"`
	// Of "wrote": whether it is fn's write at its end (else at its start),
	// and whether the resource accepted it, fenced by the lease's fence.
	End      bool `json:",omitempty"`
	Accepted bool `json:",omitempty"`
	Err      string
}

// groupWorker reads commands, one a line: "go B HOLD WAITS" starts burst
// B, p.Goroutines calls of Do on the key "k" of the Group p.Name, whose fn
// holds the key HOLD ms in the burst's first run (later runs return at once). The first run of a burst first waits until WAITS
// callers (the other processes) wait in line, so that every caller joins
// before fn returns. fn writes to the resource, fenced by its lease, as it
// starts and as it ends, whether or not its context has ended by then, as a
// careless function would.
func groupWorker(c *dlock.Client, resRDB *redis.Client, p workerParams) error {
	g := c.Group(p.Name)
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(e groupEvent) {
		mu.Lock()
		defer mu.Unlock()
		e.Pid = os.Getpid()
		_ = enc.Encode(e)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var b, waits int
		var hold time.Duration
		if _, err := fmt.Sscanf(in.Text(), "go %d %d %d", &b, &hold, &waits); err != nil {
			return fmt.Errorf("command %q: %v", in.Text(), err)
		}
		hold *= time.Millisecond
		fn := func(ctx context.Context) ([]byte, error) {
			run, err := resRDB.Incr(ctx, "runs:"+strconv.Itoa(b)).Result()
			if err != nil {
				return nil, err
			}
			if run == 1 {
				if err := groupQueued(ctx, c, p.Name+"/k", waits); err != nil {
					return nil, err
				}
			}
			l, _ := dlock.LeaseFromContext(ctx)
			write := func(end bool) {
				n, err := fencedNotBelow.Run(context.Background(), resRDB, []string{"resource"}, l.Fence()).Int()
				emit(groupEvent{Ev: "wrote", Burst: b, Run: run, End: end, Accepted: n == 1, Err: errText(err)})
			}
			write(false)
			emit(groupEvent{Ev: "running", Burst: b, Run: run})
			if run == 1 {
				time.Sleep(hold)
			}
			write(true)
			return fmt.Appendf(nil, "burst %d run %d", b, run), nil
		}
		wg.Go(func() {
			var calls sync.WaitGroup
			for range p.Goroutines {
				calls.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					v, shared, err := g.Do(ctx, "k", fn)
					emit(groupEvent{Ev: "done", Burst: b, Val: string(v), Shared: shared, Err: errText(err)})
				})
			}
			calls.Wait()
			emit(groupEvent{Ev: "burst", Burst: b})
		})
	}
	return in.Err()
}

// fencedNotBelow is a resource's write fenced by a lease: refused if a
// write with a higher fence was accepted before it.
var fencedNotBelow = redis.NewScript(`
local last = tonumber(redis.call('HGET', KEYS[1], 'last') or '0')
if tonumber(ARGV[1]) >= last then
  redis.call('HSET', KEYS[1], 'last', ARGV[1])
  return 1
end
return 0`)

// groupQueued waits until n callers wait in line for the Group key name.
func groupQueued(ctx context.Context, c *dlock.Client, name string, n int) error {
	for {
		s, err := c.Inspect(ctx, dlock.KindGroup, name)
		if err != nil {
			return err
		}
		if s.Queued >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// groupProc is a group worker process.
type groupProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan groupEvent
}

func startGroupProc(t *testing.T, lockAddr string, resSrv *redistest.Server, p workerParams) *groupProc {
	t.Helper()
	cmd := workerOn(t, "group", "", lockAddr, resSrv, p)
	stdin, events := startEvents(t, cmd, func(line string) groupEvent {
		return groupEvent{Ev: "error", Err: "unreadable line " + line}
	})
	return &groupProc{cmd: cmd, stdin: stdin, events: events}
}

// groupBurst is what the test saw of one burst.
type groupBurst struct {
	runs     int64          // how many times fn ran, as counted in the resource's Redis
	values   map[string]int // the values the surviving callers got, and how many got each
	unshared int            // callers that got shared false
	errs     []string       // the callers' errors
	wrote    []groupEvent   // fn's fenced writes
}

// runGroupBurst runs burst b in every process of procs, and does what
// fault says to the process whose fn runs first once it runs: "" nothing,
// "kill" SIGKILL, "stop" SIGSTOP until the next run began, then SIGCONT.
// It returns what the processes still running reported, and the procs left.
func runGroupBurst(t *testing.T, res *redis.Client, procs []*groupProc, b int, hold time.Duration, fault string) (groupBurst, []*groupProc) {
	t.Helper()
	for _, gp := range procs {
		if _, err := fmt.Fprintf(gp.stdin, "go %d %d %d\n", b, hold.Milliseconds(), len(procs)-1); err != nil {
			t.Fatal(err)
		}
	}
	out := groupBurst{values: map[string]int{}}
	events := make(chan struct {
		gp *groupProc
		e  groupEvent
	}, 10000)
	for _, gp := range procs {
		go func() {
			for e := range gp.events {
				events <- struct {
					gp *groupProc
					e  groupEvent
				}{gp, e}
				if e.Ev == "burst" {
					return
				}
			}
		}()
	}
	var stopped *groupProc
	left := len(procs)
	// The stopped runner's callers return before its function does: its
	// write at the end, which must be refused, comes after them.
	lateWrite := fault == "stop"
	timeout := time.After(60 * time.Second)
	for left > 0 {
		var ev struct {
			gp *groupProc
			e  groupEvent
		}
		select {
		case ev = <-events:
		case <-timeout:
			t.Fatalf("burst %d: %d processes did not end it within 60s", b, left)
		}
		e := ev.e
		switch e.Ev {
		case "running":
			switch {
			case e.Run == 1 && fault == "kill":
				if err := ev.gp.cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				left--
				procs = without(procs, ev.gp)
			case e.Run == 1 && fault == "stop":
				if err := ev.gp.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				stopped = ev.gp
			case e.Run == 2 && stopped != nil:
				if err := stopped.cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
			}
		case "wrote":
			out.wrote = append(out.wrote, e)
			if e.Run == 1 && e.End {
				lateWrite = false
			}
		case "done":
			if e.Err != "" {
				out.errs = append(out.errs, e.Err)
				break
			}
			out.values[e.Val]++
			if !e.Shared {
				out.unshared++
			}
		case "burst":
			left--
		default:
			t.Fatalf("burst %d: %+v", b, e)
		}
	}
	for lateWrite {
		select {
		case e := <-stopped.events:
			if e.Ev != "wrote" {
				t.Fatalf("burst %d: the stopped runner, after its callers returned: %+v", b, e)
			}
			out.wrote = append(out.wrote, e)
			lateWrite = !(e.Run == 1 && e.End)
		case <-timeout:
			t.Fatalf("burst %d: the stopped runner's function did not end within 60s", b)
		}
	}
	runs, err := res.Get(context.Background(), "runs:"+strconv.Itoa(b)).Int64()
	if err != nil {
		t.Fatal(err)
	}
	out.runs = runs
	return out, procs
}

func without(procs []*groupProc, gp *groupProc) []*groupProc {
	var rest []*groupProc
	for _, p := range procs {
		if p != gp {
			rest = append(rest, p)
		}
	}
	return rest
}

// TestGroupProcesses: 4 processes × 16 goroutines ask one key in bursts,
// through a fault proxy. A burst runs fn once, and every caller gets its
// value, also when the runner's write of the result or an acquire loses
// its reply (the Redis client sends it again), and when the first copy of
// the write reaches Redis after the next burst's (it leaves the newer
// result). With the runner killed mid-run, the next caller in line runs fn
// once more and the survivors all get that run's value; with the runner
// stopped past its lease, the same, and the stopped runner's late write is
// refused by its fence, its callers getting the second run's value.
func TestGroupProcesses(t *testing.T) {
	t.Parallel()
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	res, lock := resSrv.Client(t), lockSrv.Client(t)
	loadScripts(t, lock)
	proxy := faultproxy.Start(t, lockSrv.Addr)
	const procs, goroutines = 4, 16
	p := workerParams{Name: "cache", TTL: 2 * time.Second, Goroutines: goroutines}
	var all []*groupProc
	for range procs {
		all = append(all, startGroupProc(t, proxy.Addr(), resSrv, p))
	}
	bursts := []struct {
		fault string
		hold  time.Duration
		runs  int64
	}{
		{"", 50 * time.Millisecond, 1},
		{"lost share reply", 50 * time.Millisecond, 1},
		{"lost acquire reply", 50 * time.Millisecond, 1},
		{"late share", 50 * time.Millisecond, 1},
		{"", 50 * time.Millisecond, 1}, // the late share reaches Redis after it
		{"kill", 5 * time.Second, 2},
		{"", 50 * time.Millisecond, 1},
		{"stop", 5 * time.Second, 2},
		{"", 50 * time.Millisecond, 1},
	}
	var held *faultproxy.Injection // the late share, until the burst after its own
	for b, want := range bursts {
		n := len(all)
		var in *faultproxy.Injection
		switch want.fault {
		case "lost share reply":
			in = proxy.Inject(faultproxy.Rule{Match: script("group_share"), Fault: faultproxy.DropReply, Times: 1})
		case "lost acquire reply":
			in = proxy.Inject(faultproxy.Rule{Match: script("acquire"), Fault: faultproxy.DropReply, Times: 1})
		case "late share":
			in = proxy.Inject(faultproxy.Rule{Match: script("group_share"), Fault: faultproxy.HoldRequest, Times: 1})
		}
		got, rest := runGroupBurst(t, res, all, b, want.hold, want.fault)
		all = rest
		if in != nil {
			checkHit(t, in)
		}
		if held != nil {
			deliver(t, held)
			held = nil
			if v := lock.HGet(context.Background(), "dlock:group:{cache/k}:result", "v").Val(); v != fmt.Sprintf("burst %d run 1", b) {
				t.Errorf("burst %d: after the previous burst's late share the result is %q, want this burst's", b, v)
			}
		}
		if want.fault == "late share" {
			held = in
		}
		if want.fault == "kill" {
			n--
		}
		final := fmt.Sprintf("burst %d run %d", b, want.runs)
		what := fmt.Sprintf("burst %d (%s)", b, orNone(want.fault))
		if got.runs != want.runs {
			t.Errorf("%s: fn ran %d times, want %d", what, got.runs, want.runs)
		}
		if len(got.errs) > 0 || len(got.values) != 1 || got.values[final] != n*goroutines {
			first := ""
			if len(got.errs) > 0 {
				first = got.errs[0]
			}
			t.Errorf("%s: the callers got %v and %d errors (the first: %s); want all %d %q", what, got.values, len(got.errs), first, n*goroutines, final)
		}
		if got.unshared != 1 {
			t.Errorf("%s: %d callers ran fn themselves, want 1", what, got.unshared)
		}
		for _, w := range got.wrote {
			late := want.fault == "stop" && w.Run == 1 && w.End
			if w.Accepted == late || w.Err != "" {
				t.Errorf("%s: run %d's write at its %s accepted %v (%s), want %v", what, w.Run, map[bool]string{false: "start", true: "end"}[w.End], w.Accepted, w.Err, !late)
			}
		}
		if writes := 2*int(want.runs) - map[string]int{"kill": 1}[want.fault]; len(got.wrote) != writes {
			t.Errorf("%s: %d writes of fn, want %d", what, len(got.wrote), writes)
		}
	}
}

// orNone returns s, or "no fault" if s is empty.
func orNone(s string) string {
	if s == "" {
		return "no fault"
	}
	return s
}
