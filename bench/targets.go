package main

import (
	"fmt"
	"strings"
)

// targets renders the "Targets" section: exactly the targets of the open
// performance issue, each comparing one of dlock's figures from this run with
// its bound, itself taken from this run (DECISIONS §7). A target holds when
// it is met on Redis and on Valkey: one run measures one server.
func targets(o output, _ []scaleResult) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("## Targets\n\n")
	w("Decided from this run's figures (medians; spreads in brackets), on %v. A target holds when it is met on Redis and on Valkey, each in a run of its own. Peers: the redsync, redislock and rueidislock variants.\n\n", o.Machine["redis_server"])
	w("| target | dlock | compared with | verdict |\n|---|---|---|---|\n")
	line := func(target, mine, other, verdict string) {
		w("| %s | %s | %s | %s |\n", target, mine, other, verdict)
	}
	verdict := func(ok bool) string {
		if ok {
			return "MET"
		}
		return "**MISSED**"
	}
	const none = "not measured"
	rtt := rttOf(o)

	// No key per operation.
	const keysTarget = "No key per operation: DBSIZE peak ≤ k × names; no expire-cycle or command latency event over 5 ms"
	if kr := keysRunOf(o, "dlock"); kr == nil || kr.Ops == 0 || kr.DBSizeN == 0 || !kr.LatencyOK {
		line(keysTarget, none, "", none)
	} else {
		line(keysTarget,
			fmt.Sprintf("DBSIZE peak %s (%s at the end) after %s ops over %s names in %.0f s; expire-cycle max %s ms, command max %s ms; PING p99.9 %.0f µs, max %.0f µs",
				thousands(kr.DBSizePeak), thousands(kr.DBSizeEnd), thousands(kr.Ops), thousands(int64(o.Keys.Names)), o.Keys.LoadS,
				latencyMs(*kr, kr.ExpireCycleMaxMs), latencyMs(*kr, kr.CommandMaxMs), kr.Ping.P999us, kr.Ping.Maxus),
			fmt.Sprintf("k × names = %d × %s = %s keys; %d ms; PING on the idle server p99.9 %.0f µs, max %.0f µs", o.Keys.KeysPerName, thousands(int64(o.Keys.Names)), thousands(o.Keys.Bound), keysEventMs,
				o.Keys.IdlePing.P999us, o.Keys.IdlePing.Maxus),
			verdict(kr.DBSizePeak <= o.Keys.Bound && kr.ExpireCycleMaxMs <= keysEventMs && kr.CommandMaxMs <= keysEventMs))
	}

	// Uncontended, against redislock: the peer whose release is checked by
	// owner too.
	d, rl := find(o.Results, "uncontended", "dlock"), find(o.Results, "uncontended", "redislock")
	if d != nil && d.P50VsRedislock != nil && rl != nil {
		line("uncontended: p50 ≤ 1.05× redislock's (median of per-slice ratios, operations alternating)",
			fmt.Sprintf("p50 %s µs; %.3f× redislock's over %d slices", numSpread(d.P50us, d.P50usMin, d.P50usMax, "%.0f"), *d.P50VsRedislock, d.PairedSamples),
			fmt.Sprintf("redislock p50 %s µs", numSpread(rl.P50us, rl.P50usMin, rl.P50usMax, "%.0f")),
			verdict(*d.P50VsRedislock <= 1.05))
	} else {
		line("uncontended: p50 ≤ 1.05× redislock's", none, none, none)
	}
	ratio := func(t, unit string, k float64, get func(*result) *float64) {
		if d == nil || rl == nil || get(d) == nil || get(rl) == nil || *get(rl) <= 0 {
			line(t, none, none, none)
			return
		}
		x := *get(d) / *get(rl)
		line(t, fmt.Sprintf("%.1f %s (%.2f×)", *get(d), unit, x), fmt.Sprintf("redislock %.1f %s", *get(rl), unit), verdict(x <= k))
	}
	ratio("uncontended: Redis work per op ≤ 1.5× redislock's (commandstats µs of the commands sent)", "µs", 1.5, func(r *result) *float64 { return r.RedisWorkUsPerOp })
	ratio("uncontended: Redis CPU per op ≤ 1.15× redislock's", "µs", 1.15, func(r *result) *float64 { return r.RedisCPUusPerOp })
	ratio("uncontended: allocations per op ≤ redislock's", "allocs", 1, func(r *result) *float64 { return r.AllocsPerOp })
	ratio("uncontended: bytes per op ≤ redislock's", "B", 1, func(r *result) *float64 { return r.BytesPerOp })

	// 64 goroutines: dlock's default Client against every peer variant.
	const parTarget = "64 goroutines: dlock default's ops/s ratio to raw above every peer variant's"
	pd := findVariant(o.Results, "parallel", "dlock", "default")
	var bestPeer *result
	for i, r := range o.Results {
		if r.Scenario == "parallel" && isPeer(r.Library) && r.OpsVsRaw != nil &&
			(bestPeer == nil || *r.OpsVsRaw > *bestPeer.OpsVsRaw) {
			bestPeer = &o.Results[i]
		}
	}
	switch {
	case pd == nil || pd.OpsVsRaw == nil:
		line(parTarget, none, none, none)
	case bestPeer == nil:
		line(parTarget, fmt.Sprintf("%.2f× raw", *pd.OpsVsRaw), "no peer variant measured", none)
	default:
		line(parTarget, fmt.Sprintf("%.2f× raw (%s)", *pd.OpsVsRaw, rateSpread(pd.OpsPerS, pd.OpsPerSMin, pd.OpsPerSMax)),
			fmt.Sprintf("best: %s/%s %.2f× raw", bestPeer.Library, bestPeer.Variant, *bestPeer.OpsVsRaw), verdict(*pd.OpsVsRaw > *bestPeer.OpsVsRaw))
	}

	// dlock on rueidis: at 64 goroutines at least rueidislock's best variant
	// and dlock on go-redis (ratios to raw); uncontended and contended
	// within 5% of dlock on go-redis.
	if dr := findVariant(o.Results, "parallel", "dlock-rueidis", "default"); dr != nil && dr.OpsVsRaw != nil && pd != nil && pd.OpsVsRaw != nil {
		best := 0.0
		for _, r := range o.Results {
			if r.Scenario == "parallel" && r.Library == "rueidislock" && r.OpsVsRaw != nil {
				best = max(best, *r.OpsVsRaw)
			}
		}
		line("64 goroutines: dlock on rueidis ≥ rueidislock's best variant and ≥ dlock on go-redis (ratios to raw)",
			fmt.Sprintf("%.2f× raw", *dr.OpsVsRaw), fmt.Sprintf("rueidislock best %.2f×, dlock %.2f×", best, *pd.OpsVsRaw),
			verdict(*dr.OpsVsRaw >= best && *dr.OpsVsRaw >= *pd.OpsVsRaw))
	}
	// Uncontended, by the p50s paired with raw's: ops/s medians of slices
	// run at different moments move by more than 5% on a 2-vCPU VM.
	if dr, d := findVariant(o.Results, "uncontended", "dlock-rueidis", "default"), findVariant(o.Results, "uncontended", "dlock", "default"); dr != nil && d != nil && dr.P50VsRaw != nil && d.P50VsRaw != nil {
		x := *dr.P50VsRaw / *d.P50VsRaw
		line("uncontended: dlock on rueidis p50 ≤ 1.05× dlock on go-redis (each paired with raw)", fmt.Sprintf("%.2f× raw: %.2f× dlock's", *dr.P50VsRaw, x), fmt.Sprintf("dlock %.2f× raw", *d.P50VsRaw), verdict(x <= 1.05))
	}
	if dr, d := findVariant(o.Results, "contended", "dlock-rueidis", "default"), findVariant(o.Results, "contended", "dlock", "default"); dr != nil && d != nil && dr.OpsPerS != nil && d.OpsPerS != nil {
		x := *dr.OpsPerS / *d.OpsPerS
		line("contended: dlock on rueidis CS/s ≥ 0.95× dlock on go-redis", fmt.Sprintf("%.2f×", x), fmt.Sprintf("dlock %.0f/s", *d.OpsPerS), verdict(x >= 0.95))
	}

	// Contended, and with think time: against the peer variants that starve
	// nobody (share min ≥ 0.5).
	for _, scen := range []string{"contended", "contended-think"} {
		d := find(o.Results, scen, "dlock")
		if d == nil || d.MutexOK == nil || !*d.MutexOK || d.OpsPerS == nil {
			line(scen+": dlock figures", none, "", "dlock's mutual exclusion broke or nothing completed")
			continue
		}
		if scen == "contended" {
			if d.MaxWaitus != nil && d.MeanWaitus != nil && *d.MeanWaitus > 0 && d.ShareMin != nil {
				mm := *d.MaxWaitus / *d.MeanWaitus
				line("contended: dlock's max wait ≤ 10× its mean, share min ≥ 0.5",
					fmt.Sprintf("max/mean %.1f× (max %.0f µs, mean %.0f µs); share min %.2f (lowest over rounds)", mm, *d.MaxWaitus, *d.MeanWaitus, *d.ShareMin),
					"10×; 0.5", verdict(mm <= 10 && *d.ShareMin >= 0.5))
			}
			if rtt > 0 && d.GapP50us != nil {
				line("contended: hand-off gap ≤ 1.5 RTT (median over rounds)",
					fmt.Sprintf("gap p50 %s µs", numSpread(d.GapP50us, d.GapP50usMin, d.GapP50usMax, "%.0f")),
					fmt.Sprintf("1.5 RTT = %.0f µs (RTT: raw's uncontended p50 / 2); gap = %.1f RTT", 1.5*rtt, *d.GapP50us/rtt),
					verdict(*d.GapP50us <= 1.5*rtt))
			} else {
				line("contended: hand-off gap ≤ 1.5 RTT", none, none, none)
			}
			if d.RequestsPerOp != nil {
				ext, held := 0.0, 0.0
				if d.ExtendsPerOp != nil {
					ext = *d.ExtendsPerOp
				}
				if d.HeldPerOp != nil {
					held = *d.HeldPerOp
				}
				gating := *d.RequestsPerOp - ext - held
				line("contended: ≤ 2 requests per critical section on the path that gates the next holder",
					fmt.Sprintf("%.2f (%.2f in all; off that path: %.2f extends, %.2f registrations that found it held)", gating, *d.RequestsPerOp, ext, held), "2", verdict(gating <= 2))
			} else {
				line("contended: ≤ 2 requests per critical section on the path that gates the next holder", "not counted", "2", none)
			}
		}
		t := scen + ": CS/s ≥ every peer variant with share min ≥ 0.5"
		mine := rateSpread(d.OpsPerS, d.OpsPerSMin, d.OpsPerSMax)
		var starving []string
		for _, r := range peerRows(o.Results, scen) {
			if r.ShareMin == nil || *r.ShareMin < 0.5 {
				starving = append(starving, r.Library+"/"+r.Variant)
			}
		}
		note := ""
		if len(starving) > 0 {
			note = "; starving (share min < 0.5), not compared: " + strings.Join(starving, ", ")
		}
		if best := bestBy(peerRows(o.Results, scen), func(r result) bool { return r.ShareMin != nil && *r.ShareMin >= 0.5 }); best != nil {
			line(t, mine, fmt.Sprintf("best: %s/%s %s%s", best.Library, best.Variant, rateSpread(best.OpsPerS, best.OpsPerSMin, best.OpsPerSMax), note),
				verdict(*d.OpsPerS >= *best.OpsPerS))
		} else {
			line(t, mine, "no peer qualified"+note, "no peer qualified")
		}
	}
	w("\n")
	return b.String()
}

// keysRunOf is lib's run in the keys scenario, nil if it did not run.
func keysRunOf(o output, lib string) *keysRun {
	if o.Keys == nil {
		return nil
	}
	for i := range o.Keys.Runs {
		if o.Keys.Runs[i].Library == lib {
			return &o.Keys.Runs[i]
		}
	}
	return nil
}

// find is lib's default variant in scen.
func find(rs []result, scen, lib string) *result { return findVariant(rs, scen, lib, "default") }

func findVariant(rs []result, scen, lib, variant string) *result {
	for i := range rs {
		if rs[i].Scenario == scen && rs[i].Library == lib && rs[i].Variant == variant {
			return &rs[i]
		}
	}
	return nil
}

// isPeer reports whether lib is a peer library: not dlock on any client
// (dlock, dlock-rueidis, dlock-valkey), not the raw baseline.
func isPeer(lib string) bool { return !strings.HasPrefix(lib, "dlock") && lib != "raw" }

// peerRows are scen's peer variants (not dlock, not the raw baseline) whose
// mutual exclusion held.
func peerRows(rs []result, scen string) []result {
	var out []result
	for _, r := range rs {
		if r.Scenario == scen && isPeer(r.Library) && r.MutexOK != nil && *r.MutexOK {
			out = append(out, r)
		}
	}
	return out
}

// bestBy is the row with the highest CS/s among those keep accepts.
func bestBy(rs []result, keep func(result) bool) *result {
	var best *result
	for i := range rs {
		if rs[i].OpsPerS == nil || !keep(rs[i]) {
			continue
		}
		if best == nil || *rs[i].OpsPerS > *best.OpsPerS {
			best = &rs[i]
		}
	}
	return best
}

func fairEnough(r result) bool {
	return r.MaxWaitus != nil && r.MeanWaitus != nil && *r.MeanWaitus > 0 && *r.MaxWaitus / *r.MeanWaitus <= 10 &&
		r.ShareMin != nil && *r.ShareMin >= 0.5
}
