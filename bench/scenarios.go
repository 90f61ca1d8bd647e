package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
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
	periods    int // scale: renewal periods measured
	scaleLocks int
	admin      *redis.Client
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

// ---------- uncontended (+ PING floor) ----------

type seqRunner struct {
	name  string
	v     *variant
	step  func(ctx context.Context) error
	close func()
	lats  []time.Duration
	ops   int64
	errs  int64
	dur   time.Duration
	delta stats
}

func runUncontended(cfg config, vs []variant) (res []result, pingP50, pingP99 time.Duration, err error) {
	ctx := context.Background()
	var runners []*seqRunner
	for i := range vs {
		v := &vs[i]
		if v.retryOnly {
			continue
		}
		lk, err := v.open(cfg.addr)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("%s: %w", v.label(), err)
		}
		key := "unc:" + v.label()
		runners = append(runners, &seqRunner{name: v.label(), v: v, close: lk.close, step: func(ctx context.Context) error {
			rel, err := lk.lock(ctx, key)
			if err != nil {
				return err
			}
			return rel(ctx)
		}})
	}
	ping := redis.NewClient(&redis.Options{Addr: cfg.addr, PoolSize: 1})
	runners = append(runners, &seqRunner{name: "ping", close: func() { ping.Close() }, step: func(ctx context.Context) error { return ping.Ping(ctx).Err() }})
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
			before := mustSnapshot(cfg.admin)
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
			r.dur += time.Since(start)
			d := mustSnapshot(cfg.admin).sub(before)
			r.delta.calls += d.calls
			r.delta.cpu += d.cpu
		}
	}
	for _, r := range runners {
		if r.errs > 0 {
			fmt.Fprintf(os.Stderr, "uncontended %s: %d errors\n", r.name, r.errs)
		}
		if r.v == nil {
			pingP50, pingP99 = pct(r.lats, .5), pct(r.lats, .99)
			continue
		}
		n := float64(max(r.ops, 1))
		res = append(res, result{Scenario: "uncontended", Library: r.v.lib, Variant: r.v.name,
			OpsPerS: f(float64(r.ops) / r.dur.Seconds()), P50us: f(us(pct(r.lats, .5))), P99us: f(us(pct(r.lats, .99))),
			RequestsPerOp: f(float64(r.delta.calls) / n), RedisCPUusPerOp: f(r.delta.cpu * 1e6 / n), errors: r.errs})
	}
	return res, pingP50, pingP99, nil
}

// ---------- parallel ----------

func runParallel(cfg config, vs []variant, workers int) ([]result, error) {
	type pr struct {
		v     *variant
		lk    locker
		ops   int64
		errs  atomic.Int64
		dur   time.Duration
		delta stats
	}
	var rs []*pr
	for i := range vs {
		v := &vs[i]
		if v.retryOnly {
			continue
		}
		lk, err := v.open(cfg.addr)
		if err != nil {
			return nil, err
		}
		rs = append(rs, &pr{v: v, lk: lk})
	}
	defer func() {
		for _, r := range rs {
			r.lk.close()
		}
	}()
	run := func(r *pr, d time.Duration) int64 {
		var ops atomic.Int64
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for w := range workers {
			key := fmt.Sprintf("par:%s:%d", r.v.label(), w)
			wg.Go(func() {
				ctx := context.Background()
				for time.Now().Before(end) {
					rel, err := r.lk.lock(ctx, key)
					if err == nil {
						err = rel(ctx)
					}
					if err != nil {
						r.errs.Add(1)
						continue
					}
					ops.Add(1)
				}
			})
		}
		wg.Wait()
		return ops.Load()
	}
	for _, r := range rs {
		run(r, 100*time.Millisecond) // warm-up: fill the pools
	}
	for s := range int(cfg.perVariant / cfg.slice) {
		for k := range rs {
			r := rs[(k+s)%len(rs)]
			before := mustSnapshot(cfg.admin)
			start := time.Now()
			r.ops += run(r, cfg.slice)
			r.dur += time.Since(start)
			d := mustSnapshot(cfg.admin).sub(before)
			r.delta.calls += d.calls
			r.delta.cpu += d.cpu
		}
	}
	var res []result
	for _, r := range rs {
		if e := r.errs.Load(); e > 0 {
			fmt.Fprintf(os.Stderr, "parallel %s: %d errors\n", r.v.label(), e)
		}
		n := float64(max(r.ops, 1))
		res = append(res, result{Scenario: "parallel", Library: r.v.lib, Variant: r.v.name,
			OpsPerS: f(float64(r.ops) / r.dur.Seconds()), RequestsPerOp: f(float64(r.delta.calls) / n),
			RedisCPUusPerOp: f(r.delta.cpu * 1e6 / n), errors: r.errs.Load()})
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
	counts    []int64
	self      int64
	cs        int64
	dur       time.Duration
	delta     stats
	errs      int64
	counter   int64 // incremented non-atomically under the distributed lock
	violation int64
}

func contendedWindow(cfg config, v *variant, n int, think bool, acc *csAcc) error {
	lks := make([]locker, n)
	for i := range lks {
		lk, err := v.open(cfg.addr)
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
	before := mustSnapshot(cfg.admin)
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
	acc.dur += min(time.Since(start), cfg.csWindow+time.Since(end))
	d := mustSnapshot(cfg.admin).sub(before)
	acc.delta.calls += d.calls
	acc.delta.cpu += d.cpu
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
		accs[i] = &csAcc{counts: make([]int64, n)}
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
			mean := float64(a.cs) / float64(n)
			lo, hi := slices.Min(a.counts), slices.Max(a.counts)
			r.OpsPerS = f(float64(a.cs) / a.dur.Seconds())
			r.GapP50us = f(us(pct(a.gaps, .5)))
			r.gapP99 = us(pct(a.gaps, .99))
			r.MaxWaitus = f(us(a.waitMax))
			r.MeanWaitus = f(us(a.waitSum / time.Duration(max(a.waitN, 1))))
			r.ShareMin, r.ShareMax = f(float64(lo)/mean), f(float64(hi)/mean)
			r.RequestsPerOp = f(float64(a.delta.calls) / float64(a.cs))
			r.RedisCPUusPerOp = f(a.delta.cpu * 1e6 / float64(a.cs))
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
	cmdsPerPeriod   float64
	rtPerPeriod     float64 // -1 if not counted
	lost            int
	acquireSeconds  float64
	perCmd          map[string]int64
}

func runScale(cfg config, lib, vname string, open func(addr string) (locker, *rtCounter, error), period time.Duration) (scaleResult, error) {
	sr := scaleResult{lib: lib, variant: vname, locks: cfg.scaleLocks, rtPerPeriod: -1}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	lk, rc, err := open(cfg.addr)
	if err != nil {
		return sr, err
	}
	defer lk.close()
	rels := make([]func(context.Context) error, cfg.scaleLocks)
	var wg sync.WaitGroup
	var errs atomic.Int64
	t0 := time.Now()
	const workers = 64
	for w := range workers {
		wg.Go(func() {
			for i := w; i < cfg.scaleLocks; i += workers {
				rel, err := lk.lock(context.Background(), fmt.Sprintf("scale:%s:%d", lib, i))
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
		return sr, fmt.Errorf("scale %s: %d acquisitions failed", lib, errs.Load())
	}
	time.Sleep(period + period/2) // let renewal settle into its rhythm
	runtime.GC()
	runtime.ReadMemStats(&m1)
	sr.goroutinesAdded = runtime.NumGoroutine() - g0
	sr.heapMB = float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / (1 << 20)
	before := mustSnapshot(cfg.admin)
	if rc != nil {
		rc.take()
	}
	time.Sleep(time.Duration(cfg.periods) * period)
	d := mustSnapshot(cfg.admin).sub(before)
	sr.cmdsPerPeriod = float64(d.calls) / float64(cfg.periods)
	sr.perCmd = d.perCmd
	if rc != nil {
		sr.rtPerPeriod = float64(rc.take()) / float64(cfg.periods)
	}
	for _, rel := range rels {
		if err := rel(context.Background()); err != nil {
			sr.lost++
		}
	}
	return sr, nil
}

// rtCounter counts go-redis round trips (a pipeline is one) and commands.
type rtCounter struct{ rt, cmds atomic.Int64 }

func (c *rtCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *rtCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.rt.Add(1)
		c.cmds.Add(1)
		return next(ctx, cmd)
	}
}
func (c *rtCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.rt.Add(1)
		c.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
func (c *rtCounter) take() int64 { c.cmds.Store(0); return c.rt.Swap(0) }
