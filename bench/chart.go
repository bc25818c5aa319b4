package bench

import (
	"cmp"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
)

// Series is one contestant's times for one collective at one world size:
// one line on the charts.
type Series struct {
	Contestant string // "gorun", "gorun ring" (a variant), "gloo", "mpi-tcp", "mpi-shm"
	Op         string
	NP         int
	Points     []Point // by size
}

// Point is one measured size of a Series.
type Point struct {
	Bytes  int64
	TimeUS float64
}

// busBW is the point's bus bandwidth in GB/s, as the tables count it.
func (p Point) busBW(op string, np int) float64 {
	return float64(p.Bytes) / (p.TimeUS * 1e3) * BusFactor(op, np)
}

// ChartSeries gathers gorun's results (one contestant per variant) and the
// competitors' times into the charts' lines: gorun's first, each in the
// order first met, points by size.
func ChartSeries(ours []Result, theirs []Competitor) []Series {
	type key struct {
		contestant, op string
		np             int
	}
	var out []Series
	at := map[key]int{}
	add := func(k key, p Point) {
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, Series{Contestant: k.contestant, Op: k.op, NP: k.np})
		}
		out[i].Points = append(out[i].Points, p)
	}
	for _, r := range ours {
		name := "gorun"
		if r.Variant != "" && r.Variant != "default" {
			name += " " + r.Variant
		}
		add(key{name, r.Op, r.NP}, Point{r.Bytes, r.TimeUS})
	}
	for _, c := range theirs {
		add(key{c.Name, c.Op, c.NP}, Point{c.Bytes, c.TimeUS})
	}
	for i := range out {
		slices.SortFunc(out[i].Points, func(a, b Point) int { return cmp.Compare(a.Bytes, b.Bytes) })
	}
	// Each contestant's lines together, by world size.
	first := map[string]int{}
	for i, s := range out {
		if _, ok := first[s.Contestant]; !ok {
			first[s.Contestant] = i
		}
	}
	slices.SortStableFunc(out, func(a, b Series) int {
		return cmp.Or(cmp.Compare(first[a.Contestant], first[b.Contestant]), cmp.Compare(a.NP, b.NP))
	})
	return out
}

// WriteChart draws the series as WriteChartSVG does, as SVG or, for a
// path ending in .png, as PNG.
func WriteChart(w io.Writer, path string, series []Series) error {
	if err := ChartFormatOK(path); err != nil {
		return err
	}
	if strings.EqualFold(filepath.Ext(path), ".png") {
		return WriteChartPNG(w, series)
	}
	return WriteChartSVG(w, series)
}

// ChartFormatOK reports, before anything is measured, whether WriteChart
// can write path's format (.svg or .png).
func ChartFormatOK(path string) error {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".svg", ".png":
		return nil
	default:
		return fmt.Errorf("chart %s: unknown format %q (want .svg or .png)", path, ext)
	}
}

// WriteChartSVG draws, for every collective in the series (in Ops'
// order), bus bandwidth against message size (sizes on a log scale) and
// latency against size (log-log) side by side, a line per contestant and
// world size: a colour per contestant, a dash pattern per world size, and
// a legend.
func WriteChartSVG(w io.Writer, series []Series) error {
	l, err := newChartLayout(series)
	if err != nil {
		return err
	}
	cv := newSVGCanvas(l.width, l.height)
	l.draw(cv)
	_, err = io.WriteString(w, cv.String())
	return err
}

// WriteChartPNG draws what WriteChartSVG draws as a PNG image, at twice
// the SVG's size, with a bitmap font.
func WriteChartPNG(w io.Writer, series []Series) error {
	l, err := newChartLayout(series)
	if err != nil {
		return err
	}
	cv := newRasterCanvas(l.width, l.height, 2)
	l.draw(cv)
	return cv.encode(w)
}

// canvas is what the charts are drawn on (SVG or raster). Coordinates are
// the SVG's pixels; text is placed by its baseline.
type canvas interface {
	polyline(xs, ys []float64, c color.RGBA, width float64, dash []float64)
	rect(x, y, w, h float64, c color.RGBA)
	dot(x, y float64, c color.RGBA)
	text(x, y float64, s string, c color.RGBA, anchor textAnchor)
}

type textAnchor int

const (
	anchorStart textAnchor = iota
	anchorMiddle
	anchorEnd
)

const (
	chartLeft   = 70  // left margin of each panel, for the y labels
	chartTop    = 40  // above a panel, for its title
	chartBottom = 40  // below a panel, for the x labels
	panelW      = 440 // a panel's plot area
	panelH      = 260
	legendW     = 190
)

var (
	chartPalette = []color.RGBA{
		{0x1f, 0x77, 0xb4, 255}, {0xff, 0x7f, 0x0e, 255}, {0x2c, 0xa0, 0x2c, 255}, {0xd6, 0x27, 0x28, 255},
		{0x94, 0x67, 0xbd, 255}, {0x8c, 0x56, 0x4b, 255}, {0xe3, 0x77, 0xc2, 255}, {0x17, 0xbe, 0xcf, 255},
	}
	chartDashes = [][]float64{nil, {8, 4}, {2, 3}, {8, 3, 2, 3}}
	chartInk    = color.RGBA{0x22, 0x22, 0x22, 255}
	chartFrame  = color.RGBA{0x99, 0x99, 0x99, 255}
	chartGrid   = color.RGBA{0xe4, 0xe4, 0xe4, 255}
)

// chartLayout is the charts' geometry and styles, worked out before
// drawing so that a canvas can be made to size.
type chartLayout struct {
	ops           []string
	byOp          map[string][]Series
	colour        map[string]color.RGBA
	dash          map[int][]float64
	width, height int
}

func newChartLayout(series []Series) (*chartLayout, error) {
	l := &chartLayout{byOp: map[string][]Series{}, colour: map[string]color.RGBA{}, dash: map[int][]float64{}}
	var nps []int
	for _, s := range series {
		if len(s.Points) == 0 {
			continue
		}
		if l.byOp[s.Op] == nil {
			l.ops = append(l.ops, s.Op)
		}
		l.byOp[s.Op] = append(l.byOp[s.Op], s)
		if _, ok := l.colour[s.Contestant]; !ok {
			l.colour[s.Contestant] = chartPalette[len(l.colour)%len(chartPalette)]
		}
		if !slices.Contains(nps, s.NP) {
			nps = append(nps, s.NP)
		}
	}
	if len(l.ops) == 0 {
		return nil, fmt.Errorf("chart: no results to draw")
	}
	slices.SortStableFunc(l.ops, func(a, b string) int { return opOrder(a) - opOrder(b) })
	slices.Sort(nps)
	for i, np := range nps {
		l.dash[np] = chartDashes[i%len(chartDashes)]
	}
	rowH := chartTop + panelH + chartBottom
	l.width = 2*(chartLeft+panelW) + 30 + legendW
	l.height = len(l.ops)*rowH + 10
	return l, nil
}

// opOrder is the collective's place in Ops (unknown ones last).
func opOrder(op string) int {
	if i := slices.Index(Ops, op); i >= 0 {
		return i
	}
	return len(Ops)
}

func (l *chartLayout) draw(cv canvas) {
	rowH := chartTop + panelH + chartBottom
	for i, op := range l.ops {
		y0 := float64(i*rowH + chartTop)
		series := l.byOp[op]
		l.panel(cv, chartLeft, y0, op+": bus bandwidth (GB/s) by message size", series, false)
		l.panel(cv, 2*chartLeft+panelW, y0, op+": latency (µs) by message size, log-log", series, true)
		// The legend: one entry per line, beside the panels.
		lx := float64(2*(chartLeft+panelW) + 30)
		for j, s := range series {
			y := y0 + 12 + 18*float64(j)
			c := l.colour[s.Contestant]
			cv.polyline([]float64{lx, lx + 28}, []float64{y - 4, y - 4}, c, 2, l.dash[s.NP])
			cv.text(lx+34, y, fmt.Sprintf("%s np=%d", s.Contestant, s.NP), c, anchorStart)
		}
	}
}

// panel draws one chart: size on a log scale across, bus bandwidth
// (linear) or latency (logLatency: log scale) up.
func (l *chartLayout) panel(cv canvas, x0, y0 float64, title string, series []Series, logLatency bool) {
	op := series[0].Op
	minB, maxB := int64(math.MaxInt64), int64(1)
	minV, maxV := math.Inf(1), 0.0
	value := func(s Series, p Point) float64 {
		if logLatency {
			return p.TimeUS
		}
		return p.busBW(op, s.NP)
	}
	for _, s := range series {
		for _, p := range s.Points {
			minB, maxB = min(minB, p.Bytes), max(maxB, p.Bytes)
			if v := value(s, p); v > 0 && !math.IsInf(v, 0) {
				minV, maxV = min(minV, v), max(maxV, v)
			}
		}
	}
	maxB = max(maxB, 2*minB)
	lx0, lx1 := math.Log2(float64(minB)), math.Log2(float64(maxB))
	x := func(b int64) float64 { return x0 + panelW*(math.Log2(float64(b))-lx0)/(lx1-lx0) }
	var y func(v float64) float64
	var yTicks []float64
	var yLabel func(v float64) string
	if logLatency {
		if math.IsInf(minV, 1) {
			minV, maxV = 1, 10
		}
		d0, d1 := math.Floor(math.Log10(minV)), math.Ceil(math.Log10(maxV))
		if d1 <= d0 {
			d1 = d0 + 1
		}
		y = func(v float64) float64 { return y0 + panelH*(1-(math.Log10(v)-d0)/(d1-d0)) }
		for d := d0; d <= d1; d++ {
			yTicks = append(yTicks, math.Pow(10, d))
		}
		yLabel = humanMicros
	} else {
		step := niceStep(max(maxV, 1e-3) / 5)
		top := step * math.Ceil(max(maxV, 1e-3)/step)
		y = func(v float64) float64 { return y0 + panelH*(1-v/top) }
		for v := 0.0; v <= top*(1+1e-9); v += step {
			yTicks = append(yTicks, v)
		}
		yLabel = func(v float64) string { return fmt.Sprintf("%.3g", v) }
	}
	cv.text(x0, y0-12, title, chartInk, anchorStart)
	// Grid lines and labels: sizes at powers of four (or sixteen when
	// that many would crowd), values at the ticks.
	step := int64(4)
	if lx1-lx0 > 24 {
		step = 16
	}
	for b := minB; b <= maxB; b *= step {
		cv.polyline([]float64{x(b), x(b)}, []float64{y0, y0 + panelH}, chartGrid, 1, nil)
		cv.text(x(b), y0+panelH+16, humanBytes(b), chartInk, anchorMiddle)
	}
	for _, v := range yTicks {
		cv.polyline([]float64{x0, x0 + panelW}, []float64{y(v), y(v)}, chartGrid, 1, nil)
		cv.text(x0-6, y(v)+4, yLabel(v), chartInk, anchorEnd)
	}
	cv.text(x0+panelW/2, y0+panelH+32, "message size (bytes)", chartInk, anchorMiddle)
	cv.rect(x0, y0, panelW, panelH, chartFrame)
	for _, s := range series {
		var xs, ys []float64
		for _, p := range s.Points {
			v := value(s, p)
			if v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
				continue // no time measured: nothing to draw
			}
			xs, ys = append(xs, x(p.Bytes)), append(ys, y(v))
		}
		c := l.colour[s.Contestant]
		cv.polyline(xs, ys, c, 2, l.dash[s.NP])
		for i := range xs {
			cv.dot(xs[i], ys[i], c)
		}
	}
}

// niceStep is the least 1, 2 or 5 times a power of ten at least v.
func niceStep(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// humanMicros labels a time in µs with its unit.
func humanMicros(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%gs", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%gms", us/1e3)
	}
	return fmt.Sprintf("%gµs", us)
}
