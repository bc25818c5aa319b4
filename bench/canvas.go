package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strings"
)

// canvas is what the charts are drawn on (SVG or raster). Coordinates are
// the SVG's pixels; text is placed by its baseline.
type canvas interface {
	polyline(xs, ys []float64, c color.RGBA, width float64, dash []float64)
	rect(x, y, w, h float64, c color.RGBA)
	dot(x, y float64, c color.RGBA)
	text(x, y float64, s string, c color.RGBA, anchor textAnchor)
}

// textAnchor is which part of a text lies at its x.
type textAnchor int

const (
	anchorStart textAnchor = iota
	anchorMiddle
	anchorEnd
)

// svgCanvas writes the drawing as SVG elements.
type svgCanvas struct {
	b strings.Builder
}

func newSVGCanvas(width, height int) *svgCanvas {
	cv := &svgCanvas{}
	fmt.Fprintf(&cv.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&cv.b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	return cv
}

func svgColour(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

func (cv *svgCanvas) polyline(xs, ys []float64, c color.RGBA, width float64, dash []float64) {
	if len(xs) == 0 {
		return
	}
	var pts strings.Builder
	for i := range xs {
		fmt.Fprintf(&pts, "%.1f,%.1f ", xs[i], ys[i])
	}
	style := ""
	if len(dash) > 0 {
		parts := make([]string, len(dash))
		for i, d := range dash {
			parts[i] = fmt.Sprintf("%g", d)
		}
		style = fmt.Sprintf(` stroke-dasharray="%s"`, strings.Join(parts, ","))
	}
	fmt.Fprintf(&cv.b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="%g"%s/>`+"\n",
		strings.TrimSpace(pts.String()), svgColour(c), width, style)
}

func (cv *svgCanvas) rect(x, y, w, h float64, c color.RGBA) {
	fmt.Fprintf(&cv.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="%s"/>`+"\n", x, y, w, h, svgColour(c))
}

func (cv *svgCanvas) dot(x, y float64, c color.RGBA) {
	fmt.Fprintf(&cv.b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", x, y, svgColour(c))
}

func (cv *svgCanvas) text(x, y float64, s string, c color.RGBA, anchor textAnchor) {
	var esc bytes.Buffer
	xml.EscapeText(&esc, []byte(s)) // a bytes.Buffer does not fail
	a := [...]string{"start", "middle", "end"}[anchor]
	fmt.Fprintf(&cv.b, `<text x="%.1f" y="%.1f" fill="%s" text-anchor="%s">%s</text>`+"\n", x, y, svgColour(c), a, esc.String())
}

func (cv *svgCanvas) String() string { return cv.b.String() + "</svg>\n" }

// rasterCanvas draws into an RGBA image, scale pixels to the SVG's one,
// without anti-aliasing; text in a 5×7 bitmap font (font5x7).
type rasterCanvas struct {
	img   *image.RGBA
	scale float64
}

func newRasterCanvas(width, height, scale int) *rasterCanvas {
	img := image.NewRGBA(image.Rect(0, 0, width*scale, height*scale))
	for i := range img.Pix {
		img.Pix[i] = 0xff // white, opaque
	}
	return &rasterCanvas{img: img, scale: float64(scale)}
}

func (cv *rasterCanvas) encode(w io.Writer) error { return png.Encode(w, cv.img) }

// square fills a square of side size centred on (x, y), in image pixels.
func (cv *rasterCanvas) square(x, y, size float64, c color.RGBA) {
	h := size / 2
	for py := int(math.Floor(y - h + 0.5)); float64(py) < y+h-0.5+1e-9; py++ {
		for px := int(math.Floor(x - h + 0.5)); float64(px) < x+h-0.5+1e-9; px++ {
			cv.img.SetRGBA(px, py, c) // outside the image: ignored
		}
	}
}

func (cv *rasterCanvas) polyline(xs, ys []float64, c color.RGBA, width float64, dash []float64) {
	s := cv.scale
	brush := max(1, width*s)
	along := 0.0 // distance drawn so far, for the dash pattern (in SVG pixels)
	period := 0.0
	for _, d := range dash {
		period += d
	}
	on := func(at float64) bool {
		if period == 0 {
			return true
		}
		at = math.Mod(at, period)
		for i, d := range dash {
			if at < d {
				return i%2 == 0
			}
			at -= d
		}
		return true
	}
	for i := 1; i < len(xs); i++ {
		dx, dy := xs[i]-xs[i-1], ys[i]-ys[i-1]
		length := math.Hypot(dx, dy)
		steps := max(1, int(math.Ceil(length*s*2))) // half an image pixel apart
		for k := 0; k <= steps; k++ {
			t := float64(k) / float64(steps)
			if on(along + t*length) {
				cv.square((xs[i-1]+t*dx)*s, (ys[i-1]+t*dy)*s, brush, c)
			}
		}
		along += length
	}
}

func (cv *rasterCanvas) rect(x, y, w, h float64, c color.RGBA) {
	cv.polyline([]float64{x, x + w, x + w, x, x}, []float64{y, y, y + h, y + h, y}, c, 1, nil)
}

func (cv *rasterCanvas) dot(x, y float64, c color.RGBA) {
	cv.square(x*cv.scale, y*cv.scale, 5*cv.scale, c)
}

// text draws s with its baseline at y: each glyph 5×7 cells of scale
// pixels, advancing 6 cells; a character the font lacks is drawn as '?'.
func (cv *rasterCanvas) text(x, y float64, s string, c color.RGBA, anchor textAnchor) {
	cell := cv.scale
	runes := []rune(s)
	width := float64(6*len(runes)-1) * cell
	left := x * cv.scale
	switch anchor {
	case anchorMiddle:
		left -= width / 2
	case anchorEnd:
		left -= width
	}
	top := y*cv.scale - 7*cell
	for i, r := range runes {
		g, descends, ok := glyph(r)
		if !ok {
			g, descends, _ = glyph('?')
		}
		glyphTop := top
		if descends {
			glyphTop += cell
		}
		for row, bits := range g {
			for col := range 5 {
				if bits[col] == '#' {
					px, py := left+float64(6*i+col)*cell, glyphTop+float64(row)*cell
					cv.square(px+cell/2, py+cell/2, cell, c)
				}
			}
		}
	}
}
