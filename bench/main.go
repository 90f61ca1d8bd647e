// Command bench compares dlock with other Go Redis lock libraries in one run
// on one private redis-server; see README.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis/rueidislock"
)

// result is one row of latest.json. Where a figure has a spread, the plain
// field is the median over Samples slices (uncontended, parallel,
// cluster-parallel) or rounds
// (contended), and the _min/_max fields are the extremes over them.
type result struct {
	Scenario   string   `json:"scenario"`
	Library    string   `json:"library"`
	Variant    string   `json:"variant"`
	OpsPerS    *float64 `json:"ops_per_s,omitempty"`
	OpsPerSMin *float64 `json:"ops_per_s_min,omitempty"`
	OpsPerSMax *float64 `json:"ops_per_s_max,omitempty"`
	// OpsVsRaw: median over slices of the ratio to raw's figure in the same
	// pass; P50VsRaw: median over slices of the ratio of p50s with this
	// library's operations alternating one by one with raw's; OpsVsSingle (cluster-parallel) likewise to the single
	// redis-server's.
	OpsVsRaw    *float64 `json:"ops_vs_raw,omitempty"`
	OpsVsSingle *float64 `json:"ops_vs_single,omitempty"`
	P50us       *float64 `json:"p50_us,omitempty"`
	P50usMin    *float64 `json:"p50_us_min,omitempty"`
	P50usMax    *float64 `json:"p50_us_max,omitempty"`
	P50VsRaw    *float64 `json:"p50_vs_raw,omitempty"`
	// P50VsRedislock (dlock's default Client, uncontended): the median over
	// slices of the ratio of its p50 to redislock's, their operations
	// alternating one by one; PairedSamples is how many slices.
	P50VsRedislock *float64 `json:"p50_vs_redislock,omitempty"`
	PairedSamples  int      `json:"paired_samples,omitempty"`
	P99us          *float64 `json:"p99_us,omitempty"`
	GapP50us       *float64 `json:"gap_p50_us,omitempty"`
	GapP50usMin    *float64 `json:"gap_p50_us_min,omitempty"`
	GapP50usMax    *float64 `json:"gap_p50_us_max,omitempty"`
	MaxWaitus      *float64 `json:"max_wait_us,omitempty"`
	MeanWaitus     *float64 `json:"mean_wait_us,omitempty"`
	ShareMin       *float64 `json:"share_min,omitempty"`
	ShareMax       *float64 `json:"share_max,omitempty"`
	// RequestsPerOp: requests the library's clients sent, counted in the
	// client; RoundTripsPerOp: their round trips (a pipeline is one);
	// RedisCommandsPerOp: commands Redis executed (INFO commandstats delta,
	// commands inside Lua scripts included).
	RequestsPerOp *float64 `json:"requests_per_op,omitempty"`
	// ExtendsPerOp: of RequestsPerOp, dlock's renewals and the extends that
	// lengthen a lease a release granted (counted by its Extended hook): off
	// the path that gates the next holder.
	ExtendsPerOp *float64 `json:"extends_per_op,omitempty"`
	// HeldPerOp: of RequestsPerOp, dlock's acquire calls that found the lock
	// held (a waiter registering or renewing its registration): not on the
	// path that gates the next holder either.
	HeldPerOp *float64 `json:"held_per_op,omitempty"`
	// AllocsPerOp, BytesPerOp: heap allocations and bytes the whole process
	// made per op while only this library ran (runtime.MemStats deltas over
	// its uncontended slices).
	AllocsPerOp        *float64 `json:"allocs_per_op,omitempty"`
	BytesPerOp         *float64 `json:"bytes_per_op,omitempty"`
	RoundTripsPerOp    *float64 `json:"round_trips_per_op,omitempty"`
	RedisCommandsPerOp *float64 `json:"redis_commands_per_op,omitempty"`
	RedisCPUusPerOp    *float64 `json:"redis_cpu_us_per_op,omitempty"`
	// ServerCPUusPerOp (etcd rows): the CPU time of the etcd process per op
	// (utime + stime from /proc), where the Redis rows have RedisCPUusPerOp.
	ServerCPUusPerOp *float64 `json:"server_cpu_us_per_op,omitempty"`
	// RedisWorkUsPerOp is the commandstats time of the commands the client
	// sent (a script's includes the commands it calls), per op.
	RedisWorkUsPerOp  *float64 `json:"redis_work_us_per_op,omitempty"`
	ReplicaCPUusPerOp *float64 `json:"replica_cpu_us_per_op,omitempty"` // cluster-parallel: the replicas' CPU; RedisCPUusPerOp is the primaries'
	// RunsPerBurst (singleflight): the median over bursts of how many times
	// the function ran for one burst of callers; RunsPerBurstMax the most.
	RunsPerBurst    *float64 `json:"runs_per_burst,omitempty"`
	RunsPerBurstMax *float64 `json:"runs_per_burst_max,omitempty"`
	MutexOK         *bool    `json:"mutex_ok,omitempty"`
	Samples         int      `json:"samples,omitempty"`     // slices or rounds the medians are over
	NotCounted      []string `json:"not_counted,omitempty"` // fields left out because they could not be counted

	errors      int64
	gapP99      float64
	selfPct     float64
	pubsubPerOp float64 // part of RequestsPerOp taken from commandstats (pub/sub (un)subscribe)
}

func f(x float64) *float64 { return &x }

type output struct {
	Machine  map[string]any    `json:"machine"`
	Versions map[string]string `json:"versions"`
	Results  []result          `json:"results"`
	Cluster  *clusterOut       `json:"cluster,omitempty"`
	Queues   []queueResult     `json:"queues,omitempty"`
	Keys     *keysOut          `json:"keys,omitempty"`
	Etcd     *etcdOut          `json:"etcd,omitempty"`
}

func main() {
	if role := os.Getenv(workerEnv); role != "" {
		os.Exit(runWorker(role, os.Args[1:]))
	}
	quick := flag.Bool("quick", false, "short run (about 2.5 minutes)")
	addr := flag.String("redis", "", "use this redis-server (host:port) instead of starting one; it must be private")
	out := flag.String("out", "", "also write the Markdown report to this file")
	jsonPath := flag.String("json", "results/latest.json", "write JSON results here (empty: skip)")
	svgPath := flag.String("svg", "results/latest.svg", "write the SVG chart here (empty: skip)")
	stall := flag.Duration("stall", 0, "stop with every goroutine's stack when one section runs this long (0: 20m, 5m with -quick)")
	only := flag.String("only", "", `run one section alone: "etcd" or "singleflight" (results/latest.json and latest.svg are then left alone unless -json or -svg is given)`)
	flag.Parse()
	if *only != "" && *only != "etcd" && *only != "singleflight" {
		fatal(fmt.Errorf("-only %q: the sections that run alone are \"etcd\" and \"singleflight\"", *only))
	}
	if *only != "" {
		given := map[string]bool{}
		flag.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
		if !given["json"] {
			*jsonPath = ""
		}
		if !given["svg"] {
			*svgPath = ""
		}
	}
	// The etcd section cannot run without etcd: say so now, not after the
	// sections before it.
	if _, err := etcdBinary(); err != nil && *only != "singleflight" {
		fatal(fmt.Errorf("etcd section: %w", err))
	}

	cfg := config{slice: 300 * time.Millisecond, perVariant: 6 * time.Second, csWindow: 3 * time.Second, csRounds: 3, periods: 10, scaleLocks: 10000, clusterLocks: 10000}
	etcdN := etcdRounds{resign: 20, kill: 10}
	if *quick {
		cfg = config{slice: 200 * time.Millisecond, perVariant: 1200 * time.Millisecond, csWindow: 600 * time.Millisecond, csRounds: 2, periods: 3, scaleLocks: 10000, clusterLocks: 1000}
		etcdN = etcdRounds{resign: 5, kill: 2}
	}
	// stops kills the redis-servers this program starts and removes their
	// dirs: at the end, on a fatal error or on an interrupt. With -redis the
	// single server is not started here, so it is not stopped either.
	stops := &stopper{}
	defer stops.run()
	if *addr == "" {
		dir, err := os.MkdirTemp("", "dlock-bench-redis-")
		if err != nil {
			fatal(err)
		}
		srv, err := redistest.Launch(dir)
		if err != nil {
			_ = os.RemoveAll(dir)
			fatal(err)
		}
		*addr = srv.Addr
		stops.add(func() {
			_ = srv.Close()
			_ = os.RemoveAll(dir)
		})
	}
	// A section that runs far past its expected length has a call that
	// never returns: the run stops with every goroutine's stack, so that the
	// culprit is named, instead of hanging until an outer timeout kills it
	// without a word.
	if *stall == 0 {
		*stall = 20 * time.Minute
		if *quick {
			*stall = 5 * time.Minute
		}
	}
	section := watchdog(*stall, stops)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	go func() { <-sig; stops.run(); os.Exit(130) }()
	exitErr := func(err error) { stops.run(); fatal(err) }

	cfg.addr = *addr
	cfg.admin = redis.NewClient(&redis.Options{Addr: *addr, PoolSize: 1})
	defer cfg.admin.Close()
	began := time.Now()
	vs := allVariants()
	if v, err := scriptFree(cfg.addr); err == nil {
		vs = append(vs, v)
	} else {
		fmt.Fprintln(os.Stderr, "dlock/noscripts (WithoutScripts) left out:", err)
	}
	var res []result

	var (
		fl     floors
		queues []queueResult
		scales []scaleResult
		keys   *keysOut
		clu    *clusterOut
	)
	if *only == "" {
		var r []result
		var err error
		section("uncontended + floors")
		r, fl, err = runUncontended(cfg, vs)
		if err != nil {
			exitErr(err)
		}
		res = append(res, r...)
		section("parallel")
		r, err = runParallel(cfg, vs, 64)
		if err != nil {
			exitErr(err)
		}
		res = append(res, r...)
		for _, think := range []bool{false, true} {
			settle(cfg.admin)
			section(fmt.Sprint("contended, think = ", think))
			r, err = runContended(cfg, vs, 16, think)
			if err != nil {
				exitErr(err)
			}
			res = append(res, r...)
		}
		settle(cfg.admin)
		section("multilock")
		mr, err := runMulti(cfg, 8, 4)
		if err != nil {
			exitErr(err)
		}
		res = append(res, mr)
		section("long queues")
		reps := 9
		if *quick {
			reps = 3
		}
		queues, err = runQueues(cfg, 10, 10000, reps)
		if err != nil {
			exitErr(err)
		}
		section("singleflight")
		bursts := 20
		if *quick {
			bursts = 5
		}
		r, err = runSingleflight(cfg, bursts, stops)
		if err != nil {
			exitErr(fmt.Errorf("singleflight: %w", err))
		}
		res = append(res, r...)
		section("scale")
		sd, err := runScale(cfg, "dlock", "default", openDlock(dlock.WithTTL(3*time.Second)), time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, "scale dlock:", err)
		} else {
			scales = append(scales, sd)
		}
		sr, err := runScale(cfg, "rueidislock", "aggressive", openRueidis(rueidislock.LockerOption{
			KeyMajority: 1, NoLoopTracking: true, KeyValidity: 3 * time.Second, ExtendInterval: time.Second}), time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, "scale rueidislock:", err)
		} else {
			scales = append(scales, sr)
		}
		for _, s := range scales {
			r := result{Scenario: "scale", Library: s.lib, Variant: s.variant,
				RedisCommandsPerOp: f(s.cmdsPerPeriod / float64(s.locks)), MutexOK: ptrBool(s.lost == 0)}
			if s.reqPerPeriod >= 0 {
				r.RequestsPerOp = f(s.reqPerPeriod / float64(s.locks))
			} else {
				r.NotCounted = append(r.NotCounted, "requests_per_op")
			}
			if s.rtPerPeriod >= 0 {
				r.RoundTripsPerOp = f(s.rtPerPeriod / float64(s.locks))
			} else {
				r.NotCounted = append(r.NotCounted, "round_trips_per_op")
			}
			res = append(res, r)
		}
		settle(cfg.admin)
		section("keys")
		// Each library's load runs 20 s: keys that an operation writes for 10 s
		// (a key per release, as dlock's release markers were) expire in numbers
		// only some seconds after that, and their expiry is what stalls Redis (at
		// 25k operations a second, this machine's expire cycle first ran long
		// after 16 to 20 s).
		// The quick run's 4 s shows how many keys there are, not what expiring
		// them costs.
		keysIdle, keysLoadFor := 3*time.Second, 20*time.Second
		if *quick {
			keysIdle, keysLoadFor = time.Second, 4*time.Second
		}
		keys, r, err = runKeys(cfg, keysIdle, keysLoadFor)
		if err != nil {
			fmt.Fprintln(os.Stderr, "keys:", err)
		}
		res = append(res, r...)
		section("cluster")
		r, clu, err = runCluster(cfg, stops)
		if err != nil {
			exitErr(fmt.Errorf("cluster: %w", err))
		}
		res = append(res, r...)
		section("redlock")
		r, err = runRedLock(cfg, stops)
		if err != nil {
			exitErr(fmt.Errorf("redlock: %w", err))
		}
		res = append(res, r...)
	}
	var eo *etcdOut
	if *only == "singleflight" {
		section("singleflight")
		r, err := runSingleflight(cfg, 20, stops)
		if err != nil {
			exitErr(fmt.Errorf("singleflight: %w", err))
		}
		res = append(res, r...)
	} else {
		section("etcd")
		var r []result
		var err error
		r, eo, err = runEtcd(cfg, stops, etcdN)
		if err != nil {
			exitErr(fmt.Errorf("etcd: %w", err))
		}
		res = append(res, r...)
	}
	section("report")

	ctx := context.Background()
	o := output{
		Machine: map[string]any{
			"go": runtime.Version(), "goos": runtime.GOOS, "goarch": runtime.GOARCH,
			"num_cpu": runtime.NumCPU(), "gomaxprocs": runtime.GOMAXPROCS(0),
			"redis_server": serverVersion(ctx, cfg.admin), "ping_p50_us": us(fl.pingP50), "ping_p99_us": us(fl.pingP99),
			"noop_scripts_p50_us": us(fl.scriptsP50), "noop_scripts_vs_raw": fl.scriptsVsRaw,
			"command": commandLine(), "quick": *quick, "started": began.UTC().Format(time.RFC3339),
			"duration_s": time.Since(began).Seconds(),
		},
		Versions: versions(),
		Results:  res,
		Cluster:  clu,
		Queues:   queues,
		Keys:     keys,
		Etcd:     eo,
	}
	md := report(o, scales)
	switch *only {
	case "etcd":
		md = etcdReport(o)
	case "singleflight":
		md = "# dlock bench: the singleflight section alone\n\n" + environment(o) + sfSection(o)
	}
	fmt.Print(md)
	if *out != "" {
		writeFile(*out, []byte(md))
	}
	if *jsonPath != "" {
		b, _ := json.MarshalIndent(o, "", "  ")
		writeFile(*jsonPath, append(b, '\n'))
	}
	if *svgPath != "" {
		writeFile(*svgPath, []byte(chart(o)))
	}
	for _, r := range o.Results {
		if r.MutexOK != nil && !*r.MutexOK {
			fmt.Fprintf(os.Stderr, "bench: %s %s/%s broke mutual exclusion or lost leases; see the report\n", r.Scenario, r.Library, r.Variant)
			stops.run()
			os.Exit(3)
		}
	}
}

func ptrBool(b bool) *bool { return &b }

func commandLine() string {
	args := append([]string{"go", "run", "."}, os.Args[1:]...)
	return "cd bench && " + strings.Join(args, " ")
}

func versions() map[string]string {
	v := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/dlock-go/dlock", "github.com/go-redsync/redsync/v4", "github.com/bsm/redislock",
			"github.com/redis/rueidis", "github.com/redis/go-redis/v9", "go.etcd.io/etcd/client/v3":
			ver := d.Version
			if d.Replace != nil {
				ver += " => " + d.Replace.Path
				if d.Replace.Version != "" {
					ver += " " + d.Replace.Version
				}
			}
			v[d.Path] = ver
		}
	}
	return v
}

func writeFile(path string, b []byte) {
	if dir := filepath.Dir(path); dir != "" {
		_ = os.MkdirAll(dir, 0o755)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "write:", err)
	}
}

// watchdog returns a function that starts a section of the run: it prints
// its name, and if the section is still running stall later (the next one has
// not started), prints every goroutine's stack, runs stops and exits.
func watchdog(stall time.Duration, stops *stopper) func(name string) {
	var timer *time.Timer
	return func(name string) {
		fmt.Fprintln(os.Stderr, name, "...")
		if timer != nil {
			timer.Stop()
		}
		timer = time.AfterFunc(stall, func() {
			buf := make([]byte, 16<<20)
			buf = buf[:runtime.Stack(buf, true)]
			fmt.Fprintf(os.Stderr, "\n!!!!! bench: section %q has run for %v: stopped; every goroutine's stack follows !!!!!\n\n%s\n", name, stall, buf)
			stops.run()
			os.Exit(3)
		})
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
