package main

// The singleflight section: work done once for a burst of callers across
// processes. 4 worker processes × 16 goroutines ask one key at once, and
// the function takes 50 ms; dlock's Group.Do beside the hand-rolled way,
// "take a lock with SET NX; who gets it computes and fills the cache; the
// others read the cache every 10 ms until it is there". Each burst asks a
// key of its own, so every burst starts from an empty cache.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// The section's shape.
const (
	sfProcs      = 4
	sfGoroutines = 16
	sfWork       = 50 * time.Millisecond // the function's run
	sfPoll       = 10 * time.Millisecond // the baseline's cache reads
)

// sfSystems are the ways compared, as the worker's -system names them.
var sfSystems = []struct{ system, lib, variant string }{
	{"dlock", "dlock", "Group.Do"},
	{"poll", "hand-rolled", "SET NX + poll cache 10 ms"},
}

// runSingleflight runs bursts of each way and returns a row for each.
func runSingleflight(cfg config, bursts int, stops *stopper) ([]result, error) {
	var rows []result
	for _, s := range sfSystems {
		r, err := sfRun(cfg, s.system, bursts, stops)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.system, err)
		}
		r.Scenario, r.Library, r.Variant = "singleflight", s.lib, s.variant
		rows = append(rows, r)
	}
	return rows, nil
}

// sfProc is one worker process.
type sfProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func sfStart(system, addr string, stops *stopper) (*sfProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &sfProc{lines: make(chan string, 1024)}
	p.cmd = exec.Command(exe, "-system", system, "-addr", addr)
	p.cmd.Env = append(os.Environ(), workerEnv+"=singleflight")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stderr = os.Stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	stops.add(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	return p, nil
}

// sfRun runs bursts of one way and measures, over all of them: the runs of
// the function per burst, the callers' latency from the moment the result
// was ready (the function returned, or the baseline's cache was filled) to
// their call's return (one machine, one clock), and Redis's commands per
// burst (INFO commandstats, commands inside scripts included).
func sfRun(cfg config, system string, bursts int, stops *stopper) (result, error) {
	var procs []*sfProc
	for range sfProcs {
		p, err := sfStart(system, cfg.addr, stops)
		if err != nil {
			return result{}, err
		}
		procs = append(procs, p)
	}
	defer func() {
		for _, p := range procs {
			_ = p.stdin.Close()
			_ = p.cmd.Wait()
		}
	}()
	ctx := context.Background()
	var lats []time.Duration
	var runs, cmds []float64
	for b := range bursts {
		settle(cfg.admin)
		before, err := snapshot(ctx, cfg.admin)
		if err != nil {
			return result{}, err
		}
		for _, p := range procs {
			if _, err := fmt.Fprintf(p.stdin, "burst %d\n", b); err != nil {
				return result{}, err
			}
		}
		var ready int64
		var ends []int64
		for _, p := range procs {
			for line := range p.lines {
				what, rest, _ := strings.Cut(line, " ")
				ns, _ := strconv.ParseInt(rest, 10, 64)
				switch what {
				case "ready":
					ready = max(ready, ns)
				case "done":
					ends = append(ends, ns)
				case "error":
					return result{}, errors.New(rest)
				}
				if what == "end" {
					break
				}
			}
		}
		after, err := snapshot(ctx, cfg.admin)
		if err != nil {
			return result{}, err
		}
		n, err := cfg.admin.Get(ctx, fmt.Sprintf("sf:runs:%s:%d", system, b)).Int64()
		if err != nil {
			return result{}, fmt.Errorf("burst %d: the runs of the function: %w", b, err)
		}
		if len(ends) != sfProcs*sfGoroutines || ready == 0 {
			return result{}, fmt.Errorf("burst %d: %d calls returned, the result ready at %d; want %d", b, len(ends), ready, sfProcs*sfGoroutines)
		}
		for _, e := range ends {
			lats = append(lats, time.Duration(max(0, e-ready)))
		}
		runs = append(runs, float64(n))
		cmds = append(cmds, float64(after.sub(before).calls))
	}
	slices.Sort(lats)
	r := result{
		P50us: f(us(pct(lats, 0.50))), P99us: f(us(pct(lats, 0.99))),
		RunsPerBurst: f(median(runs)), RunsPerBurstMax: f(slices.Max(runs)),
		RedisCommandsPerOp: f(median(cmds)), Samples: bursts,
	}
	return r, nil
}

// sfWorker runs one process's callers, one burst per line "burst B" on its
// stdin: sfGoroutines calls at once for the key of burst B. It prints
// "ready NS" when the function's result is ready, "done NS" as each call
// returns, and "end" after the burst.
func sfWorker(system, addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4 * sfGoroutines})
	defer rdb.Close()
	var g *dlock.Group
	if system == "dlock" {
		c, err := dlock.New(rdb)
		if err != nil {
			return err
		}
		defer c.Close()
		g = c.Group("sf")
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var b int
		if _, err := fmt.Sscanf(in.Text(), "burst %d", &b); err != nil {
			return err
		}
		key := strconv.Itoa(b)
		compute := func(ctx context.Context) ([]byte, error) {
			if err := rdb.Incr(ctx, fmt.Sprintf("sf:runs:%s:%d", system, b)).Err(); err != nil {
				return nil, err
			}
			time.Sleep(sfWork)
			return []byte("the value of " + key), nil
		}
		var wg sync.WaitGroup
		for range sfGoroutines {
			wg.Go(func() {
				ctx := context.Background()
				var err error
				if g != nil {
					_, _, err = g.Do(ctx, key, func(ctx context.Context) ([]byte, error) {
						v, err := compute(ctx)
						say("ready %d", time.Now().UnixNano())
						return v, err
					})
				} else {
					_, err = sfPollCall(ctx, rdb, key, compute, func() { say("ready %d", time.Now().UnixNano()) })
				}
				if err != nil {
					say("error %s", strings.ReplaceAll(err.Error(), "\n", " "))
					return
				}
				say("done %d", time.Now().UnixNano())
			})
		}
		wg.Wait()
		say("end")
		mu.Lock()
		err := out.Flush()
		mu.Unlock()
		if err != nil {
			return err
		}
	}
	return in.Err()
}

// sfPollCall is the hand-rolled way: read the cache; if it is empty, take
// the lock with SET NX and, if it is taken, compute, fill the cache and
// delete the lock; else read the cache again every sfPoll.
func sfPollCall(ctx context.Context, rdb *redis.Client, key string, compute func(context.Context) ([]byte, error), ready func()) ([]byte, error) {
	cache, lock := "sf:cache:"+key, "sf:lock:"+key
	for {
		v, err := rdb.Get(ctx, cache).Bytes()
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, redis.Nil) {
			return nil, err
		}
		ok, err := rdb.SetNX(ctx, lock, "1", 10*time.Second).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			v, err := compute(ctx)
			if err == nil {
				err = rdb.Set(ctx, cache, v, time.Minute).Err()
				ready()
			}
			return v, errors.Join(err, rdb.Del(ctx, lock).Err())
		}
		time.Sleep(sfPoll)
	}
}

// sfSection renders the section.
func sfSection(o output) string {
	var rows []result
	for _, r := range o.Results {
		if r.Scenario == "singleflight" {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## 3d. Work done once: %d processes × %d goroutines ask one key at once, the function takes %v\n\n", sfProcs, sfGoroutines, sfWork)
	b.WriteString("| library | way | runs of the function per burst (median, max) | callers' latency after the result is ready, p50 | p99 | Redis commands per burst (incl. in scripts) | bursts |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s, %s | %s µs | %s µs | %s | %d |\n", r.Library, r.Variant,
			num(r.RunsPerBurst, "%.0f"), num(r.RunsPerBurstMax, "%.0f"), num(r.P50us, "%.0f"), num(r.P99us, "%.0f"),
			num(r.RedisCommandsPerOp, "%.0f"), r.Samples)
	}
	b.WriteString("\nThe hand-rolled callers wake when their next 10 ms read finds the cache filled; " +
		"dlock's are woken by Redis, one process after another in the order they asked, " +
		"and a process's callers share one wait.\n")
	return b.String()
}
