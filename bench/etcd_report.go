package main

import (
	"fmt"
	"strings"
)

// etcdReport is the report of a run of the etcd section alone (-only etcd).
func etcdReport(o output) string {
	return "# dlock beside etcd: one run\n\n" + environment(o) + etcdSection(o)
}

// etcdSection renders the etcd section: elections, then Mutex.
func etcdSection(o output) string {
	e := o.Etcd
	if e == nil {
		return ""
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("\n## 8. Beside etcd: Election and Mutex\n\n")
	w("Settings. etcd %s, a single member on loopback started by the bench for the section, twice, each in a temporary directory of its own under %s (%s; a 4 KiB write + fsync there: p50 %.0f µs over %d), on free ports:\n\n",
		e.Version, e.DataDir, e.Filesystem, e.FsyncP50us, e.FsyncN)
	for _, s := range e.Servers {
		what := "etcd's defaults: its write-ahead log is fsynced before a write is acknowledged"
		if s.Setting == "no-fsync" {
			what = "no fsync: a write is acknowledged without reaching the disk, so a crash of the machine can lose acknowledged writes"
		}
		w("- **%s**: `etcd %s` (%s)\n", s.Setting, strings.Join(s.Args, " "), what)
	}
	w("\ndlock runs on the private redis-server of this report (`--save \"\" --appendonly no`: nothing reaches the disk). "+
		"The etcd client is go.etcd.io/etcd/client/v3 and its concurrency package (%s), its log discarded. Every figure is from one machine whose %v CPUs "+
		"the servers share with the bench and, here, with other work: read the medians and their spread, and the ratios.\n\n",
		o.Versions["go.etcd.io/etcd/client/v3"], o.Machine["num_cpu"])

	w("### Election: the next leader, TTL %.0f s\n\n", e.TTLms/1000)
	w("dlock: `Client.Election(name, WithTTL(%.0fs))`, `Campaign`, `Leadership.Resign`. etcd: `concurrency.NewSession(client, WithTTL(%.0f))`, "+
		"`concurrency.NewElection`, `Campaign`, `Resign`. Every candidate has a connection of its own.\n\n", e.TTLms/1000, e.TTLms/1000)
	w("- **resign**: two candidates in one process; one leads, the other campaigns and is seen in line by the server "+
		"(dlock: Inspect lists it as a waiter; etcd: its key is there); %.0f ms later the leader calls Resign (a new etcd candidate's watch "+
		"starts at a revision it read, and etcd delivers such a watcher's events every 100 ms until it has caught up: a Resign sooner would time that). Measured: from the call to Resign to the return "+
		"of the other's Campaign. They swap roles each round.\n", ms(lineSettle))
	w("- **kill**: %d candidates, each a process of its own (the bench binary run again as a worker); once the server shows all but the leader in line, "+
		"and %.0f ms plus a random 0–TTL/2 later (so that the kill falls anywhere in the leader's renewal period), the bench sends SIGKILL to the leader's process. "+
		"Measured: from just before kill(2) to the return of Campaign in another process (each reads the wall clock: one machine, one clock). "+
		"A new process joins the line after each round. Each new leader's term (dlock) or key revision (etcd) is checked to be above the last.\n\n", e.Candidates, ms(lineSettle))
	w("| leader | system | setting | rounds | median ms | min–max ms | median in TTLs | median vs etcd fsync | median vs etcd no-fsync |\n|---|---|---|---|---|---|---|---|---|\n")
	find := func(how, setting string) *electionRow {
		for i := range e.Elections {
			if r := &e.Elections[i]; r.How == how && r.System == "etcd" && r.Setting == setting {
				return r
			}
		}
		return nil
	}
	vs := func(r electionRow, other *electionRow) string {
		if other == nil || other.MedianMs <= 0 || r.System == "etcd" && r.Setting == other.Setting {
			return "–"
		}
		return fmt.Sprintf("%.3g×", r.MedianMs/other.MedianMs)
	}
	for _, r := range e.Elections {
		how := "resigns"
		if r.How == "kill" {
			how = "SIGKILLed"
		}
		setting := r.Setting
		if r.System == "dlock" {
			setting = "Redis, no persistence"
		}
		w("| %s | %s | %s | %d | %s | %s–%s | %.3g | %s | %s |\n", how, r.System, setting, r.Rounds, msFmt(r.MedianMs), msFmt(r.MinMs), msFmt(r.MaxMs),
			r.MedianTTLs, vs(r, find(r.How, "fsync")), vs(r, find(r.How, "no-fsync")))
	}
	w("\nA resigning leader hands over at once. A killed leader's lease must run out before another candidate may lead, so the kill rows " +
		"are set by the TTL and by where in the renewal period the kill fell: dlock renews every third of the TTL, so its next leader comes " +
		"2/3 to 1 TTL after the kill; etcd's client sends a keep-alive once a third of the TTL has passed since the last answer, looking every " +
		"500 ms, and etcd revokes expired leases every 500 ms, so there it comes from about TTL − (TTL/3 + 500 ms) to TTL + 500 ms after. " +
		"Read the kill rows' min–max before their ratios.\n")

	un, _ := pick(o.Results, "etcd-uncontended")
	co, _ := pick(o.Results, "etcd-contended")
	if len(un) == 0 && len(co) == 0 {
		return b.String()
	}
	w("\n### Mutex: dlock's beside etcd's concurrency.Mutex\n\n")
	w("dlock: `Client.Mutex(key).Lock` / `Lease.Unlock`, default options (TTL 30 s). etcd: `concurrency.NewMutex(session, prefix).Lock` / `Unlock` "+
		"on a session with etcd's default TTL (60 s), one client and session per library instance. The harness of sections 1 and 3: "+
		"uncontended, one goroutine, acquire + release of a free key, the three interleaved in %.0f ms slices in rotating order (ops/s and p50: median over %d slices, "+
		"min–max; p99 over all); contended, 16 contenders on one key, each its own client (and session), a small computation and a non-atomic counter "+
		"under the lock, mutual exclusion checked, %s. Requests (client): dlock's Redis requests as in section 1; etcd's unary RPCs, counted by "+
		"a gRPC interceptor (the watch and lease keep-alive streams' messages are not counted). An etcd waiter watches the key ahead of it "+
		"from the revision it read, and etcd delivers the events of such a watcher every 100 ms until it has caught up: a waiter whose turn "+
		"comes sooner than that after it joined can wait for that loop. Server CPU: the redis-server's (INFO cpu) for dlock, the etcd process's "+
		"(utime + stime from /proc, in 10 ms ticks) for etcd, over the same slices or windows, per op.\n\n",
		e.SliceMs, samples(un), plural(samples(co), "round"))
	w("| library | setting | ops/s | p50 µs | p99 µs | requests/op (client) | server CPU µs/op | allocs/op | bytes/op |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range un {
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Library, mutexSetting(r), rateSpread(r.OpsPerS, r.OpsPerSMin, r.OpsPerSMax),
			numSpread(r.P50us, r.P50usMin, r.P50usMax, "%.0f"), num(r.P99us, "%.0f"), counted(r, r.RequestsPerOp, "requests_per_op"),
			num(serverCPU(r), "%.1f"), num(r.AllocsPerOp, "%.0f"), num(r.BytesPerOp, "%.0f"))
	}
	d := findVariant(o.Results, "etcd-uncontended", "dlock", "default")
	ef, en := findVariant(o.Results, "etcd-uncontended", "etcd", "fsync"), findVariant(o.Results, "etcd-uncontended", "etcd", "no-fsync")
	if d != nil && ef != nil && en != nil {
		w("\np50 dlock / etcd (ratio of the medians): %s beside etcd with fsync, %s beside etcd without.\n",
			ratio(d.P50us, ef.P50us), ratio(d.P50us, en.P50us))
	}
	w("\n| library | setting | mutex ok | CS/s | gap p50 µs | gap p99 µs | same holder again | mean wait µs | max wait µs | max/mean | share min–max | requests/CS (client) | server CPU µs/CS |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range co {
		ok := r.MutexOK != nil && *r.MutexOK
		switch {
		case !ok:
			w("| %s | %s | **NO — MUTUAL EXCLUSION BROKEN, figures withheld** | | | | | | | | | | |\n", r.Library, mutexSetting(r))
		case r.OpsPerS == nil:
			w("| %s | %s | yes | no critical section completed | | | | | | | | | |\n", r.Library, mutexSetting(r))
		default:
			w("| %s | %s | yes | %s | %s | %.0f | %.0f%% | %s | %s | %s | %s–%s | %s | %s |\n", r.Library, mutexSetting(r),
				rateSpread(r.OpsPerS, r.OpsPerSMin, r.OpsPerSMax), numSpread(r.GapP50us, r.GapP50usMin, r.GapP50usMax, "%.0f"), r.gapP99, r.selfPct,
				num(r.MeanWaitus, "%.0f"), num(r.MaxWaitus, "%.0f"), maxMean(r), num(r.ShareMin, "%.2f"), num(r.ShareMax, "%.2f"),
				counted(r, r.RequestsPerOp, "requests_per_op"), num(serverCPU(r), "%.1f"))
		}
	}
	d = findVariant(o.Results, "etcd-contended", "dlock", "default")
	ef, en = findVariant(o.Results, "etcd-contended", "etcd", "fsync"), findVariant(o.Results, "etcd-contended", "etcd", "no-fsync")
	if d != nil && ef != nil && en != nil {
		w("\nCS/s dlock / etcd (ratio of the medians): %s beside etcd with fsync, %s beside etcd without.\n",
			ratio(d.OpsPerS, ef.OpsPerS), ratio(d.OpsPerS, en.OpsPerS))
	}
	return b.String()
}

func msFmt(x float64) string {
	if x >= 100 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.1f", x)
}

// mutexSetting names a Mutex row's server setting.
func mutexSetting(r result) string {
	if r.Library == "dlock" {
		return "Redis, no persistence"
	}
	return r.Variant
}

// serverCPU is a Mutex row's server CPU per op: Redis's for dlock, etcd's
// for etcd.
func serverCPU(r result) *float64 {
	if r.Library == "etcd" {
		return r.ServerCPUusPerOp
	}
	return r.RedisCPUusPerOp
}
