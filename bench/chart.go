package bench

import (
	"cmp"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"time"
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
	_, bus := Bandwidths(op, np, p.Bytes, time.Duration(p.TimeUS*float64(time.Microsecond)))
	return bus
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

// WriteChart draws, for every collective in the series (in Ops' order),
// bus bandwidth against message size (sizes on a log scale) and latency
// against size (log-log) side by side, a line per contestant and world
// size: a colour per contestant, a dash pattern per world size, and a
// legend. SVG, or PNG for a path ending in .png.
func WriteChart(w io.Writer, path string, series []Series) error {
	l, err := newChartLayout(series)
	if err != nil {
		return err
	}
	return render(w, path, chartWidth, len(l.ops)*chartRowH+10, l.draw)
}

// chartLayout is the collectives' charts: the series by collective and
// their styles.
type chartLayout struct {
	ops    []string
	byOp   map[string][]Series
	colour map[string]color.RGBA
	dash   map[int][]float64
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
	for i, op := range l.ops {
		y0 := float64(i*chartRowH + chartTop)
		series := l.byOp[op]
		var sizes []float64 // the x labels: powers of four (sixteen when crowded) from the smallest size
		minB, maxB := int64(math.MaxInt64), int64(1)
		var bw, lat []plotLine
		var legend []legendEntry
		for _, s := range series {
			c, d := l.colour[s.Contestant], l.dash[s.NP]
			var xs, bws, us []float64
			for _, p := range s.Points {
				minB, maxB = min(minB, p.Bytes), max(maxB, p.Bytes)
				xs, bws, us = append(xs, float64(p.Bytes)), append(bws, p.busBW(op, s.NP)), append(us, p.TimeUS)
			}
			bw = append(bw, plotLine{colour: c, dash: d, xs: xs, ys: bws})
			lat = append(lat, plotLine{colour: c, dash: d, xs: xs, ys: us})
			legend = append(legend, legendEntry{fmt.Sprintf("%s np=%d", s.Contestant, s.NP), c, d})
		}
		step := int64(4)
		if math.Log2(float64(maxB))-math.Log2(float64(minB)) > 24 {
			step = 16
		}
		for b := minB; b <= max(maxB, 2*minB); b *= step {
			sizes = append(sizes, float64(b))
		}
		sizeLabel := func(v float64) string { return humanBytes(int64(v)) }
		plot{title: op + ": bus bandwidth (GB/s) by message size", xTitle: "message size (bytes)", xTicks: sizes, xLabel: sizeLabel,
			yLabel: func(v float64) string { return fmt.Sprintf("%.6g", v) }, lines: bw}.draw(cv, chartLeft, y0)
		plot{title: op + ": latency (µs) by message size, log-log", xTitle: "message size (bytes)", xTicks: sizes, xLabel: sizeLabel,
			logY: true, yLabel: humanMicros, lines: lat}.draw(cv, 2*chartLeft+panelW, y0)
		drawLegend(cv, float64(2*(chartLeft+panelW)+30), y0, legend)
	}
}
