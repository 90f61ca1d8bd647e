package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

type config struct {
	addr       string
	slice      time.Duration // one interleaved slice (uncontended, parallel)
	perVariant time.Duration // total time per variant (uncontended, parallel)
	csWindow   time.Duration // one contended window
	csRounds   int
	periods    int // scale, cluster-renewal: renewal periods measured
	scaleLocks int
	admin      *redis.Client
	// cluster-renewal: leases held on the cluster
	clusterLocks int
	// noFloors: addr is not one server (the RedLock section's five), so the
	// uncontended run measures no floors.
	noFloors bool
}

// floors are what the uncontended run measures beside the libraries: PING,
// and two EVALSHA of a script that does nothing, with the keys and
// arguments of dlock's acquire and release scripts (what dlock's two round
// trips cost before its scripts do any work), paired with raw's operations
// as the libraries are.
type floors struct {
	pingP50, pingP99 time.Duration
	scriptsP50       time.Duration
	scriptsVsRaw     float64
}

// noopPair returns a step that runs a script that does nothing twice, with
// the keys and arguments of dlock's acquire and then of its release.
func noopPair(rdb *redis.Client) func(ctx context.Context) error {
	noop := redis.NewScript("return 1")
	const tag = "dlock:{floor}"
	acquireKeys := []string{tag, tag + ":waiters", tag + ":alive"}
	releaseKeys := acquireKeys
	var seq uint64
	return func(ctx context.Context) error {
		seq++
		owner := "00112233445566778899aabbccddeeff:" + strconv.FormatUint(seq, 10)
		if err := noop.Run(ctx, rdb, acquireKeys, owner, "30000", "0", "0", "1000").Err(); err != nil {
			return err
		}
		return noop.Run(ctx, rdb, releaseKeys, owner, tag+":wake", "1", "1000", "0", "1764000000000000", "0").Err()
	}
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p * float64(len(s)-1))
	return s[i]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// median of xs (the mean of the middle two for an even count); 0 if empty.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread sets *med, *lo, *hi to the median, min and max of xs.
func spread(xs []float64, med, lo, hi **float64) {
	if len(xs) == 0 {
		return
	}
	*med, *lo, *hi = f(median(xs)), f(slices.Min(xs)), f(slices.Max(xs))
}

// pairRatio is the median over slices s of a[s]/b[s]: each slice of one
// library is compared with the same pass's slice of the other, so drift of
// the machine between passes cancels out.
func pairRatio(a, b []float64) *float64 {
	var rs []float64
	for s := range min(len(a), len(b)) {
		if b[s] > 0 {
			rs = append(rs, a[s]/b[s])
		}
	}
	if len(rs) == 0 {
		return nil
	}
	return f(median(rs))
}

// setCounts fills the per-op request fields of r from the client-side counts
// and the commandstats delta over ops operations.
func setCounts(r *result, rq reqCounts, d stats, ops float64) {
	if ops <= 0 {
		return
	}
	rq = rq.add(pubsubCounts(d.perCmd))
	r.RequestsPerOp, r.RoundTripsPerOp = rq.perOp(ops)
	if rq.extends > 0 {
		r.ExtendsPerOp = f(float64(rq.extends) / ops)
	}
	if rq.held > 0 {
		r.HeldPerOp = f(float64(rq.held) / ops)
	}
	r.NotCounted = rq.notCounted()
	r.RedisCommandsPerOp = f(float64(d.calls) / ops)
	r.RedisCPUusPerOp = f(d.cpu * 1e6 / ops)
	if rq.direct != nil {
		// The commands the client sent (a script's time includes the
		// commands it calls, which commandstats counts apart too).
		var work int64
		for name := range rq.direct {
			work += d.usec[name]
		}
		r.RedisWorkUsPerOp = f(float64(work) / ops)
	} else {
		r.NotCounted = append(r.NotCounted, "redis_work_us_per_op")
	}
	r.pubsubPerOp = float64(pubsubCounts(d.perCmd).reqs) / ops
}

func (a *stats) addDelta(d stats) {
	a.calls += d.calls
	a.cpu += d.cpu
	a.scriptUsec += d.scriptUsec
	if a.perCmd == nil {
		a.perCmd = map[string]int64{}
	}
	for k, v := range d.perCmd {
		a.perCmd[k] += v
	}
	if a.usec == nil {
		a.usec = map[string]int64{}
	}
	for k, v := range d.usec {
		a.usec[k] += v
	}
}

// ---------- uncontended (+ PING floor) ----------

type seqRunner struct {
	name     string
	v        *variant
	rc       *reqCounter
	step     func(ctx context.Context) error
	close    func()
	lats     []time.Duration
	ops      int64
	errs     int64
	dur      time.Duration
	delta    stats
	req      reqCounts
	sliceOps []float64 // ops/s in each slice
	sliceP50 []float64 // p50 µs in each slice
	mallocs  uint64    // heap allocations in its slices
	bytes    uint64    // and their bytes
}

func runUncontended(cfg config, vs []variant) (res []result, fl floors, err error) {
	ctx := context.Background()
	var runners []*seqRunner
	for i := range vs {
		v := &vs[i]
		if v.retryOnly {
			continue
		}
		rc := &reqCounter{}
		lk, err := v.open(cfg.addr, rc)
		if err != nil {
			return nil, fl, fmt.Errorf("%s: %w", v.label(), err)
		}
		key := "unc:" + v.label()
		runners = append(runners, &seqRunner{name: v.label(), v: v, rc: rc, close: lk.close, step: func(ctx context.Context) error {
			rel, err := lk.lock(ctx, key)
			if err != nil {
				return err
			}
			return rel(ctx)
		}})
	}
	if !cfg.noFloors {
		ping := redis.NewClient(&redis.Options{Addr: cfg.addr, PoolSize: 1})
		runners = append(runners, &seqRunner{name: "ping", rc: &reqCounter{}, close: func() { ping.Close() }, step: func(ctx context.Context) error { return ping.Ping(ctx).Err() }})
		scripts := redis.NewClient(&redis.Options{Addr: cfg.addr, PoolSize: 1})
		runners = append(runners, &seqRunner{name: "scripts", rc: &reqCounter{}, close: func() { scripts.Close() }, step: noopPair(scripts)})
	}
	defer func() {
		for _, r := range runners {
			r.close()
		}
	}()
	for _, r := range runners { // warm-up: connections, scripts
		for range 20 {
			_ = r.step(ctx)
		}
	}
	slicesN := int(cfg.perVariant / cfg.slice)
	for s := range slicesN {
		for k := range runners {
			r := runners[(k+s)%len(runners)]
			before := serverSnapshot(cfg.admin, r.v)
			rq := r.rc.snap()
			ops0, lat0 := r.ops, len(r.lats)
			if cap(r.lats)-len(r.lats) < 1<<16 {
				r.lats = slices.Grow(r.lats, 1<<18) // not inside the measured loop
			}
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			start := time.Now()
			end := start.Add(cfg.slice)
			for {
				t0 := time.Now()
				if t0.After(end) {
					break
				}
				if err := r.step(ctx); err != nil {
					r.errs++
					continue
				}
				r.lats = append(r.lats, time.Since(t0))
				r.ops++
			}
			el := time.Since(start)
			runtime.ReadMemStats(&m1)
			r.mallocs += m1.Mallocs - m0.Mallocs
			r.bytes += m1.TotalAlloc - m0.TotalAlloc
			r.dur += el
			r.req = r.req.add(r.rc.since(rq))
			r.delta.addDelta(serverSnapshot(cfg.admin, r.v).sub(before))
			r.sliceOps = append(r.sliceOps, float64(r.ops-ops0)/el.Seconds())
			r.sliceP50 = append(r.sliceP50, us(pct(r.lats[lat0:], .5)))
		}
	}
	var raw *seqRunner
	for _, r := range runners {
		if r.v != nil && r.v.lib == "raw" {
			raw = r
		}
	}
	// Paired p50: each library's operations alternate one by one with raw's,
	// so that both see the machine in the same state (a 2-vCPU VM's latency
	// moves between slices by more than the difference being measured).
	// pairedSlice runs r and other alternately for a slice and returns the
	// ratio of their p50s, 0 if either has none.
	pairedSlice := func(r, other *seqRunner) float64 {
		var mine, theirs []time.Duration
		end := time.Now().Add(cfg.slice)
		for i := 0; time.Now().Before(end); i++ {
			first, second, a, b := r, other, &mine, &theirs
			if i%2 == 1 {
				first, second, a, b = other, r, &theirs, &mine
			}
			t0 := time.Now()
			errA := first.step(ctx)
			t1 := time.Now()
			errB := second.step(ctx)
			t2 := time.Now()
			if errA == nil && errB == nil {
				*a, *b = append(*a, t1.Sub(t0)), append(*b, t2.Sub(t1))
			}
		}
		if p := pct(theirs, .5); p > 0 {
			return float64(pct(mine, .5)) / float64(p)
		}
		return 0
	}
	paired := map[*seqRunner][]float64{}
	if raw != nil {
		for s := range slicesN {
			for k := range runners {
				r := runners[(k+s)%len(runners)]
				if (r.v == nil && r.name != "scripts") || r == raw {
					continue
				}
				if x := pairedSlice(r, raw); x > 0 {
					paired[r] = append(paired[r], x)
				}
			}
		}
	}
	// dlock's default Client against redislock, the peer whose release is
	// checked by owner too (the uncontended target), paired the same way.
	var dl, rl *seqRunner
	for _, r := range runners {
		switch {
		case r.v != nil && r.v.lib == "dlock" && r.v.name == "default":
			dl = r
		case r.v != nil && r.v.lib == "redislock" && r.v.name == "default":
			rl = r
		}
	}
	var vsRedislock []float64
	if dl != nil && rl != nil {
		for range slicesN {
			if x := pairedSlice(dl, rl); x > 0 {
				vsRedislock = append(vsRedislock, x)
			}
		}
	}
	for _, r := range runners {
		if r.errs > 0 {
			fmt.Fprintf(os.Stderr, "uncontended %s: %d errors\n", r.name, r.errs)
		}
		switch r.name {
		case "ping":
			fl.pingP50, fl.pingP99 = pct(r.lats, .5), pct(r.lats, .99)
			continue
		case "scripts":
			fl.scriptsP50 = pct(r.lats, .5)
			if len(paired[r]) > 0 {
				fl.scriptsVsRaw = median(paired[r])
			}
			continue
		}
		x := result{Scenario: "uncontended", Library: r.v.lib, Variant: r.v.name, P99us: f(us(pct(r.lats, .99))),
			Samples: slicesN, errors: r.errs}
		spread(r.sliceOps, &x.OpsPerS, &x.OpsPerSMin, &x.OpsPerSMax)
		spread(r.sliceP50, &x.P50us, &x.P50usMin, &x.P50usMax)
		if raw != nil {
			x.OpsVsRaw = pairRatio(r.sliceOps, raw.sliceOps)
			if r == raw {
				x.P50VsRaw = f(1)
			} else if len(paired[r]) > 0 {
				x.P50VsRaw = f(median(paired[r]))
			}
		}
		if r == dl && len(vsRedislock) > 0 {
			x.P50VsRedislock, x.PairedSamples = f(median(vsRedislock)), len(vsRedislock)
		}
		setCounts(&x, r.req, r.delta, float64(r.ops))
		if r.ops > 0 {
			x.AllocsPerOp, x.BytesPerOp = f(float64(r.mallocs)/float64(r.ops)), f(float64(r.bytes)/float64(r.ops))
		}
		res = append(res, x)
	}
	return res, fl, nil
}

// ---------- parallel ----------

func runParallel(cfg config, vs []variant, workers int) ([]result, error) {
	type pr struct {
		v        *variant
		lk       locker
		rc       *reqCounter
		ops      int64
		errs     atomic.Int64
		dur      time.Duration
		delta    stats
		req      reqCounts
		sliceOps []float64
	}
	var rs []*pr
	for i := range vs {
		v := &vs[i]
		if v.retryOnly {
			continue
		}
		rc := &reqCounter{}
		lk, err := v.open(cfg.addr, rc)
		if err != nil {
			return nil, err
		}
		rs = append(rs, &pr{v: v, lk: lk, rc: rc})
	}
	defer func() {
		for _, r := range rs {
			r.lk.close()
		}
	}()
	keys := make([][]string, workers) // one distinct key per goroutine
	run := func(r *pr, d time.Duration) int64 {
		for w := range keys {
			keys[w] = []string{fmt.Sprintf("par:%s:%d", r.v.label(), w)}
		}
		return loopWorkers(r.lk, keys, d, &r.errs)
	}
	for _, r := range rs {
		run(r, 100*time.Millisecond) // warm-up: fill the pools
	}
	slicesN := int(cfg.perVariant / cfg.slice)
	for s := range slicesN {
		for k := range rs {
			r := rs[(k+s)%len(rs)]
			before := mustSnapshot(cfg.admin)
			rq := r.rc.snap()
			start := time.Now()
			n := run(r, cfg.slice)
			el := time.Since(start)
			r.ops += n
			r.dur += el
			r.req = r.req.add(r.rc.since(rq))
			r.delta.addDelta(mustSnapshot(cfg.admin).sub(before))
			r.sliceOps = append(r.sliceOps, float64(n)/el.Seconds())
		}
	}
	var raw *pr
	for _, r := range rs {
		if r.v.lib == "raw" {
			raw = r
		}
	}
	var res []result
	for _, r := range rs {
		if e := r.errs.Load(); e > 0 {
			fmt.Fprintf(os.Stderr, "parallel %s: %d errors\n", r.v.label(), e)
		}
		x := result{Scenario: "parallel", Library: r.v.lib, Variant: r.v.name, Samples: slicesN, errors: r.errs.Load()}
		spread(r.sliceOps, &x.OpsPerS, &x.OpsPerSMin, &x.OpsPerSMax)
		if raw != nil {
			x.OpsVsRaw = pairRatio(r.sliceOps, raw.sliceOps)
		}
		setCounts(&x, r.req, r.delta, float64(r.ops))
		res = append(res, x)
	}
	return res, nil
}

// ---------- contended ----------

type csAcc struct {
	mu        sync.Mutex
	lastBy    int
	lastRelAt time.Time
	gaps      []time.Duration
	waitSum   time.Duration
	waitN     int64
	waitMax   time.Duration
	counts    []int64 // per contender, this window
	self      int64
	cs        int64
	dur       time.Duration
	delta     stats
	req       reqCounts
	errs      int64
	counter   int64 // incremented non-atomically under the distributed lock
	violation int64
	// per window (round)
	roundCS       []float64 // critical sections / s
	roundGapP50   []float64 // µs
	roundShareMin []float64
	roundShareMax []float64
}

func contendedWindow(cfg config, v *variant, n int, think bool, acc *csAcc) error {
	rc := &reqCounter{}
	lks := make([]locker, n)
	for i := range lks {
		lk, err := v.open(cfg.addr, rc)
		if err != nil {
			return err
		}
		defer lk.close()
		lks[i] = lk
		// warm-up on a private key: connections, scripts, subscriptions
		for range 3 {
			if rel, err := lk.lock(context.Background(), fmt.Sprintf("warm:%s:%d", v.label(), i)); err == nil {
				_ = rel(context.Background())
			}
		}
	}
	key := "cont:" + v.label()
	var occ atomic.Int32
	acc.lastBy = -1
	acc.counts = make([]int64, n)
	cs0, gaps0 := acc.cs, len(acc.gaps)
	before := serverSnapshot(cfg.admin, v)
	rq := rc.snap()
	start := time.Now()
	end := start.Add(cfg.csWindow)
	ctx, cancel := context.WithDeadline(context.Background(), end.Add(2*time.Second))
	stopT := time.AfterFunc(cfg.csWindow, cancel)
	defer stopT.Stop()
	defer cancel()
	var wg sync.WaitGroup
	for i, lk := range lks {
		wg.Go(func() {
			x := uint64(i)
			defer func() { atomic.AddUint64(&x0, x) }()
			for time.Now().Before(end) {
				t0 := time.Now()
				rel, err := lk.lock(ctx, key)
				t1 := time.Now()
				if err != nil {
					if ctx.Err() != nil {
						acc.mu.Lock()
						acc.waitMax = max(acc.waitMax, t1.Sub(t0)) // unfinished wait
						acc.mu.Unlock()
						return
					}
					acc.mu.Lock()
					acc.errs++
					acc.mu.Unlock()
					continue
				}
				if occ.Add(1) != 1 {
					atomic.AddInt64(&acc.violation, 1)
				}
				acc.counter++ // deliberately not atomic: the lock must protect it
				for j := range 200 {
					x = x*6364136223846793005 + uint64(j)
				}
				acc.mu.Lock()
				if acc.lastBy >= 0 && acc.lastBy != i {
					acc.gaps = append(acc.gaps, t1.Sub(acc.lastRelAt))
				} else if acc.lastBy == i {
					acc.self++
				}
				w := t1.Sub(t0)
				acc.waitSum += w
				acc.waitN++
				acc.waitMax = max(acc.waitMax, w)
				acc.counts[i]++
				acc.cs++
				acc.mu.Unlock()
				occ.Add(-1)
				acc.mu.Lock()
				acc.lastBy, acc.lastRelAt = i, time.Now()
				acc.mu.Unlock()
				if err := rel(context.Background()); err != nil {
					acc.mu.Lock()
					acc.errs++
					acc.mu.Unlock()
				}
				if think {
					time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	acc.dur += el
	acc.req = acc.req.add(rc.since(rq))
	acc.delta.addDelta(serverSnapshot(cfg.admin, v).sub(before))
	if cs := acc.cs - cs0; cs > 0 {
		mean := float64(cs) / float64(n)
		acc.roundCS = append(acc.roundCS, float64(cs)/el.Seconds())
		acc.roundGapP50 = append(acc.roundGapP50, us(pct(acc.gaps[gaps0:], .5)))
		acc.roundShareMin = append(acc.roundShareMin, float64(slices.Min(acc.counts))/mean)
		acc.roundShareMax = append(acc.roundShareMax, float64(slices.Max(acc.counts))/mean)
	}
	return nil
}

var x0 uint64

func runContended(cfg config, vs []variant, n int, think bool) ([]result, error) {
	scen := "contended"
	if think {
		scen = "contended-think"
	}
	accs := make([]*csAcc, len(vs))
	for i := range accs {
		accs[i] = &csAcc{}
	}
	for round := range cfg.csRounds {
		for k := range vs {
			i := (k + round) % len(vs)
			fmt.Fprintf(os.Stderr, "  %s %s round %d\n", scen, vs[i].label(), round+1)
			if err := contendedWindow(cfg, &vs[i], n, think, accs[i]); err != nil {
				return nil, fmt.Errorf("%s: %w", vs[i].label(), err)
			}
		}
	}
	var res []result
	for i, a := range accs {
		v := vs[i]
		ok := a.violation == 0 && a.counter == a.cs
		if !ok {
			fmt.Fprintf(os.Stderr, "\n!!!!! MUTUAL EXCLUSION BROKEN: %s %s: counter %d, acquisitions %d, overlaps %d — figures withheld !!!!!\n\n",
				scen, v.label(), a.counter, a.cs, a.violation)
		}
		if a.errs > 0 {
			fmt.Fprintf(os.Stderr, "%s %s: %d errors\n", scen, v.label(), a.errs)
		}
		r := result{Scenario: scen, Library: v.lib, Variant: v.name, MutexOK: &ok, errors: a.errs}
		if ok && a.cs > 0 {
			r.Samples = len(a.roundCS)
			spread(a.roundCS, &r.OpsPerS, &r.OpsPerSMin, &r.OpsPerSMax)
			spread(a.roundGapP50, &r.GapP50us, &r.GapP50usMin, &r.GapP50usMax)
			r.gapP99 = us(pct(a.gaps, .99))
			r.MaxWaitus = f(us(a.waitMax))
			r.MeanWaitus = f(us(a.waitSum / time.Duration(max(a.waitN, 1))))
			r.ShareMin, r.ShareMax = f(slices.Min(a.roundShareMin)), f(slices.Max(a.roundShareMax))
			setCounts(&r, a.req, a.delta, float64(a.cs))
			r.selfPct = 100 * float64(a.self) / float64(a.cs)
		}
		res = append(res, r)
	}
	return res, nil
}

// ---------- scale ----------

type scaleResult struct {
	lib, variant    string
	locks           int
	goroutinesAdded int
	heapMB          float64
	cmdsPerPeriod   float64 // Redis commands (commandstats)
	reqPerPeriod    float64 // client requests; -1 if not counted
	rtPerPeriod     float64 // client round trips; -1 if not counted
	lost            int
	acquireSeconds  float64
	perCmd          map[string]int64
}

func runScale(cfg config, lib, vname string, open func(addr string, rc *reqCounter) (locker, error), period time.Duration) (scaleResult, error) {
	sr := scaleResult{lib: lib, variant: vname, locks: cfg.scaleLocks, reqPerPeriod: -1, rtPerPeriod: -1}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	rc := &reqCounter{}
	lk, err := open(cfg.addr, rc)
	if err != nil {
		return sr, err
	}
	defer lk.close()
	rels := make([]func(context.Context) error, cfg.scaleLocks)
	var wg sync.WaitGroup
	var errs atomic.Int64
	t0 := time.Now()
	const workers = 64
	// Each name is fresh: an acquisition that takes a minute has hung (a
	// library's wake-up lost), and is counted as failed rather than
	// stalling the run.
	const stuck = time.Minute
	var hung atomic.Int64
	for w := range workers {
		wg.Go(func() {
			for i := w; i < cfg.scaleLocks; i += workers {
				ctx, cancel := context.WithTimeout(context.Background(), stuck)
				rel, err := lk.lock(ctx, fmt.Sprintf("scale:%s:%d", lib, i))
				if ctx.Err() != nil {
					hung.Add(1)
				}
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				rels[i] = rel
			}
		})
	}
	wg.Wait()
	sr.acquireSeconds = time.Since(t0).Seconds()
	if errs.Load() > 0 {
		for _, rel := range rels {
			if rel != nil {
				_ = rel(context.Background())
			}
		}
		return sr, fmt.Errorf("scale %s: %d acquisitions of fresh names failed (%d of them still waiting after %v)", lib, errs.Load(), hung.Load(), stuck)
	}
	time.Sleep(period / 2) // let renewal settle into its rhythm
	// The goroutines that stay: the fewest seen over a renewal period, so
	// that renewal calls in flight at one moment are not counted as kept.
	sr.goroutinesAdded = math.MaxInt
	for end := time.Now().Add(period); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		sr.goroutinesAdded = min(sr.goroutinesAdded, runtime.NumGoroutine()-g0)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	sr.heapMB = float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / (1 << 20)
	before := mustSnapshot(cfg.admin)
	rq := rc.snap()
	time.Sleep(time.Duration(cfg.periods) * period)
	got := rc.since(rq)
	d := mustSnapshot(cfg.admin).sub(before)
	got = got.add(pubsubCounts(d.perCmd))
	sr.cmdsPerPeriod = float64(d.calls) / float64(cfg.periods)
	sr.perCmd = d.perCmd
	if reqs, rts := got.perOp(float64(cfg.periods)); reqs != nil {
		sr.reqPerPeriod = *reqs
		if rts != nil {
			sr.rtPerPeriod = *rts
		}
	}
	for _, rel := range rels {
		if err := rel(context.Background()); err != nil {
			sr.lost++
		}
	}
	return sr, nil
}
