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

func rate(p *float64) string {
	if p == nil {
		return "–"
	}
	if *p >= 1000 {
		return fmt.Sprintf("%.2fk", *p/1000)
	}
	return fmt.Sprintf("%.0f", *p)
}

func ratio(a, b *float64) string {
	if a == nil || b == nil || *b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", *a / *b)
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

func report(o output, scales []scaleResult) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# dlock vs peers: one run, one redis-server\n\n")
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

	w("## 4. Floor\n\nPING on one go-redis connection, interleaved with the uncontended slices: p50 %.0f µs, p99 %.0f µs (1 RTT).\n\n",
		o.Machine["ping_p50_us"], o.Machine["ping_p99_us"])

	rs, raw := pick(o.Results, "uncontended")
	w("## 1. Uncontended: 1 goroutine, acquire + release\n\n")
	w("| library | variant | ops/s | p50 µs | p99 µs | p50 vs raw | p50 in RTT | Redis commands/op (incl. inside scripts) | redis CPU µs/op |\n|---|---|---|---|---|---|---|---|---|\n")
	ping := o.Machine["ping_p50_us"].(float64)
	for _, r := range rs {
		rtt := "–"
		if r.P50us != nil && ping > 0 {
			rtt = fmt.Sprintf("%.1f", *r.P50us/ping)
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Library, r.Variant, rate(r.OpsPerS), num(r.P50us, "%.0f"), num(r.P99us, "%.0f"),
			ratio(r.P50us, rawField(raw, func(r *result) *float64 { return r.P50us })), rtt, num(r.RequestsPerOp, "%.2f"), num(r.RedisCPUusPerOp, "%.1f"))
	}
	rs, raw = pick(o.Results, "parallel")
	w("\n## 2. Parallel: 64 goroutines, distinct keys, one client per library\n\n")
	w("| library | variant | ops/s | vs raw | Redis commands/op (incl. inside scripts) | redis CPU µs/op |\n|---|---|---|---|---|---|\n")
	for _, r := range rs {
		w("| %s | %s | %s | %s | %s | %s |\n", r.Library, r.Variant, rate(r.OpsPerS),
			ratio(r.OpsPerS, rawField(raw, func(r *result) *float64 { return r.OpsPerS })), num(r.RequestsPerOp, "%.2f"), num(r.RedisCPUusPerOp, "%.1f"))
	}
	for _, scen := range []string{"contended", "contended-think"} {
		rs, raw = pick(o.Results, scen)
		title := "16 contenders, one key, each its own client, looping"
		if scen == "contended-think" {
			title = "as above with 0–200 µs think time between sections"
		}
		w("\n## 3. %s: %s\n\n", scen, title)
		w("| library | variant | mutex ok | CS/s | vs raw (1 ms poll) | gap p50 µs | gap p99 µs | same holder again | mean wait µs | max wait µs | max/mean | share min–max | Redis commands/CS (incl. inside scripts) | redis CPU µs/CS |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range rs {
			ok := r.MutexOK != nil && *r.MutexOK
			if !ok {
				w("| %s | %s | **NO — MUTUAL EXCLUSION BROKEN, figures withheld** | | | | | | | | | | | |\n", r.Library, r.Variant)
				continue
			}
			mm := "–"
			if r.MaxWaitus != nil && r.MeanWaitus != nil && *r.MeanWaitus > 0 {
				mm = fmt.Sprintf("%.0f×", *r.MaxWaitus / *r.MeanWaitus)
			}
			w("| %s | %s | yes | %s | %s | %s | %.0f | %.0f%% | %s | %s | %s | %s–%s | %s | %s |\n", r.Library, r.Variant, rate(r.OpsPerS),
				ratio(r.OpsPerS, rawField(raw, func(r *result) *float64 { return r.OpsPerS })), num(r.GapP50us, "%.0f"), r.gapP99, r.selfPct,
				num(r.MeanWaitus, "%.0f"), num(r.MaxWaitus, "%.0f"), mm, num(r.ShareMin, "%.2f"), num(r.ShareMax, "%.2f"),
				num(r.RequestsPerOp, "%.2f"), num(r.RedisCPUusPerOp, "%.1f"))
		}
	}
	w("\n## 5. Scale: %d locks held at once by one process, TTL 3 s (renewal period 1 s)\n\n", cfgLocks(scales))
	w("| library | variant | goroutines added | heap added MB | acquire all, s | Redis commands / period | client round trips / period | round trips per 100 locks / period | leases lost |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range scales {
		rt, per100 := "not counted", "–"
		if s.rtPerPeriod >= 0 {
			rt = fmt.Sprintf("%.1f", s.rtPerPeriod)
			per100 = fmt.Sprintf("%.3f", s.rtPerPeriod*100/float64(s.locks))
		}
		w("| %s | %s | %d | %.1f | %.2f | %.1f | %s | %s | %d |\n", s.lib, s.variant, s.goroutinesAdded, s.heapMB, s.acquireSeconds, s.cmdsPerPeriod, rt, per100, s.lost)
	}
	w("\nredsync and redislock have no automatic renewal, so they are not in this table.\n")
	w(howToRead)
	return b.String()
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
- RTT = the PING p50 above. An uncontended acquire+release cannot be faster than 2 RTT without pipelining.
- Redis commands/op and /CS are commands executed, from the INFO commandstats delta (INFO itself excluded;
  commands run inside Lua scripts count too, so raw SET NX + compare-and-delete is 4: SET, EVALSHA, GET, DEL)
  divided by operations: everything the library made Redis do, including failed polls and wake-up traffic.
  redis CPU is the INFO cpu (sys+user) delta per operation.
- Contended: gap = a holder starts releasing → a *different* contender's Lock returns. Wait = a contender starts
  asking → it holds the lock; waits still pending when the window closed are included in max wait. Share = a
  contender's critical sections / the mean over contenders (1.0 is perfectly fair). "same holder again" = the
  releaser took the lock straight back. Mutual exclusion is checked with an occupancy counter and a non-atomic
  counter that must equal the acquisitions; a variant that broke it has its figures withheld.
- raw = go-redis SET NX PX + EVALSHA compare-and-delete; under contention it polls every 1 ms.
  Variants: redsync default (32 tries, 50–250 ms delay) / aggressive (1 ms, unlimited tries);
  redislock default LinearBackoff(100 ms) (its own default does not wait) / aggressive LinearBackoff(1 ms);
  rueidislock default (KeyMajority 2: 3 keys) / aggressive (KeyMajority 1 + NoLoopTracking).
- Scale: commands per period are counted by Redis; round trips are counted in the go-redis client (a pipeline is one).
  In latest.json a scale row's requests_per_op is Redis commands per held lock per renewal period.
`
