package main

import (
	"fmt"
	"html"
	"strings"
)

// chart draws two panels: uncontended p50 latency per library (bars), and
// contended per-contender share min–max per library (range bars around 1.0).
func chart(o output) string {
	unc, _ := pick(o.Results, "uncontended")
	con, _ := pick(o.Results, "contended")
	const W, rowH, left = 900, 24, 210
	h1 := 60 + len(unc)*rowH
	h2 := 60 + len(con)*rowH
	H := h1 + h2 + 40
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="13">`+"\n", W, H)
	w(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	colors := map[string]string{"dlock": "#1f77b4", "raw": "#7f7f7f", "redsync": "#ff7f0e", "redislock": "#2ca02c", "rueidislock": "#9467bd"}

	// panel 1
	maxV := 1.0
	for _, r := range unc {
		if r.P50us != nil && *r.P50us > maxV {
			maxV = *r.P50us
		}
	}
	scale := float64(W-left-120) / maxV
	w(`<text x="10" y="24" font-size="16" font-weight="bold">Uncontended acquire+release, p50 latency (µs, lower is better)</text>` + "\n")
	if p, ok := o.Machine["ping_p50_us"].(float64); ok && p > 0 {
		for k := 1; float64(k)*p <= maxV*1.05; k++ {
			x := left + int(float64(k)*p*scale)
			w(`<line x1="%d" y1="36" x2="%d" y2="%d" stroke="#ddd"/><text x="%d" y="48" fill="#888" font-size="11">%d RTT</text>`+"\n", x, x, h1-10, x+2, k)
		}
	}
	for i, r := range unc {
		y := 55 + i*rowH
		w(`<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+15, html.EscapeString(r.Library+" "+r.Variant))
		if r.P50us == nil {
			continue
		}
		bw := int(*r.P50us * scale)
		w(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", left, y+2, bw, rowH-6, colors[r.Library])
		w(`<text x="%d" y="%d">%.0f µs</text>`+"\n", left+bw+6, y+15, *r.P50us)
	}

	// panel 2
	top := h1 + 20
	w(`<text x="10" y="%d" font-size="16" font-weight="bold">Contended (16 on one key): per-contender share of critical sections, min–max (1.0 = fair)</text>`+"\n", top+4)
	maxS := 2.0
	for _, r := range con {
		if r.ShareMax != nil && *r.ShareMax > maxS {
			maxS = *r.ShareMax
		}
	}
	sc := float64(W-left-140) / maxS
	for _, t := range []float64{0, 0.5, 1, 1.5, 2, 4, 8, 16} {
		if t > maxS {
			break
		}
		x := left + int(t*sc)
		stroke := "#ddd"
		if t == 1 {
			stroke = "#555"
		}
		w(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/><text x="%d" y="%d" fill="#888" font-size="11">%g</text>`+"\n", x, top+16, x, top+h2-20, stroke, x+2, top+28, t)
	}
	for i, r := range con {
		y := top + 35 + i*rowH
		w(`<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+15, html.EscapeString(r.Library+" "+r.Variant))
		if r.MutexOK == nil || !*r.MutexOK {
			w(`<text x="%d" y="%d" fill="red">MUTUAL EXCLUSION BROKEN</text>`+"\n", left, y+15)
			continue
		}
		if r.ShareMin == nil {
			continue
		}
		x0, x1 := left+int(*r.ShareMin*sc), left+int(*r.ShareMax*sc)
		w(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", x0, y+4, max(x1-x0, 2), rowH-10, colors[r.Library])
		w(`<text x="%d" y="%d">%.2f–%.2f</text>`+"\n", x1+6, y+15, *r.ShareMin, *r.ShareMax)
	}
	w("</svg>\n")
	return b.String()
}
