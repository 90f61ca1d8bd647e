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
	ping, _ := o.Machine["ping_p50_us"].(float64)

	// uncontended
	d, raw := find(o.Results, "uncontended", "dlock"), find(o.Results, "uncontended", "raw")
	if d != nil && raw != nil && d.P50VsRaw != nil {
		line("uncontended p50 ≤ 1.05× raw's p50",
			fmt.Sprintf("p50 %s µs", numSpread(d.P50us, d.P50usMin, d.P50usMax, "%.0f")),
			fmt.Sprintf("raw p50 %s µs; dlock/raw %.2f× (median of %d per-slice ratios)", numSpread(raw.P50us, raw.P50usMin, raw.P50usMax, "%.0f"), *d.P50VsRaw, d.Samples),
			verdict(*d.P50VsRaw <= 1.05))
	} else {
		line("uncontended p50 ≤ 1.05× raw's p50", none, none, none)
	}

	// parallel: the default Client, and the one with WithAutoPipeline
	raw = find(o.Results, "parallel", "raw")
	for _, v := range []string{"default", "aggressive"} {
		d := findVariant(o.Results, "parallel", "dlock", v)
		for _, k := range []float64{1, 1.3} {
			t := fmt.Sprintf("parallel ops/s ≥ %g× raw (dlock %s)", k, v)
			if d == nil || raw == nil || d.OpsVsRaw == nil {
				line(t, none, none, none)
				continue
			}
			line(t, rateSpread(d.OpsPerS, d.OpsPerSMin, d.OpsPerSMax),
				fmt.Sprintf("raw %s; dlock/raw %.2f× (median of %d per-slice ratios)", rateSpread(raw.OpsPerS, raw.OpsPerSMin, raw.OpsPerSMax), *d.OpsVsRaw, d.Samples),
				verdict(*d.OpsVsRaw >= k))
		}
	}

	// contended
	for _, scen := range []string{"contended", "contended-think"} {
		d := find(o.Results, scen, "dlock")
		ok := d != nil && d.MutexOK != nil && *d.MutexOK && d.OpsPerS != nil
		peers := peerRows(o.Results, scen)
		if scen == "contended" {
			if !ok {
				line(scen+": dlock figures", none, "", "dlock's mutual exclusion broke or nothing completed")
				continue
			}
			if ping > 0 && d.GapP50us != nil {
				line("contended: hand-off gap p50 ≤ 2 RTT",
					fmt.Sprintf("gap p50 %s µs", numSpread(d.GapP50us, d.GapP50usMin, d.GapP50usMax, "%.0f")),
					fmt.Sprintf("2 RTT = %.0f µs (PING p50 %.0f µs); gap = %.1f RTT", 2*ping, ping, *d.GapP50us/ping),
					verdict(*d.GapP50us <= 2*ping))
			}
			if d.MaxWaitus != nil && d.MeanWaitus != nil && *d.MeanWaitus > 0 {
				mm := *d.MaxWaitus / *d.MeanWaitus
				line("contended: max wait ≤ 10× mean wait",
					fmt.Sprintf("max %.0f µs / mean %.0f µs = %.1f×", *d.MaxWaitus, *d.MeanWaitus, mm), "10×", verdict(mm <= 10))
			}
			if d.ShareMin != nil {
				line("contended: share min ≥ 0.5", fmt.Sprintf("%.2f (lowest over rounds)", *d.ShareMin), "0.5", verdict(*d.ShareMin >= 0.5))
			}
		} else if !ok {
			line(scen+": dlock figures", none, "", "dlock's mutual exclusion broke or nothing completed")
			continue
		}
		mine := rateSpread(d.OpsPerS, d.OpsPerSMin, d.OpsPerSMax)
		if best := bestBy(peers, func(r result) bool { return r.OpsPerS != nil }); best != nil {
			line(scen+": CS/s ≥ best peer variant", mine,
				fmt.Sprintf("%s/%s %s", best.Library, best.Variant, rateSpread(best.OpsPerS, best.OpsPerSMin, best.OpsPerSMax)),
				verdict(*d.OpsPerS >= *best.OpsPerS))
		} else {
			line(scen+": CS/s ≥ best peer variant", mine, "no peer variant measured", none)
		}
		if best := bestBy(peers, fairEnough); best != nil {
			line(scen+": CS/s ≥ best peer variant with max/mean ≤ 10× and share min ≥ 0.5", mine,
				fmt.Sprintf("%s/%s %s (max/mean %s, share min %.2f)", best.Library, best.Variant,
					rateSpread(best.OpsPerS, best.OpsPerSMin, best.OpsPerSMax), maxMean(*best), *best.ShareMin),
				verdict(*d.OpsPerS >= *best.OpsPerS))
		} else {
			line(scen+": CS/s ≥ best peer variant with max/mean ≤ 10× and share min ≥ 0.5", mine,
				"no peer variant meets both", "–")
		}
		if scen != "contended" {
			continue
		}
		fewer := func(t string, get func(result) *float64) {
			mp := get(*d)
			if mp == nil {
				line(t, "not counted", "", none)
				return
			}
			var lowest *result
			var uncounted []string
			for i := range peers {
				p := get(peers[i])
				if p == nil {
					uncounted = append(uncounted, peers[i].Library+"/"+peers[i].Variant)
					continue
				}
				if lowest == nil || *p < *get(*lowest) {
					lowest = &peers[i]
				}
			}
			switch {
			case lowest == nil:
				line(t, fmt.Sprintf("%.2f", *mp), "no peer variant counted", none)
			case len(uncounted) > 0:
				line(t, fmt.Sprintf("%.2f", *mp), fmt.Sprintf("lowest counted: %s/%s %.2f; %s not counted",
					lowest.Library, lowest.Variant, *get(*lowest), strings.Join(uncounted, ", ")), "undecided")
			default:
				line(t, fmt.Sprintf("%.2f", *mp), fmt.Sprintf("lowest: %s/%s %.2f", lowest.Library, lowest.Variant, *get(*lowest)),
					verdict(*mp < *get(*lowest)))
			}
		}
		fewer("contended: client requests per CS fewer than every peer variant",
			func(r result) *float64 { return r.RequestsPerOp })
		fewer("contended: Redis commands per CS (incl. in scripts) fewer than every peer variant",
			func(r result) *float64 { return r.RedisCommandsPerOp })
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
	w("\n")
	return b.String()
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
