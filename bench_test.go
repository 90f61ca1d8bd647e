package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Benchmarks of the Mutex next to the raw floor: go-redis SET NX PX to
// acquire and a compare-and-delete script to release, two round trips.
// Each benchmark starts its own redis-server. Requests are counted in the
// client with a go-redis hook; connection handshakes are not counted.

// rawTTL is the lease TTL of the raw baseline, the same as dlock.DefaultTTL.
const rawTTL = 30 * time.Second

// rawRelease deletes the key only if it still holds the caller's token.
var rawRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// rawAcquire sends SET key token NX PX 30000 and reports whether it was set.
func rawAcquire(ctx context.Context, rdb *redis.Client, key, token string) (bool, error) {
	err := rdb.Do(ctx, "set", key, token, "nx", "px", rawTTL.Milliseconds()).Err()
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, redis.Nil):
		return false, nil
	}
	return false, err
}

// rawUnlock runs the compare-and-delete script and fails unless it deleted.
func rawUnlock(ctx context.Context, rdb *redis.Client, key, token string) error {
	n, err := rawRelease.Run(ctx, rdb, []string{key}, token).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("raw release of %q: token %q no longer held", key, token)
	}
	return nil
}

// isHandshake reports whether cmd is part of go-redis's connection set-up,
// the one look at Redis's eviction policy and data epoch a dlock Client
// takes on its first use (Client.Check), or a write of the Client's record:
// requests no lock operation sends.
func isHandshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "auth", "select", "client", "readonly", "config", "info":
		return true
	case "set", "del":
		// The Client's record (WithClientName), written in the background
		// at its first use and at most every 20s after: no lock's request.
		key, _ := cmd.Args()[1].(string)
		return strings.HasPrefix(key, dlock.DefaultPrefix+"client:")
	}
	return false
}

// benchRedis returns a go-redis client for srv that counts its requests in
// rc, closed when the benchmark ends. poolSize 0 keeps go-redis's default.
func benchRedis(b *testing.B, srv *redistest.Server, rc *requestCounter, poolSize int) *redis.Client {
	b.Helper()
	opts := srv.Options()
	opts.PoolSize = poolSize
	rdb := redis.NewClient(opts)
	rdb.AddHook(rc)
	b.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// dlockLockUnlock takes and gives back m once.
func dlockLockUnlock(ctx context.Context, m *dlock.Mutex) error {
	l, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

// rawLockUnlock takes and gives back key once with the raw baseline; the key
// must be free.
func rawLockUnlock(ctx context.Context, rdb *redis.Client, key, token string) error {
	ok, err := rawAcquire(ctx, rdb, key, token)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("raw acquire of %q: held by another", key)
	}
	return rawUnlock(ctx, rdb, key, token)
}

// checkTwoRequests fails the benchmark unless an uncontended acquire+release
// took two requests.
func checkTwoRequests(b *testing.B, reqPerOp float64) {
	if math.Abs(reqPerOp-2) > 0.01 {
		b.Errorf("%.3f requests per acquire+release, want 2", reqPerOp)
	}
}

// benchTwoRequests times op, one acquire+release of a free lock, after the
// warm-ups; it reports the requests per op that rc counted and fails unless
// there were two.
func benchTwoRequests(b *testing.B, rc *requestCounter, op func() error) {
	for range warmUps {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	rc.reset()
	b.ReportAllocs()
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	checkTwoRequests(b, rc.report(b, b.N))
}

// warmUps is how many operations run before timing starts: they open the
// connections and load the scripts (the first EVALSHA falls back to EVAL).
const warmUps = 10

// BenchmarkUncontended measures one goroutine taking and releasing one free
// lock back to back, on one connection: dlock is Mutex.Lock + Lease.Unlock
// with default options, raw is SET NX PX + EVALSHA compare-and-delete, and
// ping is one PING, the round-trip unit. All three use the same redis-server.
// req/op counts requests in the client; dlock's must be 2.
func BenchmarkUncontended(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()

	b.Run("dlock", func(b *testing.B) {
		var rc requestCounter
		m := clientOn(b, benchRedis(b, srv, &rc, 0)).Mutex("bench-uncontended")
		benchTwoRequests(b, &rc, func() error { return dlockLockUnlock(ctx, m) })
	})

	// Without scripts (Valkey 9.0 or later; skipped elsewhere): a MULTI/EXEC
	// to take, the renewer's lengthening SET … IFEQ off the path, and a
	// MULTI/EXEC to release.
	b.Run("dlock-without-scripts", func(b *testing.B) {
		var rc requestCounter
		rdb := benchRedis(b, srv, &rc, 0)
		if err := rdb.Do(ctx, "delifeq", "probe", "x").Err(); err != nil {
			b.Skipf("the server does not run DELIFEQ: %v", err)
		}
		m := clientOn(b, rdb, dlock.WithoutScripts()).Mutex("bench-uncontended-plain")
		for range warmUps {
			if err := dlockLockUnlock(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := dlockLockUnlock(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("raw", func(b *testing.B) {
		var rc requestCounter
		rdb := benchRedis(b, srv, &rc, 0)
		const key = "raw-uncontended"
		var seq uint64
		benchTwoRequests(b, &rc, func() error {
			seq++
			return rawLockUnlock(ctx, rdb, key, strconv.FormatUint(seq, 10))
		})
	})

	b.Run("ping", func(b *testing.B) {
		var rc requestCounter
		rdb := benchRedis(b, srv, &rc, 0)
		for range warmUps {
			if err := rdb.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
		rc.reset()
		b.ReportAllocs()
		for b.Loop() {
			if err := rdb.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
		rc.report(b, b.N)
	})
}

// BenchmarkUncontendedPair runs dlock and the raw baseline in turns, one
// acquire+release each per iteration (alternating which goes first), on one
// redis-server, so that the machine's drift hits both alike. It reports the
// median latency of each and their ratio, dlock/raw.
func BenchmarkUncontendedPair(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	var rc requestCounter
	m := clientOn(b, benchRedis(b, srv, &rc, 0)).Mutex("bench-pair")
	rdb := benchRedis(b, srv, &rc, 0)
	var seq uint64
	raw := func() error {
		seq++
		return rawLockUnlock(ctx, rdb, "raw-pair", strconv.FormatUint(seq, 10))
	}
	for range warmUps {
		if err := dlockLockUnlock(ctx, m); err != nil {
			b.Fatal(err)
		}
		if err := raw(); err != nil {
			b.Fatal(err)
		}
	}
	var dl, rw []time.Duration
	timed := func(f func() error, into *[]time.Duration) {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*into = append(*into, time.Since(start))
	}
	dlockOp := func() error { return dlockLockUnlock(ctx, m) }
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			timed(dlockOp, &dl)
			timed(raw, &rw)
		} else {
			timed(raw, &rw)
			timed(dlockOp, &dl)
		}
		i++
	}
	slices.Sort(dl)
	slices.Sort(rw)
	dp50, rp50 := dl[len(dl)/2], rw[len(rw)/2]
	b.ReportMetric(float64(dp50.Nanoseconds())/1e3, "dlock-p50-µs")
	b.ReportMetric(float64(rp50.Nanoseconds())/1e3, "raw-p50-µs")
	b.ReportMetric(float64(dp50)/float64(rp50), "dlock/raw")
}

// parallelism is the SetParallelism of BenchmarkParallel: 32 goroutines per
// GOMAXPROCS, 64 on 2 CPUs, with a go-redis pool as large.
const parallelism = 32

// BenchmarkParallel measures 32×GOMAXPROCS goroutines each taking and
// releasing its own free lock back to back, all through one go-redis client
// (pool of 32×GOMAXPROCS connections) and, for dlock, one dlock Client; raw is
// the SET NX PX + compare-and-delete baseline on the same kind of client.
// ns/op is the inverse of the aggregate rate.
func BenchmarkParallel(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	pool := parallelism * runtime.GOMAXPROCS(0)

	// run first has pool goroutines warm up concurrently, so that every
	// connection is open, then runs the benchmark. worker returns the
	// acquire+release of one goroutine on its own key.
	run := func(b *testing.B, rc *requestCounter, worker func(key string) func() error) {
		var wg sync.WaitGroup
		errs := make([]error, pool)
		for g := range pool {
			wg.Go(func() {
				lockUnlock := worker("warm-" + strconv.Itoa(g))
				for range warmUps {
					if err := lockUnlock(); err != nil {
						errs[g] = err
						return
					}
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
		rc.reset()
		var goroutines atomic.Int64
		var failed atomic.Pointer[error]
		b.SetParallelism(parallelism)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			lockUnlock := worker("parallel-" + strconv.FormatInt(goroutines.Add(1), 10))
			for pb.Next() {
				if err := lockUnlock(); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
		b.StopTimer()
		if err := failed.Load(); err != nil {
			b.Fatal(*err)
		}
		checkTwoRequests(b, rc.report(b, b.N))
	}

	b.Run("dlock", func(b *testing.B) {
		var rc requestCounter
		c := clientOn(b, benchRedis(b, srv, &rc, pool))
		run(b, &rc, func(key string) func() error {
			m := c.Mutex(key)
			return func() error { return dlockLockUnlock(ctx, m) }
		})
	})

	b.Run("raw", func(b *testing.B) {
		var rc requestCounter
		rdb := benchRedis(b, srv, &rc, pool)
		run(b, &rc, func(key string) func() error {
			var seq uint64
			return func() error {
				seq++
				return rawLockUnlock(ctx, rdb, "raw-"+key, strconv.FormatUint(seq, 10))
			}
		})
	})
}

// Shape of BenchmarkContended.
const (
	contenders       = 16                     // lockers on one key, each with its own clients
	maxThink         = 200 * time.Microsecond // think variants pause rand[0, maxThink) between critical sections
	pollInterval     = time.Millisecond       // raw-poll retries SET NX this often
	contendedTimeout = 2 * time.Minute        // bounds a whole run, in case a waiter is never woken
)

// lockFunc acquires the contended lock, waiting as long as it takes, and
// returns the function that releases it.
type lockFunc func(ctx context.Context) (unlock func(context.Context) error, err error)

// csRecord is one critical section; the times are since the run started, on
// the monotonic clock.
type csRecord struct {
	contender    int
	lockCalled   time.Duration // the contender called Lock
	locked       time.Duration // Lock returned
	unlockCalled time.Duration // Unlock called
	unlocked     time.Duration // Unlock returned
}

// contendedRun is the outcome of runContended.
type contendedRun struct {
	records  []csRecord // every critical section, in the order they held the lock
	elapsed  time.Duration
	thought  time.Duration // total time contenders slept between critical sections
	counter  int           // incremented in every critical section, guarded by the lock only
	overlaps int64         // critical sections that found another one running
}

// runContended has every locker loop Lock → critical section → Unlock, with
// a random pause below think between critical sections if think > 0, until n
// critical sections are done in all. A contender claims a critical section
// before it calls Lock, so exactly n run.
func runContended(ctx context.Context, lockers []lockFunc, n int, think time.Duration) (contendedRun, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		run       contendedRun
		claimed   atomic.Int64
		occupancy atomic.Int32
		overlaps  atomic.Int64
		wg        sync.WaitGroup
	)
	records := make([][]csRecord, len(lockers))
	thought := make([]time.Duration, len(lockers))
	errs := make([]error, len(lockers))
	start := time.Now()
	for i, lock := range lockers {
		wg.Go(func() {
			recs := make([]csRecord, 0, 2*n/len(lockers)+1)
			defer func() { records[i] = recs }()
			for claimed.Add(1) <= int64(n) {
				r := csRecord{contender: i, lockCalled: time.Since(start)}
				unlock, err := lock(ctx)
				if err != nil {
					errs[i] = fmt.Errorf("contender %d: lock: %w", i, err)
					cancel()
					return
				}
				r.locked = time.Since(start)
				if occupancy.Add(1) != 1 {
					overlaps.Add(1)
				}
				run.counter++
				occupancy.Add(-1)
				r.unlockCalled = time.Since(start)
				err = unlock(ctx)
				r.unlocked = time.Since(start)
				if err != nil {
					errs[i] = fmt.Errorf("contender %d: unlock: %w", i, err)
					cancel()
					return
				}
				recs = append(recs, r)
				if think > 0 {
					t := time.Now()
					time.Sleep(rand.N(think))
					thought[i] += time.Since(t)
				}
			}
		})
	}
	wg.Wait()
	run.elapsed = time.Since(start)
	run.overlaps = overlaps.Load()
	for i := range lockers {
		run.records = append(run.records, records[i]...)
		run.thought += thought[i]
	}
	slices.SortFunc(run.records, func(a, b csRecord) int { return int(a.locked - b.locked) })
	return run, errors.Join(errs...)
}

// benchContended runs one BenchmarkContended variant: contenders lockers made
// by newLocker, each on its own go-redis client of srv, all counted by one
// hook. A short run with every contender warms connections, scripts and
// subscriptions up before timing starts.
func benchContended(b *testing.B, srv *redistest.Server, think time.Duration, newLocker func(b *testing.B, rdb *redis.Client, id int) lockFunc) {
	var rc requestCounter
	lockers := make([]lockFunc, contenders)
	for i := range lockers {
		lockers[i] = newLocker(b, benchRedis(b, srv, &rc, 0), i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), contendedTimeout)
	defer cancel()
	if _, err := runContended(ctx, lockers, 4*contenders, think); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	rc.reset()
	b.ResetTimer()
	run, err := runContended(ctx, lockers, b.N, think)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if run.overlaps != 0 {
		b.Fatalf("mutual exclusion broken: %d critical sections found another one running", run.overlaps)
	}
	if len(run.records) != b.N || run.counter != b.N {
		b.Fatalf("mutual exclusion broken: counter = %d after %d acquisitions, want %d", run.counter, len(run.records), b.N)
	}
	reportContended(b, run, float64(rc.requests.Load()))
	if think > 0 {
		b.ReportMetric(micros(run.thought/time.Duration(b.N)), "think-mean-µs")
	}
}

// reportContended reports the metrics of a contended run; requests is the
// number of requests all clients sent during it.
func reportContended(b *testing.B, run contendedRun, requests float64) {
	recs := run.records
	n := len(recs)
	var gaps, handoffs []time.Duration
	self := 0
	for i := 1; i < n; i++ {
		prev, cur := recs[i-1], recs[i]
		if cur.contender == prev.contender {
			self++
			continue
		}
		gaps = append(gaps, cur.locked-prev.unlocked)
		handoffs = append(handoffs, cur.locked-prev.unlockCalled)
	}
	var waitSum, waitMax time.Duration
	unlocks := make([]time.Duration, 0, n)
	perContender := make([]int, contenders)
	for _, r := range recs {
		w := r.locked - r.lockCalled
		waitSum += w
		waitMax = max(waitMax, w)
		unlocks = append(unlocks, r.unlocked-r.unlockCalled)
		perContender[r.contender]++
	}
	waitMean := waitSum / time.Duration(max(n, 1))
	meanShare := float64(n) / contenders

	b.ReportMetric(float64(n)/run.elapsed.Seconds(), "cs/s")
	b.ReportMetric(micros(percentile(gaps, 0.50)), "gap-p50-µs")
	b.ReportMetric(micros(percentile(gaps, 0.99)), "gap-p99-µs")
	b.ReportMetric(micros(percentile(handoffs, 0.50)), "handoff-p50-µs")
	b.ReportMetric(micros(percentile(unlocks, 0.50)), "unlock-p50-µs")
	b.ReportMetric(100*float64(self)/float64(max(n-1, 1)), "self-%")
	b.ReportMetric(micros(waitMean), "wait-mean-µs")
	b.ReportMetric(micros(waitMax), "wait-max-µs")
	if waitMean > 0 {
		b.ReportMetric(float64(waitMax)/float64(waitMean), "wait-max/mean")
	}
	b.ReportMetric(float64(slices.Min(perContender))/meanShare, "share-min")
	b.ReportMetric(float64(slices.Max(perContender))/meanShare, "share-max")
	b.ReportMetric(requests/float64(max(n, 1)), "req/cs")
}

// percentile returns the p-quantile of ds by the nearest-rank method, 0 if
// ds is empty. It sorts ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[max(int(math.Ceil(p*float64(len(ds))))-1, 0)]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// BenchmarkContended measures 16 contenders on ONE key, each with its own
// go-redis client (and its own dlock Client), as 16 processes would. Each
// loops Lock → critical section → Unlock until b.N critical sections are
// done; ns/op is the time per critical section. The critical section
// increments a counter guarded by the lock alone and checks, with an atomic
// occupancy count, that no other contender is inside; either failing stops
// the benchmark.
//
// Variants: loop (dlock, contenders call Lock again at once), think (dlock,
// a random pause of 0–200µs between critical sections), raw-poll-1ms and
// raw-poll-1ms-think (SET NX PX retried every 1ms, compare-and-delete
// release).
//
// Metrics, from per-contender timestamps on the monotonic clock:
//   - cs/s: critical sections per second.
//   - gap-p50-µs, gap-p99-µs: from the previous holder's Unlock returning to
//     a different contender's Lock returning; negative when that Lock
//     returned first. Self re-acquisitions are not gaps; self-% is their
//     share of all successions.
//   - handoff-p50-µs: as gap, but from the previous holder calling Unlock.
//   - unlock-p50-µs: from calling Unlock to its return.
//   - wait-mean-µs, wait-max-µs, wait-max/mean: from a contender calling Lock
//     to Lock returning.
//   - share-min, share-max: per-contender critical sections / the mean.
//   - req/cs: requests sent by all 16 clients per critical section, failed
//     attempts included (pub/sub traffic is not counted).
//   - think-mean-µs: the pause actually slept, per critical section.
func BenchmarkContended(b *testing.B) {
	srv := redistest.Start(b)

	leaseLocker := func(m locker) lockFunc {
		return func(ctx context.Context) (func(context.Context) error, error) {
			l, err := m.Lock(ctx)
			if err != nil {
				return nil, err
			}
			return l.Unlock, nil
		}
	}
	dlockLocker := func(b *testing.B, rdb *redis.Client, _ int) lockFunc {
		return leaseLocker(clientOn(b, rdb).Mutex("contended"))
	}
	fairLocker := func(b *testing.B, rdb *redis.Client, _ int) lockFunc {
		return leaseLocker(clientOn(b, rdb).FairMutex("contended"))
	}
	rawPollLocker := func(_ *testing.B, rdb *redis.Client, id int) lockFunc {
		const key = "raw-contended"
		prefix := strconv.Itoa(id) + ":"
		var seq uint64
		return func(ctx context.Context) (func(context.Context) error, error) {
			seq++
			token := prefix + strconv.FormatUint(seq, 10)
			for {
				ok, err := rawAcquire(ctx, rdb, key, token)
				if err != nil {
					return nil, err
				}
				if ok {
					return func(ctx context.Context) error { return rawUnlock(ctx, rdb, key, token) }, nil
				}
				select {
				case <-time.After(pollInterval):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
		}
	}

	b.Run("loop", func(b *testing.B) { benchContended(b, srv, 0, dlockLocker) })
	b.Run("think", func(b *testing.B) { benchContended(b, srv, maxThink, dlockLocker) })
	b.Run("fair-loop", func(b *testing.B) { benchContended(b, srv, 0, fairLocker) })
	b.Run("fair-think", func(b *testing.B) { benchContended(b, srv, maxThink, fairLocker) })
	b.Run("raw-poll-1ms", func(b *testing.B) { benchContended(b, srv, 0, rawPollLocker) })
	b.Run("raw-poll-1ms-think", func(b *testing.B) { benchContended(b, srv, maxThink, rawPollLocker) })
}

// BenchmarkWaitReplicas measures Mutex.Lock + Lease.Unlock on a primary with
// one replica, without WAIT and with WithWaitReplicas(1): the cost of waiting
// for the replica's acknowledgement of each grant.
func BenchmarkWaitReplicas(b *testing.B) {
	primary := redistest.Start(b)
	redistest.Start(b, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port), "--repl-ping-replica-period", "1")
	ctx := context.Background()
	rdb := primary.Client(b)
	for deadline := time.Now().Add(10 * time.Second); rdb.Do(ctx, "wait", 1, 100).Val() != int64(1); {
		if time.Now().After(deadline) {
			b.Fatal("the replica did not come in sync within 10s")
		}
	}
	for _, tc := range []struct {
		name string
		opts []dlock.Option
	}{
		{"none", nil},
		{"wait1", []dlock.Option{dlock.WithWaitReplicas(1, time.Second)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := clientOn(b, rdb, tc.opts...).Mutex("bench-wait")
			for range warmUps {
				if err := dlockLockUnlock(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := dlockLockUnlock(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
