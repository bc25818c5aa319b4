package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strings"
)

// The charts' geometry, in SVG pixels.
const (
	chartLeft   = 70  // left of each panel, for the y labels
	chartTop    = 40  // above a panel, for its title
	chartBottom = 40  // below a panel, for the x labels
	panelW      = 440 // a panel's plot area
	panelH      = 260
	legendW     = 190
	chartRowH   = chartTop + panelH + chartBottom
	chartWidth  = 2*(chartLeft+panelW) + 30 + legendW // two panels and a legend a row
)

// The charts' styles: colours for contestants (in order of appearance),
// dash patterns for world sizes.
var (
	chartPalette = [...]color.RGBA{
		{0x1f, 0x77, 0xb4, 255}, {0xff, 0x7f, 0x0e, 255}, {0x2c, 0xa0, 0x2c, 255}, {0xd6, 0x27, 0x28, 255},
		{0x94, 0x67, 0xbd, 255}, {0x8c, 0x56, 0x4b, 255}, {0xe3, 0x77, 0xc2, 255}, {0x17, 0xbe, 0xcf, 255},
	}
	chartDashes = [...][]float64{nil, {8, 4}, {2, 3}, {8, 3, 2, 3}}
	chartInk    = color.RGBA{0x22, 0x22, 0x22, 255}
	chartFrame  = color.RGBA{0x99, 0x99, 0x99, 255}
	chartGrid   = color.RGBA{0xe4, 0xe4, 0xe4, 255}
)

// ChartFormatOK reports, before anything is measured, whether a chart can
// be written in path's format (.svg or .png).
func ChartFormatOK(path string) error {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".svg", ".png":
		return nil
	default:
		return fmt.Errorf("chart %s: unknown format %q (want .svg or .png)", path, ext)
	}
}

// render draws a chart of the given size in path's format: SVG, or PNG
// at twice the size with a bitmap font.
func render(w io.Writer, path string, width, height int, draw func(canvas)) error {
	if err := ChartFormatOK(path); err != nil {
		return err
	}
	if strings.EqualFold(filepath.Ext(path), ".png") {
		cv := newRasterCanvas(width, height, 2)
		draw(cv)
		return cv.encode(w)
	}
	cv := newSVGCanvas(width, height)
	draw(cv)
	_, err := io.WriteString(w, cv.String())
	return err
}

// plot is one panel: x on a log₂ scale, y linear from zero or (logY) on
// a log₁₀ scale of whole decades.
type plot struct {
	title, xTitle string
	xTicks        []float64 // where x's grid lines and labels go
	xLabel        func(float64) string
	logY          bool
	yLabel        func(float64) string
	lines         []plotLine
}

// plotLine is one line of a plot, in data coordinates; points with a y
// that is not a positive finite number are left out (nothing measured).
type plotLine struct {
	colour color.RGBA
	dash   []float64
	xs, ys []float64
	thin   bool // a reference line: thin, no dots
}

// legendEntry is a line's sample and label beside the panels.
type legendEntry struct {
	label  string
	colour color.RGBA
	dash   []float64
}

func drawLegend(cv canvas, x, y float64, entries []legendEntry) {
	for j, e := range entries {
		ly := y + 12 + 18*float64(j)
		cv.polyline([]float64{x, x + 28}, []float64{ly - 4, ly - 4}, e.colour, 2, e.dash)
		cv.text(x+34, ly, e.label, e.colour, anchorStart)
	}
}

func usable(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// draw draws the plot with its area's top left corner at (x0, y0).
func (p plot) draw(cv canvas, x0, y0 float64) {
	minX, maxX, minY, maxY := math.Inf(1), math.Inf(-1), math.Inf(1), 0.0
	for _, l := range p.lines {
		for i := range l.xs {
			if usable(l.ys[i]) && usable(l.xs[i]) {
				minX, maxX = min(minX, l.xs[i]), max(maxX, l.xs[i])
				minY, maxY = min(minY, l.ys[i]), max(maxY, l.ys[i])
			}
		}
	}
	if math.IsInf(minX, 1) { // nothing measured: an empty frame
		minX, maxX, minY, maxY = 1, 2, 1, 10
	}
	maxX = max(maxX, 2*minX)
	lx0, lx1 := math.Log2(minX), math.Log2(maxX)
	x := func(v float64) float64 { return x0 + panelW*(math.Log2(v)-lx0)/(lx1-lx0) }
	var y func(v float64) float64
	var yTicks []float64
	if p.logY {
		d0, d1 := math.Floor(math.Log10(minY)), math.Ceil(math.Log10(maxY))
		if d1 <= d0 {
			d1 = d0 + 1
		}
		y = func(v float64) float64 { return y0 + panelH*(1-(math.Log10(v)-d0)/(d1-d0)) }
		for d := d0; d <= d1; d++ {
			yTicks = append(yTicks, math.Pow(10, d))
		}
	} else {
		step := niceStep(max(maxY, 1e-3) / 5)
		top := step * math.Ceil(max(maxY, 1e-3)/step)
		y = func(v float64) float64 { return y0 + panelH*(1-v/top) }
		for v := 0.0; v <= top*(1+1e-9); v += step {
			yTicks = append(yTicks, v)
		}
	}
	cv.text(x0, y0-12, p.title, chartInk, anchorStart)
	for _, t := range p.xTicks {
		if t < minX || t > maxX {
			continue
		}
		cv.polyline([]float64{x(t), x(t)}, []float64{y0, y0 + panelH}, chartGrid, 1, nil)
		cv.text(x(t), y0+panelH+16, p.xLabel(t), chartInk, anchorMiddle)
	}
	for _, v := range yTicks {
		cv.polyline([]float64{x0, x0 + panelW}, []float64{y(v), y(v)}, chartGrid, 1, nil)
		cv.text(x0-6, y(v)+4, p.yLabel(v), chartInk, anchorEnd)
	}
	cv.text(x0+panelW/2, y0+panelH+32, p.xTitle, chartInk, anchorMiddle)
	cv.rect(x0, y0, panelW, panelH, chartFrame)
	for _, l := range p.lines {
		var xs, ys []float64
		for i := range l.xs {
			if usable(l.ys[i]) && usable(l.xs[i]) {
				xs, ys = append(xs, x(l.xs[i])), append(ys, y(l.ys[i]))
			}
		}
		width := 2.0
		if l.thin {
			width = 1
		}
		cv.polyline(xs, ys, l.colour, width, l.dash)
		if !l.thin {
			for i := range xs {
				cv.dot(xs[i], ys[i], l.colour)
			}
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
