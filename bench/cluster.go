package main

// The Redis Cluster scenarios: dlock on a cluster of redis-servers started on
// this machine, next to dlock on the single redis-server of the other
// scenarios.

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

const (
	clusterPrimaries    = 3
	clusterReplicasEach = 1
	clusterWorkers      = 64   // cluster-parallel: goroutines
	clusterNames        = 1024 // cluster-parallel: distinct lock names, spread over the slots
	// renewBatch is the most leases dlock renews in one round trip to one
	// server (maxBatch in dlock's protocol.go).
	renewBatch = 128
)

// clusterOut is the "cluster" object of latest.json: the cluster's shape and
// what cluster-renewal counted on each primary.
type clusterOut struct {
	Primaries    int     `json:"primaries"`
	ReplicasEach int     `json:"replicas_each"`
	StartupS     float64 `json:"startup_s"` // LaunchCluster: start the servers, form the cluster, wait until it is settled
	Names        int     `json:"parallel_names"`
	Workers      int     `json:"parallel_goroutines"`
	Leases       int     `json:"renewal_leases"`
	Periods      int     `json:"renewal_periods"`
	AcquireS     float64 `json:"renewal_acquire_s"` // taking every lease, 64 goroutines
	// LeasesLost: leases whose Err was not nil after the periods, or whose
	// Unlock failed.
	LeasesLost int               `json:"renewal_leases_lost"`
	PerPrimary []primaryRenewals `json:"renewal_per_primary"`
}

// primaryRenewals is what cluster-renewal counted on one primary. Client
// figures come from a hook on the ClusterClient's per-node client for the
// primary; Redis figures from the primary's INFO deltas over the same span.
type primaryRenewals struct {
	Addr               string   `json:"addr"`
	Slots              string   `json:"slots"` // e.g. "0-5460"
	Leases             int      `json:"leases"`
	SlotsWithLeases    int      `json:"slots_with_leases"`
	ScriptCalls        float64  `json:"script_calls_per_period"`         // EVALSHA + EVAL sent
	RoundTrips         float64  `json:"round_trips_per_period"`          // round trips that carried a script call
	OtherRequests      float64  `json:"other_requests_per_period"`       // anything else sent (slot map reloads)
	ExpectedRoundTrips int      `json:"expected_round_trips_per_period"` // ⌈leases / renewBatch⌉
	LeasesPerRoundTrip float64  `json:"leases_per_round_trip"`           // leases / round trips per period
	RedisScriptCalls   float64  `json:"redis_script_calls_per_period"`   // evalsha + eval in commandstats
	RedisCommands      float64  `json:"redis_commands_per_period"`       // all of commandstats, incl. in scripts
	RedisCPUms         float64  `json:"redis_cpu_ms_per_period"`         // used_cpu_sys + used_cpu_user
	ReplicaCPUms       float64  `json:"replica_cpu_ms_per_period"`       // the same, on the primary's replicas
	ReplicaAddrs       []string `json:"replicas"`
}

// clusterEnv is a running cluster and a connection to each of its nodes for
// INFO.
type clusterEnv struct {
	c         *redistest.Cluster
	primaries []*redis.Client // in the order of their first slot
	replicas  map[string][]*redis.Client
	slots     map[string]string // "lo-hi" by primary address
}

func (e *clusterEnv) close() {
	for _, p := range e.primaries {
		_ = p.Close()
	}
	for _, rs := range e.replicas {
		for _, r := range rs {
			_ = r.Close()
		}
	}
}

// allReplicas returns the INFO connections of every replica.
func (e *clusterEnv) allReplicas() []*redis.Client {
	var out []*redis.Client
	for _, p := range e.primaries {
		out = append(out, e.replicas[p.Options().Addr]...)
	}
	return out
}

// runCluster starts a cluster of clusterPrimaries primaries with
// clusterReplicasEach replicas each in a temporary directory, runs
// cluster-parallel and cluster-renewal on it, and stops it. stops stops it
// too if the program ends first.
func runCluster(cfg config, stops *stopper) ([]result, *clusterOut, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "dlock-bench-cluster-")
	if err != nil {
		return nil, nil, err
	}
	t0 := time.Now()
	cl, err := redistest.LaunchCluster(dir, clusterPrimaries, clusterReplicasEach)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("start the cluster: %w", err)
	}
	stop := stops.add(func() {
		_ = cl.Close()
		_ = os.RemoveAll(dir)
	})
	defer stop()
	out := &clusterOut{Primaries: clusterPrimaries, ReplicasEach: clusterReplicasEach, StartupS: time.Since(t0).Seconds(),
		Names: clusterNames, Workers: clusterWorkers, Leases: cfg.clusterLocks, Periods: cfg.periods}
	fmt.Fprintf(os.Stderr, "  cluster of %d primaries × %d replica(s) started in %.1f s\n", clusterPrimaries, clusterReplicasEach, out.StartupS)

	env, err := openClusterEnv(ctx, cl)
	if err != nil {
		return nil, nil, err
	}
	defer env.close()

	fmt.Fprintln(os.Stderr, "  cluster-parallel ...")
	res, err := runClusterParallel(cfg, env)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintln(os.Stderr, "  cluster-renewal ...")
	row, err := runClusterRenewal(cfg, env, out)
	if err != nil {
		return nil, nil, err
	}
	return append(res, row), out, nil
}

// openClusterEnv connects to every node of cl and reads which slots each
// primary serves and which replicas it has.
func openClusterEnv(ctx context.Context, cl *redistest.Cluster) (*clusterEnv, error) {
	ps, err := cl.Primaries(ctx)
	if err != nil {
		return nil, err
	}
	env := &clusterEnv{c: cl, replicas: map[string][]*redis.Client{}, slots: map[string]string{}}
	for _, p := range ps {
		env.primaries = append(env.primaries, redis.NewClient(&redis.Options{Addr: p.Addr, PoolSize: 1}))
	}
	rdb := redis.NewClusterClient(cl.Options())
	defer rdb.Close()
	ranges, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		env.close()
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	for _, r := range ranges {
		if len(r.Nodes) == 0 {
			continue
		}
		primary := r.Nodes[0].Addr
		if s := env.slots[primary]; s != "" {
			env.slots[primary] = s + ","
		}
		env.slots[primary] += fmt.Sprintf("%d-%d", r.Start, r.End)
		if _, seen := env.replicas[primary]; seen {
			continue
		}
		env.replicas[primary] = nil
		for _, n := range r.Nodes[1:] {
			env.replicas[primary] = append(env.replicas[primary], redis.NewClient(&redis.Options{Addr: n.Addr, PoolSize: 1}))
		}
	}
	return env, nil
}

// snapshotSum is the sum of the counters of every server in rdbs.
func snapshotSum(ctx context.Context, rdbs []*redis.Client) (stats, error) {
	var sum stats
	for _, rdb := range rdbs {
		st, err := snapshot(ctx, rdb)
		if err != nil {
			return stats{}, fmt.Errorf("INFO on %s: %w", rdb.Options().Addr, err)
		}
		sum.addDelta(st)
	}
	return sum, nil
}

// ---------- cluster-parallel ----------

// runClusterParallel runs clusterWorkers goroutines of Lock + Unlock over
// clusterNames names, with dlock on the cluster and dlock on the single
// redis-server, in interleaved slices as runParallel does.
func runClusterParallel(cfg config, env *clusterEnv) ([]result, error) {
	ctx := context.Background()
	type side struct {
		variant  string
		lk       locker
		rc       *reqCounter
		servers  []*redis.Client // whose INFO counts: the cluster's primaries, or the single server
		replicas []*redis.Client
		ops      int64
		errs     atomic.Int64
		delta    stats
		replica  stats
		req      reqCounts
		sliceOps []float64
	}
	crc := &reqCounter{}
	crdb := redis.NewClusterClient(env.c.Options())
	crdb.AddHook(crc)
	cc, err := dlock.New(crdb)
	if err != nil {
		_ = crdb.Close()
		return nil, err
	}
	src := &reqCounter{}
	slk, err := openDlock()(cfg.addr, src)
	if err != nil {
		_ = cc.Close()
		_ = crdb.Close()
		return nil, err
	}
	sides := []*side{
		{variant: "cluster", lk: &dlockLocker{rdb: crdb, c: cc}, rc: crc, servers: env.primaries, replicas: env.allReplicas()},
		{variant: "single", lk: slk, rc: src, servers: []*redis.Client{cfg.admin}},
	}
	defer func() {
		for _, s := range sides {
			s.lk.close()
		}
	}()
	// Goroutine w takes names w, w+clusterWorkers, ... in turn, so no two
	// goroutines ask for one lock and nothing waits.
	keys := make([][]string, clusterWorkers)
	for i := range clusterNames {
		keys[i%clusterWorkers] = append(keys[i%clusterWorkers], fmt.Sprintf("clpar:%d", i))
	}
	for _, s := range sides {
		loopWorkers(s.lk, keys, 100*time.Millisecond, &s.errs) // warm-up: pools, scripts on every primary
	}
	slicesN := int(cfg.perVariant / cfg.slice)
	for n := range slicesN {
		for k := range sides {
			s := sides[(k+n)%len(sides)]
			before, err := snapshotSum(ctx, s.servers)
			if err != nil {
				return nil, err
			}
			rbefore, err := snapshotSum(ctx, s.replicas)
			if err != nil {
				return nil, err
			}
			rq := s.rc.snap()
			start := time.Now()
			ops := loopWorkers(s.lk, keys, cfg.slice, &s.errs)
			el := time.Since(start)
			s.req = s.req.add(s.rc.since(rq))
			after, err := snapshotSum(ctx, s.servers)
			if err != nil {
				return nil, err
			}
			rafter, err := snapshotSum(ctx, s.replicas)
			if err != nil {
				return nil, err
			}
			s.delta.addDelta(after.sub(before))
			s.replica.addDelta(rafter.sub(rbefore))
			s.ops += ops
			s.sliceOps = append(s.sliceOps, float64(ops)/el.Seconds())
		}
	}
	var res []result
	for _, s := range sides {
		if e := s.errs.Load(); e > 0 {
			fmt.Fprintf(os.Stderr, "cluster-parallel %s: %d errors\n", s.variant, e)
		}
		x := result{Scenario: "cluster-parallel", Library: "dlock", Variant: s.variant, Samples: slicesN, errors: s.errs.Load()}
		spread(s.sliceOps, &x.OpsPerS, &x.OpsPerSMin, &x.OpsPerSMax)
		setCounts(&x, s.req, s.delta, float64(s.ops))
		if s.variant == "cluster" {
			x.OpsVsSingle = pairRatio(s.sliceOps, sides[1].sliceOps)
			if s.ops > 0 && len(s.replicas) > 0 {
				x.ReplicaCPUusPerOp = f(s.replica.cpu * 1e6 / float64(s.ops))
			}
		}
		res = append(res, x)
	}
	return res, nil
}

// ---------- cluster-renewal ----------

// nodeCounter counts, in a hook on the ClusterClient's client for one node,
// the script calls (EVALSHA, EVAL) sent to that node, the round trips
// that carried them (a command, or a whole pipeline, holding at least one)
// and everything else sent.
type nodeCounter struct {
	calls, rts, other atomic.Int64
}

func isScript(cmd redis.Cmder) bool {
	name := strings.ToLower(cmd.Name())
	return name == "evalsha" || name == "eval"
}

func (c *nodeCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *nodeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			c.calls.Add(1)
			c.rts.Add(1)
		} else {
			c.other.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *nodeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var n int64
		for _, cmd := range cmds {
			if isScript(cmd) {
				n++
			}
		}
		c.calls.Add(n)
		c.other.Add(int64(len(cmds)) - n)
		if n > 0 {
			c.rts.Add(1)
		}
		return next(ctx, cmds)
	}
}

// runClusterRenewal holds cfg.clusterLocks dlock leases with a TTL of 3 s on
// the cluster, counts on each primary what renewing them takes over
// cfg.periods renewal periods, and checks that none was lost. It fills out's
// renewal fields and returns the cluster-renewal row.
func runClusterRenewal(cfg config, env *clusterEnv, out *clusterOut) (result, error) {
	const period = time.Second // renewal every TTL/3
	ctx := context.Background()
	row := result{Scenario: "cluster-renewal", Library: "dlock", Variant: "cluster"}
	rdb := redis.NewClusterClient(env.c.Options())
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithTTL(3*period))
	if err != nil {
		return row, err
	}
	defer c.Close()

	// Where each lease lives: dlock keeps the lock named N under the key
	// dlock:{N} (the package documentation, "Keys"), in the slot of N.
	names := make([]string, cfg.clusterLocks)
	slotCmds := make([]*redis.IntCmd, len(names))
	_, err = env.primaries[0].Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range names {
			names[i] = fmt.Sprintf("clren:%d", i)
			slotCmds[i] = p.ClusterKeySlot(ctx, "dlock:{"+names[i]+"}")
		}
		return nil
	})
	if err != nil {
		return row, fmt.Errorf("CLUSTER KEYSLOT: %w", err)
	}
	owner := map[int64]string{} // slot: primary address
	ranges, err := env.primaries[0].ClusterSlots(ctx).Result()
	if err != nil {
		return row, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	for _, r := range ranges {
		for s := r.Start; s <= r.End && len(r.Nodes) > 0; s++ {
			owner[int64(s)] = r.Nodes[0].Addr
		}
	}
	leasesOn := map[string]int{}
	slotsOn := map[string]map[int64]bool{}
	for _, sc := range slotCmds {
		a := owner[sc.Val()]
		leasesOn[a]++
		if slotsOn[a] == nil {
			slotsOn[a] = map[int64]bool{}
		}
		slotsOn[a][sc.Val()] = true
	}

	leases := make([]*dlock.Lease, len(names))
	var wg sync.WaitGroup
	var errs atomic.Int64
	var firstErr atomic.Pointer[error]
	t0 := time.Now()
	for w := range clusterWorkers {
		wg.Go(func() {
			for i := w; i < len(names); i += clusterWorkers {
				l, err := c.Mutex(names[i]).Lock(ctx)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				leases[i] = l
			}
		})
	}
	wg.Wait()
	out.AcquireS = time.Since(t0).Seconds()
	defer func() { // on an error path: leave nothing held
		for _, l := range leases {
			if l != nil {
				_ = l.Unlock(ctx)
			}
		}
	}()
	if n := errs.Load(); n > 0 {
		return row, fmt.Errorf("cluster-renewal: %d of %d acquisitions failed, the first: %w", n, len(names), *firstErr.Load())
	}
	time.Sleep(period + period/2) // let renewal settle into its rhythm

	// Counting starts here: the hooks are added after every lease was taken.
	var mu sync.Mutex
	counters := map[string]*nodeCounter{}
	err = rdb.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		nc := &nodeCounter{}
		n.AddHook(nc)
		mu.Lock()
		counters[n.Options().Addr] = nc
		mu.Unlock()
		return nil
	})
	if err != nil {
		return row, err
	}
	type reading struct {
		calls, rts, other int64
		st, rst           stats
	}
	read := func() (map[string]reading, error) {
		m := map[string]reading{}
		for _, p := range env.primaries {
			a := p.Options().Addr
			st, err := snapshot(ctx, p)
			if err != nil {
				return nil, fmt.Errorf("INFO on %s: %w", a, err)
			}
			rst, err := snapshotSum(ctx, env.replicas[a])
			if err != nil {
				return nil, err
			}
			r := reading{st: st, rst: rst}
			if nc := counters[a]; nc != nil {
				r.calls, r.rts, r.other = nc.calls.Load(), nc.rts.Load(), nc.other.Load()
			}
			m[a] = r
		}
		return m, nil
	}
	before, err := read()
	if err != nil {
		return row, err
	}
	time.Sleep(time.Duration(cfg.periods) * period)
	after, err := read()
	if err != nil {
		return row, err
	}

	per := func(n int64) float64 { return float64(n) / float64(cfg.periods) }
	var reqs, rts int64
	var all stats
	for _, p := range env.primaries {
		a := p.Options().Addr
		b, e := before[a], after[a]
		d, rd := e.st.sub(b.st), e.rst.sub(b.rst)
		pr := primaryRenewals{
			Addr: a, Slots: env.slots[a], Leases: leasesOn[a], SlotsWithLeases: len(slotsOn[a]),
			ScriptCalls: per(e.calls - b.calls), RoundTrips: per(e.rts - b.rts), OtherRequests: per(e.other - b.other),
			ExpectedRoundTrips: int(math.Ceil(float64(leasesOn[a]) / renewBatch)),
			RedisScriptCalls:   per(d.perCmd["evalsha"] + d.perCmd["eval"]),
			RedisCommands:      per(d.calls),
			RedisCPUms:         d.cpu * 1e3 / float64(cfg.periods),
			ReplicaCPUms:       rd.cpu * 1e3 / float64(cfg.periods),
		}
		for _, r := range env.replicas[a] {
			pr.ReplicaAddrs = append(pr.ReplicaAddrs, r.Options().Addr)
		}
		if pr.RoundTrips > 0 {
			pr.LeasesPerRoundTrip = float64(pr.Leases) / pr.RoundTrips
		}
		out.PerPrimary = append(out.PerPrimary, pr)
		reqs += e.calls - b.calls + e.other - b.other
		rts += e.rts - b.rts
		all.addDelta(d)
	}
	if other := len(names) - sumLeases(out.PerPrimary); other != 0 {
		return row, fmt.Errorf("cluster-renewal: %d leases in slots no primary claims", other)
	}

	// Every lease must still be held: renewal kept each one alive.
	lost := 0
	for i, l := range leases {
		if err := l.Err(); err != nil {
			if lost < 5 {
				fmt.Fprintf(os.Stderr, "cluster-renewal: lease %s lost: %v\n", names[i], err)
			}
			lost++
		}
	}
	var unlockErrs atomic.Int64
	for w := range clusterWorkers {
		wg.Go(func() {
			for i := w; i < len(leases); i += clusterWorkers {
				if leases[i].Err() == nil && leases[i].Unlock(ctx) != nil {
					unlockErrs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	leases = nil // released
	out.LeasesLost = lost + int(unlockErrs.Load())
	if out.LeasesLost > 0 {
		fmt.Fprintf(os.Stderr, "\n!!!!! LEASES LOST: cluster-renewal: %d of %d leases: %d had ended when checked, %d failed to unlock !!!!!\n\n",
			out.LeasesLost, len(names), lost, unlockErrs.Load())
	}

	held := float64(len(names))
	row.MutexOK = ptrBool(out.LeasesLost == 0)
	row.RequestsPerOp = f(per(reqs) / held)
	row.RoundTripsPerOp = f(per(rts) / held)
	row.RedisCommandsPerOp = f(per(all.calls) / held)
	row.RedisCPUusPerOp = f(all.cpu * 1e6 / float64(cfg.periods) / held)
	return row, nil
}

func sumLeases(ps []primaryRenewals) int {
	n := 0
	for _, p := range ps {
		n += p.Leases
	}
	return n
}

// ---------- shared ----------

// loopWorkers runs one goroutine per element of keys for d, goroutine w
// locking and unlocking the names of keys[w] in turn on lk, and returns how
// many Lock + Unlock pairs succeeded; failures are added to errs.
func loopWorkers(lk locker, keys [][]string, d time.Duration, errs *atomic.Int64) int64 {
	var ops atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	// A wait that never ends (rueidislock's, for a wake-up that never
	// came, has no deadline of its own) ends 5s after the slice, as an
	// error, rather than stalling the run.
	ctx, cancel := context.WithDeadline(context.Background(), end.Add(5*time.Second))
	defer cancel()
	for _, names := range keys {
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				rel, err := lk.lock(ctx, names[i%len(names)])
				if err == nil {
					err = rel(ctx)
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	return ops.Load()
}

// stopper runs cleanup functions once each, the last added first: when main
// returns, on a fatal error or on an interrupt.
type stopper struct {
	mu  sync.Mutex
	fns []func()
}

// add registers fn and returns it wrapped to run at most once, for the
// caller to run as soon as it is done with what fn stops.
func (s *stopper) add(fn func()) func() {
	once := sync.OnceFunc(fn)
	s.mu.Lock()
	s.fns = append(s.fns, once)
	s.mu.Unlock()
	return once
}

func (s *stopper) run() {
	s.mu.Lock()
	fns := s.fns
	s.fns = nil
	s.mu.Unlock()
	for _, fn := range slices.Backward(fns) {
		fn()
	}
}
