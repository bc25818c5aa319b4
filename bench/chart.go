package bench

import (
	"fmt"
	"io"
	"math"
	"sort"
)

// WriteChartSVG draws bus bandwidth against message size (log scale) for
// one collective: a line per world size and variant.
func WriteChartSVG(w io.Writer, results []Result, op string) error {
	type key struct {
		np      int
		variant string
	}
	lines := map[key][]Result{}
	var keys []key
	minB, maxB, maxBW := int64(math.MaxInt64), int64(1), 0.0
	for _, r := range results {
		if r.Op != op {
			continue
		}
		k := key{r.NP, r.Variant}
		if lines[k] == nil {
			keys = append(keys, k)
		}
		lines[k] = append(lines[k], r)
		minB, maxB, maxBW = min(minB, r.Bytes), max(maxB, r.Bytes), max(maxBW, r.BusBW)
	}
	if len(keys) == 0 {
		return fmt.Errorf("chart: no %s results", op)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].variant != keys[j].variant {
			return keys[i].variant < keys[j].variant
		}
		return keys[i].np < keys[j].np
	})
	const left, top, width, height = 70, 40, 640, 320
	lx0, lx1 := math.Log2(float64(minB)), math.Log2(float64(max(maxB, minB*2)))
	maxBW = max(maxBW*1.1, 1e-3)
	x := func(b int64) float64 { return left + width*(math.Log2(float64(b))-lx0)/(lx1-lx0) }
	y := func(bw float64) float64 { return top + height*(1-bw/maxBW) }
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", left+width+170, top+height+50)
	fmt.Fprintf(w, `<text x="%d" y="20" font-size="14">%s: bus bandwidth (GB/s) by message size</text>`+"\n", left, op)
	fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", left, top, width, height)
	for b := minB; b <= maxB; b *= 4 {
		fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(b), top+height+16, humanBytes(b))
	}
	for i := 0; i <= 4; i++ {
		bw := maxBW * float64(i) / 4
		fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="end">%.2f</text>`+"\n", left-6, y(bw)+4, bw)
	}
	for i, k := range keys {
		c := colors[i%len(colors)]
		pts := ""
		rs := lines[k]
		sort.Slice(rs, func(a, b int) bool { return rs[a].Bytes < rs[b].Bytes })
		for _, r := range rs {
			pts += fmt.Sprintf("%.1f,%.1f ", x(r.Bytes), y(r.BusBW))
		}
		fmt.Fprintf(w, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", pts, c)
		fmt.Fprintf(w, `<text x="%d" y="%d" fill="%s">np=%d %s</text>`+"\n", left+width+10, top+14+16*i, c, k.np, k.variant)
	}
	_, err := fmt.Fprintln(w, "</svg>")
	return err
}
