package main

// The keys scenario: many acquire+release operations over a fixed set of
// names, watching how many keys Redis holds and what expiring them costs.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

const (
	// keysPerName is k, the keys a Mutex name in use may keep (doc.go,
	// "# Keys"): its lock (one string, with the fence), its queue and the
	// queue's alive hash. Keys that scale with names, never with operations, stay
	// within k × names however many operations ran.
	keysPerName = 3
	keysNames   = 1000
	keysWorkers = 64
	// keysDB is the database of the first library the scenario runs; each
	// library has one of its own (keysDB, keysDB+1, …), so DBSIZE there
	// counts that library's keys and nothing the other scenarios left.
	keysDB = 9
	// keysEventMs: the target allows no latency event (expire-cycle or
	// command) longer than this.
	keysEventMs = 5
	// keysThresholdMs is the latency-monitor-threshold set for the scenario:
	// every event that long or longer is recorded.
	keysThresholdMs = 1
)

// keysOut is the "keys" object of latest.json.
type keysOut struct {
	Names       int     `json:"names"`
	Workers     int     `json:"goroutines"`
	LoadS       float64 `json:"load_s"` // each library's load, seconds
	KeysPerName int     `json:"keys_per_name"`
	Bound       int64   `json:"bound"` // KeysPerName × Names
	ThresholdMs int     `json:"latency_threshold_ms"`
	EventMs     int     `json:"event_target_ms"`
	// IdlePing: the PING sampler on the idle server, before any load.
	IdlePing pingStats `json:"idle_ping"`
	Runs     []keysRun `json:"runs"`
}

// keysRun is one library's run.
type keysRun struct {
	Library    string  `json:"library"`
	Variant    string  `json:"variant"`
	DB         int     `json:"db"`
	Ops        int64   `json:"ops"`
	OpsPerS    float64 `json:"ops_per_s"`
	Errors     int64   `json:"errors"`
	DBSizePeak int64   `json:"dbsize_peak"`    // the most DBSIZE read, the end included
	DBSizeEnd  int64   `json:"dbsize_end"`     // read right after the load, before any TTL could pass
	DBSizeN    int     `json:"dbsize_samples"` // readings, once a second and at the end
	// Latency events from LATENCY LATEST (the largest since LATENCY RESET at
	// the start of the run; 0: none reached the threshold) and LATENCY
	// HISTORY (how many went over EventMs). LatencyOK is false when they
	// could not be read.
	ExpireCycleMaxMs int64     `json:"expire_cycle_max_ms"`
	ExpireCycleOver  int       `json:"expire_cycle_events_over_target"`
	CommandMaxMs     int64     `json:"command_max_ms"`
	CommandOver      int       `json:"command_events_over_target"`
	OtherEvents      string    `json:"other_events,omitempty"` // any other event in LATENCY LATEST: name max ms, …
	LatencyOK        bool      `json:"latency_read"`
	Ping             pingStats `json:"ping"`
}

type pingStats struct {
	Samples int     `json:"samples"`
	Errors  int     `json:"errors"`
	P50us   float64 `json:"p50_us"`
	P999us  float64 `json:"p99_9_us"`
	Maxus   float64 `json:"max_us"`
}

// keysLib is a library the scenario runs; open makes its locker on a
// client of database db.
type keysLib struct {
	lib, variant string
	open         func(addr string, db int) (locker, error)
}

// keysLibs are the libraries the scenario runs, the peers first: they delete
// their key on release, so they leave nothing to expire during the runs
// after theirs. redislock waits 1 ms between tries (its aggressive variant),
// as raw does, since goroutines meet on a name now and then.
func keysLibs() []keysLib {
	return []keysLib{
		{"redislock", "aggressive", func(addr string, db int) (locker, error) {
			rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db})
			return &redislockLocker{rdb: rdb, c: redislock.New(rdb), retry: time.Millisecond}, nil
		}},
		{"raw", "default", func(addr string, db int) (locker, error) {
			return &rawLocker{rdb: redis.NewClient(&redis.Options{Addr: addr, DB: db})}, nil
		}},
		{"dlock", "default", func(addr string, db int) (locker, error) {
			rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db})
			c, err := dlock.New(rdb)
			if err != nil {
				_ = rdb.Close()
				return nil, err
			}
			return &dlockLocker{rdb: rdb, c: c}, nil
		}},
	}
}

// runKeys measures the PING sampler on the idle server for idle, then runs
// each library for load: keysWorkers goroutines, each taking a name out of
// keysNames at random and acquiring and releasing it, in a loop, on one
// client of the library's own database. Meanwhile DBSIZE is read every
// second (and once right after the load), the PING sampler runs on a
// connection of its own, and Redis's latency monitor records every event of
// keysThresholdMs or longer. Each library's database is emptied after its
// run.
func runKeys(cfg config, idle, load time.Duration) (*keysOut, []result, error) {
	ctx := context.Background()
	admin := cfg.admin
	libs := keysLibs()
	for i := range libs {
		db := keysDB + i
		c := redis.NewClient(&redis.Options{Addr: cfg.addr, DB: db, PoolSize: 1})
		n, err := c.DBSize(ctx).Result()
		_ = c.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("database %d: %w", db, err)
		}
		if n != 0 {
			return nil, nil, fmt.Errorf("database %d holds %d keys; the keys scenario needs it empty", db, n)
		}
	}
	prev, err := admin.ConfigGet(ctx, "latency-monitor-threshold").Result()
	if err != nil {
		return nil, nil, err
	}
	if err := admin.ConfigSet(ctx, "latency-monitor-threshold", strconv.Itoa(keysThresholdMs)).Err(); err != nil {
		return nil, nil, err
	}
	defer func() {
		if v, ok := prev["latency-monitor-threshold"]; ok {
			_ = admin.ConfigSet(ctx, "latency-monitor-threshold", v).Err()
		}
	}()

	out := &keysOut{Names: keysNames, Workers: keysWorkers, LoadS: load.Seconds(), KeysPerName: keysPerName,
		Bound: keysPerName * keysNames, ThresholdMs: keysThresholdMs, EventMs: keysEventMs}
	idleCtx, cancel := context.WithTimeout(ctx, idle)
	out.IdlePing = samplePing(idleCtx, cfg.addr)
	cancel()

	names := make([]string, keysNames)
	for i := range names {
		names[i] = "keys:" + strconv.Itoa(i)
	}
	var res []result
	for i, l := range libs {
		fmt.Fprintf(os.Stderr, "  keys %s/%s\n", l.lib, l.variant)
		r, err := keysLoad(cfg, l, keysDB+i, names, load)
		if err != nil {
			return nil, nil, fmt.Errorf("%s/%s: %w", l.lib, l.variant, err)
		}
		if r.Errors > 0 {
			fmt.Fprintf(os.Stderr, "keys %s/%s: %d errors\n", l.lib, l.variant, r.Errors)
		}
		out.Runs = append(out.Runs, r)
		res = append(res, result{Scenario: "keys", Library: l.lib, Variant: l.variant, OpsPerS: f(r.OpsPerS), errors: r.Errors})
	}
	return out, res, nil
}

// keysLoad is one library's run of the keys scenario on database db.
func keysLoad(cfg config, l keysLib, db int, names []string, load time.Duration) (keysRun, error) {
	ctx := context.Background()
	r := keysRun{Library: l.lib, Variant: l.variant, DB: db}
	lk, err := l.open(cfg.addr, db)
	if err != nil {
		return r, err
	}
	sizer := redis.NewClient(&redis.Options{Addr: cfg.addr, DB: db, PoolSize: 1})
	defer sizer.Close()
	defer func() {
		// The keys it left go at once, not by expiry during the scenarios
		// after this one.
		if err := sizer.FlushDBAsync(ctx).Err(); err != nil {
			fmt.Fprintf(os.Stderr, "keys: FLUSHDB %d: %v\n", db, err)
		}
	}()
	sizeOf := func() {
		n, err := sizer.DBSize(ctx).Result()
		if err != nil {
			fmt.Fprintf(os.Stderr, "keys: DBSIZE %d: %v\n", db, err)
			return
		}
		r.DBSizePeak = max(r.DBSizePeak, n)
		r.DBSizeEnd = n
		r.DBSizeN++
	}
	if err := cfg.admin.Do(ctx, "latency", "reset").Err(); err != nil {
		lk.close()
		return r, err
	}

	sideCtx, stop := context.WithCancel(ctx)
	defer stop()
	var side sync.WaitGroup
	side.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-sideCtx.Done():
				return
			case <-tick.C:
				sizeOf()
			}
		}
	})
	pinged := make(chan pingStats, 1)
	side.Go(func() { pinged <- samplePing(sideCtx, cfg.addr) })

	var ops, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(load)
	for range keysWorkers {
		wg.Go(func() {
			for time.Now().Before(end) {
				rel, err := lk.lock(ctx, names[rand.IntN(len(names))])
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
	el := time.Since(start)
	stop()
	side.Wait()
	sizeOf() // right after the load: nothing its last seconds wrote has expired yet
	r.Ping = <-pinged
	r.Ops, r.Errors, r.OpsPerS = ops.Load(), errs.Load(), float64(ops.Load())/el.Seconds()
	lk.close()
	readLatency(ctx, cfg.admin, &r)
	return r, nil
}

// readLatency fills r's latency figures from LATENCY LATEST and LATENCY
// HISTORY.
func readLatency(ctx context.Context, admin *redis.Client, r *keysRun) {
	latest, err := admin.Do(ctx, "latency", "latest").Slice()
	if err != nil {
		fmt.Fprintln(os.Stderr, "keys: LATENCY LATEST:", err)
		return
	}
	var other []string
	for _, row := range latest {
		// event name, unix time of the latest, latest ms, max ms
		e, ok := row.([]any)
		if !ok || len(e) < 4 {
			fmt.Fprintf(os.Stderr, "keys: LATENCY LATEST: unexpected row %v\n", row)
			return
		}
		name, _ := e[0].(string)
		maxMs, _ := e[3].(int64)
		switch name {
		case "expire-cycle":
			r.ExpireCycleMaxMs = maxMs
		case "command":
			r.CommandMaxMs = maxMs
		default:
			other = append(other, fmt.Sprintf("%s %d", name, maxMs))
		}
	}
	r.OtherEvents = strings.Join(other, ", ")
	for _, ev := range []struct {
		name string
		over *int
	}{{"expire-cycle", &r.ExpireCycleOver}, {"command", &r.CommandOver}} {
		hist, err := admin.Do(ctx, "latency", "history", ev.name).Slice()
		if err != nil {
			fmt.Fprintf(os.Stderr, "keys: LATENCY HISTORY %s: %v\n", ev.name, err)
			return
		}
		for _, s := range hist {
			// unix time, ms
			if p, ok := s.([]any); ok && len(p) == 2 {
				if ms, _ := p[1].(int64); ms > keysEventMs {
					*ev.over++
				}
			}
		}
	}
	r.LatencyOK = true
}

// samplePing sends PING on a connection of its own, one every millisecond,
// until ctx ends.
func samplePing(ctx context.Context, addr string) pingStats {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer c.Close()
	for range 10 { // connect
		_ = c.Ping(context.Background()).Err()
	}
	var st pingStats
	var lats []time.Duration
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		t0 := time.Now()
		if err := c.Ping(context.Background()).Err(); err != nil {
			st.Errors++
		} else {
			lats = append(lats, time.Since(t0))
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	st.Samples = len(lats)
	if len(lats) > 0 {
		st.P50us, st.P999us, st.Maxus = us(pct(lats, .5)), us(pct(lats, .999)), us(pct(lats, 1))
	}
	return st
}
