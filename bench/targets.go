package main

import (
	"fmt"
	"strings"
)

// targets renders the "Targets" section: every line compares one of dlock's
// figures from this run with its bound, itself taken from this run.
func targets(o output, scales []scaleResult) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("## Targets\n\n")
	w("Decided from this run's figures (medians; spreads in brackets). Peers: the redsync, redislock and rueidislock variants.\n\n")
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

	// uncontended
	d, raw := find(o.Results, "uncontended", "dlock"), find(o.Results, "uncontended", "raw")
	rl := find(o.Results, "uncontended", "redislock")
	if d != nil && raw != nil && d.P50VsRaw != nil {
		line("uncontended p50 ≤ 1.10× raw's p50",
			fmt.Sprintf("p50 %s µs", numSpread(d.P50us, d.P50usMin, d.P50usMax, "%.0f")),
			fmt.Sprintf("raw p50 %s µs; dlock/raw %.2f× (median of %d slices, operations alternating with raw's)", numSpread(raw.P50us, raw.P50usMin, raw.P50usMax, "%.0f"), *d.P50VsRaw, d.Samples),
			verdict(*d.P50VsRaw <= 1.10))
	} else {
		line("uncontended p50 ≤ 1.10× raw's p50", none, none, none)
	}
	atMost := func(t, unit string, get func(*result) *float64) {
		if d == nil || rl == nil || get(d) == nil || get(rl) == nil {
			line(t, none, none, none)
			return
		}
		line(t, fmt.Sprintf("%.1f %s", *get(d), unit), fmt.Sprintf("redislock %.1f %s", *get(rl), unit), verdict(*get(d) <= *get(rl)))
	}
	atMost("uncontended: Redis CPU per op ≤ redislock's", "µs", func(r *result) *float64 { return r.RedisCPUusPerOp })
	atMost("uncontended: allocations per op ≤ redislock's", "allocs", func(r *result) *float64 { return r.AllocsPerOp })
	atMost("uncontended: bytes per op ≤ redislock's", "B", func(r *result) *float64 { return r.BytesPerOp })

	// parallel: the default Client, and the best setting
	raw = find(o.Results, "parallel", "raw")
	var best *result
	for _, v := range []string{"default", "aggressive"} {
		d := findVariant(o.Results, "parallel", "dlock", v)
		if d != nil && d.OpsVsRaw != nil && (best == nil || *d.OpsVsRaw > *best.OpsVsRaw) {
			best = d
		}
	}
	for _, c := range []struct {
		t string
		r *result
		k float64
	}{
		{"parallel ops/s ≥ 1.0× raw (dlock default)", findVariant(o.Results, "parallel", "dlock", "default"), 1},
		{"parallel ops/s ≥ 1.5× raw (dlock's best setting)", best, 1.5},
	} {
		if c.r == nil || raw == nil || c.r.OpsVsRaw == nil {
			line(c.t, none, none, none)
			continue
		}
		line(c.t, fmt.Sprintf("%s: %s", c.r.Variant, rateSpread(c.r.OpsPerS, c.r.OpsPerSMin, c.r.OpsPerSMax)),
			fmt.Sprintf("raw %s; dlock/raw %.2f× (median of %d per-slice ratios)", rateSpread(raw.OpsPerS, raw.OpsPerSMin, raw.OpsPerSMax), *c.r.OpsVsRaw, c.r.Samples),
			verdict(*c.r.OpsVsRaw >= c.k))
	}

	// contended
	for _, scen := range []string{"contended", "contended-think"} {
		d := find(o.Results, scen, "dlock")
		ok := d != nil && d.MutexOK != nil && *d.MutexOK && d.OpsPerS != nil
		peers := peerRows(o.Results, scen)
		if !ok {
			line(scen+": dlock figures", none, "", "dlock's mutual exclusion broke or nothing completed")
			continue
		}
		if scen == "contended" {
			if rtt > 0 && d.GapP50us != nil {
				line("contended: hand-off gap p50 ≤ 1.5 RTT",
					fmt.Sprintf("gap p50 %s µs", numSpread(d.GapP50us, d.GapP50usMin, d.GapP50usMax, "%.0f")),
					fmt.Sprintf("1.5 RTT = %.0f µs (RTT: raw's uncontended p50 / 2); gap = %.1f RTT", 1.5*rtt, *d.GapP50us/rtt),
					verdict(*d.GapP50us <= 1.5*rtt))
			} else {
				line("contended: hand-off gap p50 ≤ 1.5 RTT", none, none, none)
			}
			if d.MaxWaitus != nil && d.MeanWaitus != nil && *d.MeanWaitus > 0 {
				mm := *d.MaxWaitus / *d.MeanWaitus
				line("contended: max wait ≤ 10× mean wait",
					fmt.Sprintf("max %.0f µs / mean %.0f µs = %.1f×", *d.MaxWaitus, *d.MeanWaitus, mm), "10×", verdict(mm <= 10))
			}
			if d.ShareMin != nil {
				line("contended: share min ≥ 0.5", fmt.Sprintf("%.2f (lowest over rounds)", *d.ShareMin), "0.5", verdict(*d.ShareMin >= 0.5))
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
				line("contended: ≤ 2 client requests per CS on the path that gates the next holder",
					fmt.Sprintf("%.2f (%.2f in all; off that path: %.2f extends, %.2f registrations that found it held)", gating, *d.RequestsPerOp, ext, held), "2", verdict(gating <= 2))
			} else {
				line("contended: ≤ 2 client requests per CS on the path that gates the next holder", "not counted", "2", none)
			}
		}
		mine := rateSpread(d.OpsPerS, d.OpsPerSMin, d.OpsPerSMax)
		if best := bestBy(peers, func(r result) bool { return r.OpsPerS != nil }); best != nil {
			line(scen+": CS/s ≥ every peer variant (the starving ones too)", mine,
				fmt.Sprintf("best: %s/%s %s", best.Library, best.Variant, rateSpread(best.OpsPerS, best.OpsPerSMin, best.OpsPerSMax)),
				verdict(*d.OpsPerS >= *best.OpsPerS))
		} else {
			line(scen+": CS/s ≥ every peer variant", mine, "no peer variant measured", none)
		}
	}

	// MultiLock over overlapping sets
	if m := find(o.Results, "multilock", "dlock"); m == nil || m.MutexOK == nil || !*m.MutexOK || m.MeanWaitus == nil || *m.MeanWaitus == 0 {
		line("MultiLock: overlapping sets, worst wait ≤ 10× mean", none, "", "mutual exclusion broke or nothing completed")
	} else {
		mm := *m.MaxWaitus / *m.MeanWaitus
		line("MultiLock: overlapping sets (8 clients, 2 of 4 names), worst wait ≤ 10× mean",
			fmt.Sprintf("max %.0f µs / mean %.0f µs = %.1f×", *m.MaxWaitus, *m.MeanWaitus, mm), "10×", verdict(mm <= 10))
	}

	// long queues
	if len(o.Queues) == 0 {
		line("long queues: attempt + release with 10,000 waiters within 2× of 10", none, "", none)
	} else {
		worst, ok := o.Queues[0], true
		for _, q := range o.Queues {
			if q.CmdsLong/max(q.CmdsShort, 1) > worst.CmdsLong/max(worst.CmdsShort, 1) {
				worst = q
			}
			ok = ok && q.SameResult
		}
		ratio := worst.CmdsLong / max(worst.CmdsShort, 1)
		line(fmt.Sprintf("long queues: attempt + release with %d waiters within 2× of %d (Redis commands)", worst.Long, worst.Short),
			fmt.Sprintf("worst: %s %.2f× (%.0f vs %.0f commands)", worst.Kind, ratio, worst.CmdsLong, worst.CmdsShort), "2×", verdict(ok && ratio <= 2))
	}

	// scale
	var sd *scaleResult
	for i := range scales {
		if scales[i].lib == "dlock" {
			sd = &scales[i]
		}
	}
	if sd == nil {
		line("scale: goroutines added ≤ 10", none, "", none)
		line("scale: ≤ 1 round trip per 100 locks per renewal period", none, "", none)
	} else {
		line("scale: goroutines added ≤ 10 (not one per lock)", fmt.Sprintf("%d for %d locks", sd.goroutinesAdded, sd.locks), "10",
			verdict(sd.goroutinesAdded <= 10))
		if sd.rtPerPeriod >= 0 {
			per100 := sd.rtPerPeriod * 100 / float64(sd.locks)
			line("scale: ≤ 1 round trip per 100 locks per renewal period", fmt.Sprintf("%.3f (%.1f round trips / period)", per100, sd.rtPerPeriod), "1",
				verdict(per100 <= 1))
		} else {
			line("scale: ≤ 1 round trip per 100 locks per renewal period", "not counted", "1", none)
		}
	}
	// keys
	const keysTarget = "No key per operation: DBSIZE peak ≤ k × names; no expire-cycle or command latency event over 5 ms"
	if kr := keysRunOf(o, "dlock"); kr == nil || kr.Ops == 0 || kr.DBSizeN == 0 || !kr.LatencyOK {
		line(keysTarget, none, "", none)
	} else {
		line(keysTarget,
			fmt.Sprintf("DBSIZE peak %s (%s at the end) after %s ops over %s names in %.0f s; expire-cycle max %s ms, command max %s ms",
				thousands(kr.DBSizePeak), thousands(kr.DBSizeEnd), thousands(kr.Ops), thousands(int64(o.Keys.Names)), o.Keys.LoadS,
				latencyMs(*kr, kr.ExpireCycleMaxMs), latencyMs(*kr, kr.CommandMaxMs)),
			fmt.Sprintf("k × names = %d × %s = %s keys; %d ms", o.Keys.KeysPerName, thousands(int64(o.Keys.Names)), thousands(o.Keys.Bound), keysEventMs),
			verdict(kr.DBSizePeak <= o.Keys.Bound && kr.ExpireCycleMaxMs <= keysEventMs && kr.CommandMaxMs <= keysEventMs))
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

// peerRows are scen's peer variants (not dlock, not the raw baseline) whose
// mutual exclusion held.
func peerRows(rs []result, scen string) []result {
	var out []result
	for _, r := range rs {
		if r.Scenario == scen && r.Library != "dlock" && r.Library != "raw" && r.MutexOK != nil && *r.MutexOK {
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
