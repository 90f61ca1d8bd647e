package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Layout of the chart: one label column on the left, the plot area, and a
// column on the right for the value labels, so that no label runs into a bar
// or off the picture.
const (
	svgW      = 980
	svgLeft   = 190 // plot area starts here; row labels end just left of it
	svgRight  = 230 // room right of the plot area for value labels
	svgRowH   = 24
	svgTitleH = 50 // panel title + subtitle
	svgAxisH  = 22 // tick labels under the rows
	svgGap    = 26 // between panels
	plotW     = svgW - svgLeft - svgRight
)

var libColors = map[string]string{"dlock": "#1f77b4", "raw": "#7f7f7f", "redsync": "#ff7f0e", "redislock": "#2ca02c", "rueidislock": "#9467bd"}

// niceStep is a 1, 2 or 5 × 10^k step giving about n ticks up to hi.
func niceStep(hi float64, n int) float64 {
	if hi <= 0 {
		return 1
	}
	raw := hi / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

type svgPanel struct {
	b    *strings.Builder
	top  int // y of the panel title baseline
	rows []result
	hi   float64 // value at the right end of the plot area
}

func (p *svgPanel) w(format string, a ...any) { fmt.Fprintf(p.b, format, a...) }

func (p *svgPanel) x(v float64) float64 { return svgLeft + v/p.hi*plotW }

func (p *svgPanel) rowY(i int) int { return p.top + svgTitleH - 14 + i*svgRowH }

func (p *svgPanel) bottom() int { return p.rowY(len(p.rows)) }

func (p *svgPanel) height() int { return svgTitleH - 14 + len(p.rows)*svgRowH + svgAxisH }

func (p *svgPanel) title(t, sub string) {
	p.w(`<text x="12" y="%d" font-size="16" font-weight="bold">%s</text>`+"\n", p.top, html.EscapeString(t))
	p.w(`<text x="12" y="%d" font-size="12" fill="#555">%s</text>`+"\n", p.top+18, html.EscapeString(sub))
}

// grid draws a vertical line at v from the first row to the axis, with a
// label under the rows.
func (p *svgPanel) grid(v float64, label, stroke string, dash bool) {
	x := p.x(v)
	d := ""
	if dash {
		d = ` stroke-dasharray="4 3"`
	}
	p.w(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"%s/>`+"\n", x, p.rowY(0), x, p.bottom()+2, stroke, d)
	p.w(`<text x="%.1f" y="%d" font-size="11" fill="#666" text-anchor="middle">%s</text>`+"\n", x, p.bottom()+15, html.EscapeString(label))
}

func (p *svgPanel) label(i int, r result) {
	weight := ""
	if r.Library == "dlock" {
		weight = ` font-weight="bold"`
	}
	p.w(`<text x="%d" y="%d" text-anchor="end"%s>%s</text>`+"\n", svgLeft-10, p.rowY(i)+16, weight, html.EscapeString(r.Library+" "+r.Variant))
}

func (p *svgPanel) value(i int, x float64, s string) {
	p.w(`<text x="%.1f" y="%d" font-size="12">%s</text>`+"\n", x+6, p.rowY(i)+16, html.EscapeString(s))
}

// bar draws a bar from 0 to v with a whisker over lo–hi (if given).
func (p *svgPanel) bar(i int, r result, v float64, lo, hi *float64) float64 {
	y := p.rowY(i)
	x1 := p.x(v)
	p.w(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", svgLeft, y+4, max(x1-svgLeft, 1), svgRowH-8, libColors[r.Library])
	end := x1
	if lo != nil && hi != nil {
		a, b := p.x(*lo), p.x(*hi)
		m := float64(y) + svgRowH/2
		p.w(`<path d="M%.1f %.1fH%.1fM%.1f %.1fV%.1fM%.1f %.1fV%.1f" stroke="#222" stroke-width="1.2" fill="none"/>`+"\n",
			a, m, b, a, m-5, m+5, b, m-5, m+5)
		end = max(end, b)
	}
	return end
}

// broken writes the notice for a variant whose mutual exclusion broke, on a
// white ground over the gridlines, and reports whether it did.
func (p *svgPanel) broken(i int, r result) bool {
	if r.MutexOK != nil && !*r.MutexOK {
		p.w(`<rect x="%d" y="%d" width="%d" height="%d" fill="white"/>`+"\n", svgLeft+1, p.rowY(i)+2, plotW, svgRowH-4)
		p.w(`<text x="%d" y="%d" fill="#c00" font-weight="bold">MUTUAL EXCLUSION BROKEN (figures withheld)</text>`+"\n", svgLeft+4, p.rowY(i)+16)
		return true
	}
	return false
}

// chart draws three panels, one row per library variant: uncontended p50
// latency (median and min–max over slices, RTT gridlines), contended
// per-contender share min–max around 1.0, and contended critical sections per
// second (median and min–max over rounds) with max/mean wait.
func chart(o output) string {
	unc, _ := pick(o.Results, "uncontended")
	par, _ := pick(o.Results, "parallel")
	con, _ := pick(o.Results, "contended")
	var b strings.Builder
	p1 := &svgPanel{b: &b, top: 26, rows: unc}
	pp := &svgPanel{b: &b, top: p1.top + p1.height() + svgGap, rows: par}
	p2 := &svgPanel{b: &b, top: pp.top + pp.height() + svgGap, rows: con}
	p3 := &svgPanel{b: &b, top: p2.top + p2.height() + svgGap, rows: con}
	H := p3.top + p3.height() + 14
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Verdana, sans-serif" font-size="13">`+"\n", svgW, H, svgW, H)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")

	// 1: uncontended p50
	ping := rttOf(o)
	for _, r := range unc {
		if r.P50usMax != nil {
			p1.hi = max(p1.hi, *r.P50usMax)
		} else if r.P50us != nil {
			p1.hi = max(p1.hi, *r.P50us)
		}
	}
	p1.hi = max(p1.hi*1.05, 1)
	p1.title("Uncontended acquire + release: p50 latency, µs (lower is better)",
		fmt.Sprintf("bar: median over %d slices; whisker: min–max; gridlines: multiples of 1 RTT = raw's p50 / 2 = %.0f µs", samples(unc), ping))
	p1.grid(0, "0", "#e4e4e4", false)
	if ping > 0 {
		step := 1
		for p1.hi/(float64(step)*ping) > 10 {
			step++
		}
		for k := step; float64(k)*ping <= p1.hi; k += step {
			p1.grid(float64(k)*ping, fmt.Sprintf("%d RTT", k), "#ddd", false)
		}
	}
	for i, r := range unc {
		p1.label(i, r)
		if r.P50us == nil {
			continue
		}
		end := p1.bar(i, r, *r.P50us, r.P50usMin, r.P50usMax)
		s := fmt.Sprintf("%.0f µs", *r.P50us)
		if r.P50VsRaw != nil && r.Library != "raw" {
			s += fmt.Sprintf("  (%.2f× raw)", *r.P50VsRaw)
		}
		p1.value(i, end, s)
	}

	// 1b: parallel ops/s
	for _, r := range par {
		if r.OpsPerSMax != nil {
			pp.hi = max(pp.hi, *r.OpsPerSMax)
		} else if r.OpsPerS != nil {
			pp.hi = max(pp.hi, *r.OpsPerS)
		}
	}
	pstep := niceStep(max(pp.hi, 1), 6)
	pp.hi = math.Ceil(max(pp.hi, 1)/pstep) * pstep
	pp.title("Parallel, 64 goroutines on their own keys: acquire + release per second (higher is better)",
		fmt.Sprintf("bar: median over %d slices; whisker: min–max; one client per library", samples(par)))
	for t := 0.0; t <= pp.hi+1e-9; t += pstep {
		pp.grid(t, rateN(t, "%gk"), "#e4e4e4", false)
	}
	for i, r := range par {
		pp.label(i, r)
		if r.OpsPerS == nil {
			continue
		}
		end := pp.bar(i, r, *r.OpsPerS, r.OpsPerSMin, r.OpsPerSMax)
		s := rate(r.OpsPerS) + " ops/s"
		if r.OpsVsRaw != nil && r.Library != "raw" {
			s += fmt.Sprintf("  (%.2f× raw)", *r.OpsVsRaw)
		}
		pp.value(i, end, s)
	}

	// 2: contended share. The axis stops at shareCap so that the region
	// around 1.0 stays readable; a range reaching past it ends in an arrow.
	const shareCap = 3.0
	p2.hi = 2
	for _, r := range con {
		if r.ShareMax != nil {
			p2.hi = max(p2.hi, min(*r.ShareMax, shareCap))
		}
	}
	step := 0.5
	p2.hi = math.Ceil(p2.hi/step) * step
	p2.title("Contended, 16 contenders on one key: share of critical sections per contender, min–max",
		fmt.Sprintf("1.0 = a contender's fair share; dashed: 0.5; extremes over the rounds; an arrow: the range goes past %g", shareCap))
	for t := 0.0; t <= p2.hi+1e-9; t += step {
		p2.grid(t, fmt.Sprintf("%g", t), "#e4e4e4", false)
	}
	for i, r := range con {
		p2.label(i, r)
		if (r.MutexOK != nil && !*r.MutexOK) || r.ShareMin == nil || r.ShareMax == nil {
			continue
		}
		y := p2.rowY(i)
		x0, x1 := p2.x(min(*r.ShareMin, p2.hi)), p2.x(min(*r.ShareMax, p2.hi))
		p2.w(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" opacity="0.85"/>`+"\n", x0, y+5, max(x1-x0, 2), svgRowH-10, libColors[r.Library])
		if *r.ShareMax > p2.hi {
			p2.w(`<path d="M%.1f %dL%.1f %dL%.1f %dZ" fill="%s"/>`+"\n", x1, y+2, x1+10, y+svgRowH/2, x1, y+svgRowH-2, libColors[r.Library])
			x1 += 10
		}
		p2.value(i, x1, fmt.Sprintf("%.2f–%.2f", *r.ShareMin, *r.ShareMax))
	}
	p2.grid(0.5, "", "#777", true) // over the bars
	p2.grid(1, "", "#222", false)
	for i, r := range con {
		p2.broken(i, r)
	}

	// 3: contended CS/s
	for _, r := range con {
		if r.OpsPerSMax != nil {
			p3.hi = max(p3.hi, *r.OpsPerSMax)
		} else if r.OpsPerS != nil {
			p3.hi = max(p3.hi, *r.OpsPerS)
		}
	}
	step = niceStep(max(p3.hi, 1), 6)
	p3.hi = math.Ceil(max(p3.hi, 1)/step) * step
	p3.title("Contended: critical sections per second (higher is better), and max wait / mean wait",
		fmt.Sprintf("bar: median over %s; whisker: min–max; max/mean = max wait ÷ mean wait over all rounds", plural(samples(con), "round")))
	for t := 0.0; t <= p3.hi+1e-9; t += step {
		p3.grid(t, rateN(t, "%gk"), "#e4e4e4", false)
	}
	for i, r := range con {
		p3.label(i, r)
		if p3.broken(i, r) || r.OpsPerS == nil {
			continue
		}
		end := p3.bar(i, r, *r.OpsPerS, r.OpsPerSMin, r.OpsPerSMax)
		p3.value(i, end, fmt.Sprintf("%s CS/s · max/mean %s", rate(r.OpsPerS), maxMean(r)))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
