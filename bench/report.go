package main

import (
	"fmt"
	"slices"
	"strings"
)

func num(p *float64, format string) string {
	if p == nil {
		return "–"
	}
	return fmt.Sprintf(format, *p)
}

func rateN(x float64, kFormat string) string {
	if x >= 1000 {
		return fmt.Sprintf(kFormat, x/1000)
	}
	return fmt.Sprintf("%.0f", x)
}

func rate(p *float64) string {
	if p == nil {
		return "–"
	}
	return rateN(*p, "%.2fk")
}

// rateSpread is "median (min–max)" for a rate, e.g. "7.94k (7.1k–8.3k)".
func rateSpread(med, lo, hi *float64) string {
	if med == nil {
		return "–"
	}
	if lo == nil || hi == nil {
		return rate(med)
	}
	return fmt.Sprintf("%s (%s–%s)", rate(med), rateN(*lo, "%.1fk"), rateN(*hi, "%.1fk"))
}

// numSpread is "median (min–max)" with format for all three.
func numSpread(med, lo, hi *float64, format string) string {
	if med == nil {
		return "–"
	}
	if lo == nil || hi == nil {
		return num(med, format)
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", *med, *lo, *hi)
}

func ratio(a, b *float64) string {
	if a == nil || b == nil || *b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", *a / *b)
}

func times(p *float64) string { return num(p, "%.2f×") }

// counted formats a client-side count, "not counted" when the run could not
// count it.
func counted(r result, p *float64, field string) string {
	if slices.Contains(r.NotCounted, field) {
		return "not counted"
	}
	return num(p, "%.2f")
}

func pick(rs []result, scen string) (out []result, raw *result) {
	for i := range rs {
		if rs[i].Scenario == scen {
			out = append(out, rs[i])
			if rs[i].Library == "raw" {
				raw = &rs[i]
			}
		}
	}
	return out, raw
}

// pubsubNote lists the pub/sub commands taken from commandstats into the
// client-side request counts of rs, if any.
func pubsubNote(rs []result, per string) string {
	var parts []string
	for _, r := range rs {
		if r.pubsubPerOp > 0 {
			parts = append(parts, fmt.Sprintf("%s/%s %.4f", r.Library, r.Variant, r.pubsubPerOp))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("\nClient requests and round trips include pub/sub SUBSCRIBE/UNSUBSCRIBE per %s, taken from commandstats (go-redis hooks do not see the pub/sub connection): %s.\n",
		per, strings.Join(parts, ", "))
}

func report(o output, scales []scaleResult) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# dlock vs peers: one run, one redis-server\n\n")
	w("%s", environment(o))

	w("## 4. Floor\n\nPING on one go-redis connection, interleaved with the uncontended slices: p50 %.0f µs, p99 %.0f µs (1 RTT; over all its slices).\n\n",
		o.Machine["ping_p50_us"], o.Machine["ping_p99_us"])
	if v, ok := o.Machine["noop_scripts_vs_raw"].(float64); ok && v > 0 {
		w("Two EVALSHA of a script that does nothing (`return 1`), with the keys and arguments of dlock's acquire and release scripts, interleaved likewise and paired with raw's operations as the libraries are: p50 %.0f µs, %.2f× raw. That is dlock's two round trips with none of its scripts' work; the rest of dlock's p50 over raw is the work its scripts do in Redis.\n\n",
			o.Machine["noop_scripts_p50_us"], v)
	}

	w("%s", targets(o, scales))

	rs, _ := pick(o.Results, "uncontended")
	w("## 1. Uncontended: 1 goroutine, acquire + release\n\n")
	w("ops/s and p50: median over %d slices (min–max); p99 over all slices; ops/s vs raw: median of per-slice ratios; p50 vs raw: median over as many slices of the ratio of p50s with the library's operations alternating one by one with raw's.\n\n", samples(rs))
	w("| library | variant | ops/s | p50 µs | p99 µs | p50 vs raw | p50 in RTT | requests/op (client) | round trips/op (client) | Redis commands/op (incl. in scripts) | Redis work µs/op | redis CPU µs/op | allocs/op | bytes/op |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	rtt := rttOf(o)
	for _, r := range rs {
		inRTT := "–"
		if r.P50us != nil && rtt > 0 {
			inRTT = fmt.Sprintf("%.1f", *r.P50us/rtt)
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Library, r.Variant, rateSpread(r.OpsPerS, r.OpsPerSMin, r.OpsPerSMax),
			numSpread(r.P50us, r.P50usMin, r.P50usMax, "%.0f"), num(r.P99us, "%.0f"), times(r.P50VsRaw), inRTT,
			counted(r, r.RequestsPerOp, "requests_per_op"), counted(r, r.RoundTripsPerOp, "round_trips_per_op"),
			num(r.RedisCommandsPerOp, "%.2f"), counted(r, r.RedisWorkUsPerOp, "redis_work_us_per_op"), num(r.RedisCPUusPerOp, "%.1f"), num(r.AllocsPerOp, "%.0f"), num(r.BytesPerOp, "%.0f"))
	}
	w("\nRedis work: the commandstats time (µs) of the commands the client sent, per op; a script's includes the commands it runs.\n")
	w("\nallocs/op and bytes/op: the whole bench process's heap allocations while only that library ran (runtime.MemStats over its slices), background goroutines included.\n")
	w("%s", pubsubNote(rs, "op"))
	rs, _ = pick(o.Results, "parallel")
	w("\n## 2. Parallel: 64 goroutines, distinct keys, one client per library\n\n")
	w("ops/s: median over %d slices (min–max); vs raw: median of per-slice ratios.\n\n", samples(rs))
	w("| library | variant | ops/s | vs raw | requests/op (client) | round trips/op (client) | Redis commands/op (incl. in scripts) | redis CPU µs/op |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		w("| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Library, r.Variant, rateSpread(r.OpsPerS, r.OpsPerSMin, r.OpsPerSMax), times(r.OpsVsRaw),
			counted(r, r.RequestsPerOp, "requests_per_op"), counted(r, r.RoundTripsPerOp, "round_trips_per_op"),
			num(r.RedisCommandsPerOp, "%.2f"), num(r.RedisCPUusPerOp, "%.1f"))
	}
	w("%s", pubsubNote(rs, "op"))
	for _, scen := range []string{"contended", "contended-think"} {
		rs, raw := pick(o.Results, scen)
		title := "16 contenders, one key, each its own client, looping"
		if scen == "contended-think" {
			title = "as above with 0–200 µs think time between sections"
		}
		w("\n## 3. %s: %s\n\n", scen, title)
		w("CS/s and gap p50: median over %s (min–max); vs raw: ratio of the medians; share min–max: the extremes over the rounds; the rest over all rounds.\n\n",
			plural(samples(rs), "round"))
		w("| library | variant | mutex ok | CS/s | vs raw (1 ms poll) | gap p50 µs | gap p50 in RTT | gap p99 µs | same holder again | mean wait µs | max wait µs | max/mean | share min–max | requests/CS (client) | of which extends | of which found it held | round trips/CS (client) | Redis commands/CS (incl. in scripts) | redis CPU µs/CS |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range rs {
			ok := r.MutexOK != nil && *r.MutexOK
			if !ok {
				w("| %s | %s | **NO — MUTUAL EXCLUSION BROKEN, figures withheld** | | | | | | | | | | | | | | | | |\n", r.Library, r.Variant)
				continue
			}
			if r.OpsPerS == nil {
				w("| %s | %s | yes | no critical section completed | | | | | | | | | | | | | | | |\n", r.Library, r.Variant)
				continue
			}
			gapRTT := "–"
			if r.GapP50us != nil && rtt > 0 {
				gapRTT = fmt.Sprintf("%.1f", *r.GapP50us/rtt)
			}
			w("| %s | %s | yes | %s | %s | %s | %s | %.0f | %.0f%% | %s | %s | %s | %s–%s | %s | %s | %s | %s | %s | %s |\n", r.Library, r.Variant,
				rateSpread(r.OpsPerS, r.OpsPerSMin, r.OpsPerSMax),
				ratio(r.OpsPerS, rawField(raw, func(r *result) *float64 { return r.OpsPerS })),
				numSpread(r.GapP50us, r.GapP50usMin, r.GapP50usMax, "%.0f"), gapRTT, r.gapP99, r.selfPct,
				num(r.MeanWaitus, "%.0f"), num(r.MaxWaitus, "%.0f"), maxMean(r), num(r.ShareMin, "%.2f"), num(r.ShareMax, "%.2f"),
				counted(r, r.RequestsPerOp, "requests_per_op"), num(r.ExtendsPerOp, "%.2f"), num(r.HeldPerOp, "%.2f"), counted(r, r.RoundTripsPerOp, "round_trips_per_op"),
				num(r.RedisCommandsPerOp, "%.2f"), num(r.RedisCPUusPerOp, "%.1f"))
		}
		w("%s", pubsubNote(rs, "CS"))
	}
	w("%s", multiSection(o))
	w("%s", queuesSection(o))
	w("%s", sfSection(o))
	w("\n## 5. Scale: %d locks held at once by one process, TTL 3 s (renewal period 1 s)\n\n", cfgLocks(scales))
	w("| library | variant | goroutines added (fewest over a period) | heap added MB | acquire all, s | client requests / period | client round trips / period | round trips per 100 locks / period | Redis commands / period (incl. in scripts) | leases lost |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range scales {
		req, rt, per100 := "not counted", "not counted", "–"
		if s.reqPerPeriod >= 0 {
			req = fmt.Sprintf("%.1f", s.reqPerPeriod)
		}
		if s.rtPerPeriod >= 0 {
			rt = fmt.Sprintf("%.1f", s.rtPerPeriod)
			per100 = fmt.Sprintf("%.3f", s.rtPerPeriod*100/float64(s.locks))
		}
		w("| %s | %s | %d | %.1f | %.2f | %s | %s | %s | %.1f | %d |\n", s.lib, s.variant, s.goroutinesAdded, s.heapMB, s.acquireSeconds, req, rt, per100, s.cmdsPerPeriod, s.lost)
	}
	w("\nredsync and redislock have no automatic renewal, so they are not in this table.\n")
	w("%s", keysSection(o))
	w("%s", clusterSection(o))
	w("%s", redLockSection(o))
	w("%s", etcdSection(o))
	w(howToRead)
	return b.String()
}

// environment renders the run's "Environment" section.
func environment(o output) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("## Environment\n\n")
	w("- command: `%v`\n", o.Machine["command"])
	w("- %v, GOMAXPROCS=%v, NumCPU=%v, %v/%v\n", o.Machine["go"], o.Machine["gomaxprocs"], o.Machine["num_cpu"], o.Machine["goos"], o.Machine["goarch"])
	w("- redis-server %v (loopback, --save \"\" --appendonly no)\n", o.Machine["redis_server"])
	keys := make([]string, 0, len(o.Versions))
	for k := range o.Versions {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w("- %s %s\n", k, o.Versions[k])
	}
	w("- started %v, took %.0f s, quick=%v\n\n", o.Machine["started"], o.Machine["duration_s"], o.Machine["quick"])
	return b.String()
}

// multiSection renders the MultiLock scenario.
func multiSection(o output) string {
	r := find(o.Results, "multilock", "dlock")
	if r == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## 3b. MultiLock: 8 clients, each a MultiLock over a random 2 of 4 names, 100 µs inside\n\n")
	if r.MutexOK == nil || !*r.MutexOK {
		b.WriteString("**NO — MUTUAL EXCLUSION BROKEN, figures withheld**\n")
		return b.String()
	}
	fmt.Fprintf(&b, "| sets/s | mean wait µs | p99 wait µs | max wait µs | max/mean |\n|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", rateSpread(r.OpsPerS, r.OpsPerSMin, r.OpsPerSMax),
		num(r.MeanWaitus, "%.0f"), num(r.P99us, "%.0f"), num(r.MaxWaitus, "%.0f"), maxMean(*r))
	return b.String()
}

// queuesSection renders the long-queue scenario.
func queuesSection(o output) string {
	if len(o.Queues) == 0 {
		return ""
	}
	var b strings.Builder
	q := o.Queues[0]
	fmt.Fprintf(&b, "\n## 3c. Long queues: a newcomer's attempt and the holder's release with %d and %d waiters queued\n\n", q.Short, q.Long)
	fmt.Fprintf(&b, "Medians over %d fresh locks per size; the waiters are live registrations written into Redis. Redis commands include those inside the scripts; script time is Redis's own (commandstats usec of EVALSHA).\n\n", q.Reps)
	fmt.Fprintf(&b, "| kind | commands, %d | commands, %d | ratio | script µs, %d | script µs, %d | ratio |\n|---|---|---|---|---|---|---|\n", q.Short, q.Long, q.Short, q.Long)
	for _, q := range o.Queues {
		note := ""
		if !q.SameResult {
			note = " (a newcomer got the lock or a release failed)"
		}
		fmt.Fprintf(&b, "| %s%s | %.0f | %.0f | %.2f× | %.0f | %.0f | %.2f× |\n", q.Kind, note, q.CmdsShort, q.CmdsLong, q.CmdsLong/max(q.CmdsShort, 1),
			q.UsecShort, q.UsecLong, q.UsecLong/max(q.UsecShort, 1))
	}
	return b.String()
}

// keysSection renders the keys scenario.
func keysSection(o output) string {
	k := o.Keys
	if k == nil {
		return ""
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("\n## 5b. Keys: %d goroutines, acquire + release over %s names, %.0f s per library\n\n", k.Workers, thousands(int64(k.Names)), k.LoadS)
	w("Each goroutine takes one of the names at random, in a loop, through one client of the library on a database of its own. "+
		"DBSIZE there is read every second and right after the load, before anything written in its last seconds could expire; "+
		"the bound is k × names, k = %d keys a dlock Mutex name in use may keep (doc.go, \"Keys\": the lock, the queue and alive). Redis's latency monitor records "+
		"every event of %d ms or more (LATENCY RESET before each library, LATENCY LATEST after): its longest expire cycle and command. "+
		"PING: one connection of its own, a PING every millisecond, on the idle server before any load and during each load "+
		"(the load runs in this process, so PING there includes the bench's own scheduling).\n\n", k.KeysPerName, k.ThresholdMs)
	if k.LoadS <= 10 {
		w("The load ran %.0f s: keys that an operation writes for 10 s could not expire during it, so the latency figures say nothing of what their expiry costs; the full run's loads do.\n\n", k.LoadS)
	}
	w("| library | variant | ops | ops/s | DBSIZE peak | DBSIZE at end | k × names | expire-cycle max ms | command max ms | PING p99.9 µs | PING max µs |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	w("| idle server | | | | | | | | | %.0f | %.0f |\n", k.IdlePing.P999us, k.IdlePing.Maxus)
	for _, r := range k.Runs {
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %.0f |\n", r.Library, r.Variant, thousands(r.Ops), rateN(r.OpsPerS, "%.2fk"),
			thousands(r.DBSizePeak), thousands(r.DBSizeEnd), thousands(k.Bound), latencyMs(r, r.ExpireCycleMaxMs), latencyMs(r, r.CommandMaxMs),
			r.Ping.P999us, r.Ping.Maxus)
	}
	for _, r := range k.Runs {
		if r.OtherEvents != "" {
			w("\nOther latency events during %s/%s (longest, ms): %s.\n", r.Library, r.Variant, r.OtherEvents)
		}
	}
	return b.String()
}

// latencyMs is a latency event's longest figure, "< threshold" when none
// reached the threshold.
func latencyMs(r keysRun, ms int64) string {
	switch {
	case !r.LatencyOK:
		return "not read"
	case ms == 0:
		return fmt.Sprintf("< %d", keysThresholdMs)
	}
	return fmt.Sprint(ms)
}

// thousands is n with commas between groups of three digits.
func thousands(n int64) string {
	if n < 0 {
		return "-" + thousands(-n)
	}
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// rttOf is the RTT the targets count in (DECISIONS §7): raw go-redis's
// uncontended acquire+release p50 over 2, from this run; 0 if not measured.
func rttOf(o output) float64 {
	if raw := find(o.Results, "uncontended", "raw"); raw != nil && raw.P50us != nil {
		return *raw.P50us / 2
	}
	return 0
}

// samples is the largest Samples of rs (the slices or rounds behind the medians).
func samples(rs []result) int {
	n := 0
	for _, r := range rs {
		n = max(n, r.Samples)
	}
	return n
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word + " (so no spread)"
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func maxMean(r result) string {
	if r.MaxWaitus != nil && r.MeanWaitus != nil && *r.MeanWaitus > 0 {
		return fmt.Sprintf("%.0f×", *r.MaxWaitus / *r.MeanWaitus)
	}
	return "–"
}

func cfgLocks(s []scaleResult) int {
	if len(s) == 0 {
		return 0
	}
	return s[0].locks
}

func rawField(raw *result, get func(*result) *float64) *float64 {
	if raw == nil {
		return nil
	}
	return get(raw)
}

const howToRead = `
## How to read this

- All libraries run against the same private redis-server. Uncontended and parallel interleave the libraries in short
  slices with a rotating order, so the machine's drift hits all alike; contended runs each variant in its own window,
  in rotating order over rounds. Read the ratios; absolute times on a shared VM move from run to run.
- Spread: ops/s and p50 (uncontended, parallel) are the median of the per-slice figures with their min–max; the
  ratio to raw is the median over slices of the ratio to raw's slice of the same pass. CS/s and gap p50 (contended)
  are the median of the per-round figures with their min–max; their ratio to raw is the ratio of the medians. p99,
  mean and max wait and the per-op counts are over all slices or rounds together; share min–max is the lowest and
  highest per-round share. Each section says how many slices or rounds are behind its figures (a median of two is
  their mean).
- RTT = raw go-redis's uncontended acquire+release p50 over 2, from the same run: what one request costs through
  go-redis here (PING, section 4, costs less). An uncontended acquire+release cannot be faster than 2 RTT without
  pipelining. The hand-off gap runs from the moment the holder calls its release to the moment the next holder's
  lock returns, so it includes the release's own request.
- "of which extends" (dlock): renewals and the extends that lengthen a lease a release granted, counted by dlock's
  Extended hook; "of which found it held" (dlock): its acquire calls answered "held" (a waiter registering). Neither
  is on the path that gates the next holder, which costs requests/CS minus both.
- requests/op (client) is what the library's clients sent, counted in the client: a go-redis hook on every client a
  library instance opens (dlock, raw, redsync, redislock), a counting wrapper around the rueidis client
  (rueidislock, via LockerOption.ClientBuilder). A script call (EVALSHA) is one request, each command of a pipeline
  is one; connection set-up commands count when they happen in the measured span. go-redis sends pub/sub
  SUBSCRIBE/UNSUBSCRIBE without running hooks, so those are added from the commandstats delta (only the library
  under test talks to Redis in a measured span); each table notes how many that was.
  round trips/op (client): a command or a whole pipeline is one; "not counted" for rueidislock, because rueidis
  pipelines the commands of concurrent callers onto one connection by itself, so the client cannot tell round
  trips. A figure that cannot be counted reads "not counted" here and is left out of latest.json (listed in the
  row's not_counted).
- Redis commands/op and /CS are commands executed, from the INFO commandstats delta (INFO itself excluded;
  commands run inside Lua scripts count too, so raw SET NX + compare-and-delete is 4: SET, EVALSHA, GET, DEL)
  divided by operations: everything the library made Redis do, including failed polls and wake-up traffic.
  redis CPU is the INFO cpu (sys+user) delta per operation.
- Contended: gap = a holder starts releasing → a *different* contender's Lock returns. Wait = a contender starts
  asking → it holds the lock; waits still pending when the window closed are included in max wait. Share = a
  contender's critical sections in a round / the mean over that round's contenders (1.0 is perfectly fair).
  "same holder again" = the releaser took the lock straight back. Mutual exclusion is checked with an occupancy
  counter and a non-atomic counter that must equal the acquisitions; a variant that broke it has its figures withheld.
- raw = go-redis SET NX PX + EVALSHA compare-and-delete; under contention it polls every 1 ms.
  Variants: dlock default (a plain go-redis client) / aggressive (WithAutoPipeline: requests batched through go-redis's autopipeliner);
  redsync default (32 tries, 50–250 ms delay) / aggressive (1 ms, unlimited tries);
  redislock default LinearBackoff(100 ms) (its own default does not wait) / aggressive LinearBackoff(1 ms);
  rueidislock default (KeyMajority 2: 3 keys) / aggressive (KeyMajority 1 + NoLoopTracking).
- Targets: peers are the redsync, redislock and rueidislock variants (raw is the baseline, not a peer); a variant
  whose mutual exclusion broke is left out. MET/MISSED is decided from this run's figures (medians where there is a
  spread), so on a shared machine a figure near its bound can flip between runs: check the spread.
- Scale: client requests and round trips per period are counted in the client as above, Redis commands per period
  by commandstats. In latest.json a scale row's requests_per_op, round_trips_per_op and redis_commands_per_op are
  per held lock per renewal period.
`

// clusterSection renders cluster-parallel and cluster-renewal.
func clusterSection(o output) string {
	c := o.Cluster
	if c == nil {
		return ""
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("\n## 6. Redis Cluster: %d primaries × %d replica each, on this machine\n\n", c.Primaries, c.ReplicasEach)
	w("The cluster is %d redis-servers on loopback, started and formed by internal/redistest in %.1f s. They share this machine's %v CPUs "+
		"with each other and with the bench: %d primaries on one machine cannot scale as %d machines would, and every write is applied "+
		"again by a replica on the same cores. Read these figures as what the cluster path costs, not as what a cluster gains.\n\n",
		c.Primaries*(1+c.ReplicasEach), c.StartupS, o.Machine["num_cpu"], c.Primaries, c.Primaries)

	rs, _ := pick(o.Results, "cluster-parallel")
	w("### cluster-parallel: %d goroutines, Lock + Unlock over %d names\n\n", c.Workers, c.Names)
	w("dlock with default options on the cluster (one go-redis ClusterClient) and on the single redis-server of the sections above (one go-redis Client), "+
		"interleaved in slices as in section 2. Goroutine w takes names w, w+%d, … in turn, so the names cover the slots of every primary and "+
		"no two goroutines ask for one lock. ops/s: median over %d slices (min–max); cluster / single: median of the per-slice ratios. "+
		"Redis commands and CPU on the cluster are summed over its primaries; its replicas' CPU is shown apart.\n\n", c.Workers, samples(rs))
	w("| Redis | ops/s | cluster / single | requests/op (client) | round trips/op (client) | Redis commands/op (incl. in scripts) | redis CPU µs/op | replica CPU µs/op |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		what := "one redis-server"
		if r.Variant == "cluster" {
			what = fmt.Sprintf("cluster, %d primaries", c.Primaries)
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s |\n", what, rateSpread(r.OpsPerS, r.OpsPerSMin, r.OpsPerSMax), times(r.OpsVsSingle),
			counted(r, r.RequestsPerOp, "requests_per_op"), counted(r, r.RoundTripsPerOp, "round_trips_per_op"),
			num(r.RedisCommandsPerOp, "%.2f"), num(r.RedisCPUusPerOp, "%.1f"), num(r.ReplicaCPUusPerOp, "%.1f"))
	}
	w("%s", pubsubNote(rs, "op"))

	w("\n### cluster-renewal: %d leases held on the cluster, TTL 3 s (renewal period 1 s), over %d periods\n\n", c.Leases, c.Periods)
	w("One dlock Client takes %d Mutex leases (%d goroutines, %.2f s) whose names spread over every slot, lets renewal run for 1.5 s, "+
		"then counts for %d periods. Client figures: a go-redis hook added, once every lease was held, to the ClusterClient's "+
		"client for each node (ForEachShard); a round trip is a command or a whole pipeline. Redis figures: each primary's INFO "+
		"commandstats and cpu deltas over the same span. dlock renews the due leases of one server in pipelines of up to %d leases, "+
		"with one script call per hash slot, so expect ⌈leases / %d⌉ round trips per primary per period (a few more when the leases "+
		"fall due apart) and about one script call per slot that holds leases.\n\n",
		c.Leases, c.Workers, c.AcquireS, c.Periods, renewBatch, renewBatch)
	w("| primary | slots | leases | slots with leases | script calls / period (client) | EVALSHA + EVAL / period (Redis) | round trips / period (client) | expected ⌈leases / %d⌉ | leases / round trip | Redis commands / period (incl. in scripts) | redis CPU ms / period | replica CPU ms / period |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n", renewBatch)
	var tot primaryRenewals
	other := 0.0
	for _, p := range c.PerPrimary {
		w("| %s | %s | %d | %d | %.1f | %.1f | %.1f | %d | %.1f | %.1f | %.1f | %.1f |\n", p.Addr, p.Slots, p.Leases, p.SlotsWithLeases,
			p.ScriptCalls, p.RedisScriptCalls, p.RoundTrips, p.ExpectedRoundTrips, p.LeasesPerRoundTrip, p.RedisCommands, p.RedisCPUms, p.ReplicaCPUms)
		tot.Leases += p.Leases
		tot.SlotsWithLeases += p.SlotsWithLeases
		tot.ScriptCalls += p.ScriptCalls
		tot.RedisScriptCalls += p.RedisScriptCalls
		tot.RoundTrips += p.RoundTrips
		tot.ExpectedRoundTrips += p.ExpectedRoundTrips
		tot.RedisCommands += p.RedisCommands
		tot.RedisCPUms += p.RedisCPUms
		tot.ReplicaCPUms += p.ReplicaCPUms
		other += p.OtherRequests
	}
	perRT := "–"
	if tot.RoundTrips > 0 {
		perRT = fmt.Sprintf("%.1f", float64(tot.Leases)/tot.RoundTrips)
	}
	w("| all | | %d | %d | %.1f | %.1f | %.1f | %d | %s | %.1f | %.1f | %.1f |\n", tot.Leases, tot.SlotsWithLeases,
		tot.ScriptCalls, tot.RedisScriptCalls, tot.RoundTrips, tot.ExpectedRoundTrips, perRT, tot.RedisCommands, tot.RedisCPUms, tot.ReplicaCPUms)
	if other > 0 {
		w("\nBesides the renewals the client sent the primaries %.1f other requests per period (go-redis reloading its slot map).\n", other)
	}
	if c.LeasesLost > 0 {
		w("\n**LEASES LOST: %d of %d** (Lease.Err after the periods was not nil, or Unlock failed).\n", c.LeasesLost, c.Leases)
	} else {
		w("\nLeases lost: 0 of %d (Lease.Err checked after the periods, then every lease unlocked).\n", c.Leases)
	}
	return b.String()
}

// redLockSection renders the RedLock scenarios.
func redLockSection(o output) string {
	un, _ := pick(o.Results, "redlock-uncontended")
	co, _ := pick(o.Results, "redlock-contended")
	if len(un) == 0 && len(co) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("\n## 7. RedLock: five independent redis-servers on this machine\n\n")
	w("dlock's NewRedLock beside redsync's Redlock (redsync.New over five pools), on the same five servers. " +
		"dlock's acquire is two round trips to every node at once (the fence is written back to the majority before Lock returns) and its lease is renewed; " +
		"a release wakes one waiter by pub/sub on each node. redsync has no fence, no renewal and no waking: a waiter retries after its retry delay " +
		"(default 50–250 ms; aggressive: 1 ms, without limit). The five servers share this machine's CPUs with the clients.\n\n")
	w("Uncontended, 1 goroutine: ops/s and p50 median over %d slices (min–max), p99 over all.\n\n", samples(un))
	w("| library | variant | ops/s | p50 µs | p99 µs | requests/op (client, all nodes) | allocs/op | bytes/op |\n|---|---|---|---|---|---|---|---|\n")
	var dl, rs *result
	for i, r := range un {
		w("| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Library, r.Variant, rateSpread(r.OpsPerS, r.OpsPerSMin, r.OpsPerSMax),
			numSpread(r.P50us, r.P50usMin, r.P50usMax, "%.0f"), num(r.P99us, "%.0f"), counted(r, r.RequestsPerOp, "requests_per_op"),
			num(r.AllocsPerOp, "%.0f"), num(r.BytesPerOp, "%.0f"))
		switch r.Library {
		case "dlock":
			dl = &un[i]
		case "redsync":
			rs = &un[i]
		}
	}
	if dl != nil && rs != nil && dl.P50us != nil && rs.P50us != nil {
		w("\np50 dlock / redsync: %.2f×; ops/s dlock / redsync: %s.\n", *dl.P50us / *rs.P50us, ratio(dl.OpsPerS, rs.OpsPerS))
	}
	w("\n16 contenders, one key, each its own client, looping: CS/s and gap p50 median over %s (min–max).\n\n", plural(samples(co), "round"))
	w("| library | variant | mutex ok | CS/s | gap p50 µs | same holder again | mean wait µs | max wait µs | max/mean | share min–max | requests/CS (client, all nodes) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range co {
		ok := r.MutexOK != nil && *r.MutexOK
		switch {
		case !ok:
			w("| %s | %s | **NO — MUTUAL EXCLUSION BROKEN, figures withheld** | | | | | | | | |\n", r.Library, r.Variant)
		case r.OpsPerS == nil:
			w("| %s | %s | yes | no critical section completed | | | | | | | |\n", r.Library, r.Variant)
		default:
			w("| %s | %s | yes | %s | %s | %.0f%% | %s | %s | %s | %s–%s | %s |\n", r.Library, r.Variant,
				rateSpread(r.OpsPerS, r.OpsPerSMin, r.OpsPerSMax), numSpread(r.GapP50us, r.GapP50usMin, r.GapP50usMax, "%.0f"), r.selfPct,
				num(r.MeanWaitus, "%.0f"), num(r.MaxWaitus, "%.0f"), maxMean(r), num(r.ShareMin, "%.2f"), num(r.ShareMax, "%.2f"),
				counted(r, r.RequestsPerOp, "requests_per_op"))
		}
	}
	return b.String()
}
