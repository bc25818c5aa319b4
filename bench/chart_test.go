package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// chartFixture is two world sizes of gorun (two variants) for all-reduce
// and broadcast, and gloo's and Open MPI's all-reduce: 8 B to 1 MiB.
func chartFixture() ([]Result, []Competitor) {
	var ours []Result
	var theirs []Competitor
	for _, op := range []string{"broadcast", "all_reduce"} { // out of Ops' order on purpose
		for _, np := range []int{2, 4} {
			for b := int64(8); b <= 1<<20; b *= 2 {
				t := 5 + float64(b)/1e3
				ours = append(ours, Result{Op: op, NP: np, Bytes: b, TimeUS: t, Variant: "default"},
					Result{Op: op, NP: np, Bytes: b, TimeUS: 2 * t, Variant: "ring"})
				if op == "all_reduce" {
					theirs = append(theirs, Competitor{Name: "gloo", Op: op, NP: np, Bytes: b, TimeUS: 40 + float64(b)/500},
						Competitor{Name: "mpi-shm", Op: op, NP: np, Bytes: b, TimeUS: 2 + float64(b)/800})
				}
			}
		}
	}
	return ours, theirs
}

func TestChartSeries(t *testing.T) {
	ours, theirs := chartFixture()
	// Sizes out of order within a series come back sorted.
	ours[0], ours[2] = ours[2], ours[0]
	series := ChartSeries(ours, theirs)
	var got []string
	for _, s := range series {
		got = append(got, s.Contestant+" "+s.Op+" "+strconv.Itoa(s.NP))
		for i := 1; i < len(s.Points); i++ {
			if s.Points[i].Bytes <= s.Points[i-1].Bytes {
				t.Fatalf("%s %s np=%d: sizes not increasing at %d: %v", s.Contestant, s.Op, s.NP, i, s.Points)
			}
		}
		if len(s.Points) != 18 {
			t.Errorf("%s %s np=%d: %d points, want 18", s.Contestant, s.Op, s.NP, len(s.Points))
		}
	}
	want := []string{
		"gorun broadcast 2", "gorun all_reduce 2", "gorun broadcast 4", "gorun all_reduce 4",
		"gorun ring broadcast 2", "gorun ring all_reduce 2", "gorun ring broadcast 4", "gorun ring all_reduce 4",
		"gloo all_reduce 2", "gloo all_reduce 4", "mpi-shm all_reduce 2", "mpi-shm all_reduce 4",
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("series:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// svgElement is one drawing element of the chart.
type svgElement struct {
	name  string
	attrs map[string]string
	text  string
}

// parseSVG reads the chart as XML (it must be well-formed) into its
// elements.
func parseSVG(t *testing.T, b []byte) []svgElement {
	t.Helper()
	var out []svgElement
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := svgElement{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
		case xml.CharData:
			if len(out) > 0 {
				out[len(out)-1].text += string(tok)
			}
		}
	}
}

func TestChartSVG(t *testing.T) {
	ours, theirs := chartFixture()
	series := ChartSeries(ours, theirs)
	var b bytes.Buffer
	if err := WriteChart(&b, "c.svg", series); err != nil {
		t.Fatal(err)
	}
	elems := parseSVG(t, b.Bytes())
	var texts []string
	lines := map[string][]svgElement{} // data lines (18 points) by colour
	for _, e := range elems {
		switch e.name {
		case "text":
			texts = append(texts, e.text)
		case "polyline":
			if pts := strings.Fields(e.attrs["points"]); len(pts) == 18 {
				lines[e.attrs["stroke"]] = append(lines[e.attrs["stroke"]], e)
			}
		}
	}
	all := strings.Join(texts, "\n")
	// Collectives in Ops' order, each with both panels.
	ar, bc := strings.Index(all, "all_reduce: bus bandwidth"), strings.Index(all, "broadcast: bus bandwidth")
	if ar < 0 || bc < 0 || ar > bc || !strings.Contains(all, "all_reduce: latency (µs) by message size, log-log") ||
		!strings.Contains(all, "broadcast: latency (µs)") {
		t.Fatalf("panel titles missing or out of order:\n%s", all)
	}
	for _, entry := range []string{"gorun np=2", "gorun ring np=4", "gloo np=2", "mpi-shm np=4"} {
		if !strings.Contains(all, entry) {
			t.Errorf("legend lacks %q:\n%s", entry, all)
		}
	}
	// A colour per contestant: gorun and its ring variant 4 series × 2
	// panels each; the competitors (all-reduce only) 2 × 2.
	counts := map[int]int{}
	for _, ls := range lines {
		counts[len(ls)]++
	}
	if len(lines) != 4 || counts[8] != 2 || counts[4] != 2 {
		t.Fatalf("data lines by colour: %v (want two colours with 8 lines, two with 4)", counts)
	}
	// Sizes on a log scale: doubling the size moves a point by the same
	// distance anywhere on the axis; the latency panel is log-scaled too
	// (gloo's time grows from 40 µs to 2.1 ms: its points climb, not lie
	// flat at the bottom, and not in proportion to the time).
	for _, ls := range lines {
		for _, l := range ls {
			pts := strings.Fields(l.attrs["points"])
			var xs []float64
			for _, p := range pts {
				x, _, _ := strings.Cut(p, ",")
				xf, _ := strconv.ParseFloat(x, 64)
				xs = append(xs, xf)
			}
			step := xs[1] - xs[0]
			for i := 2; i < len(xs); i++ {
				if math.Abs(xs[i]-xs[i-1]-step) > 0.15 {
					t.Fatalf("x steps %v then %v: not a log scale: %v", step, xs[i]-xs[i-1], pts)
				}
			}
		}
	}
	// gloo np=2 in the latency panel: its last point is log10(2100/40)
	// ≈ 1.7 decades above its first.
	gloo := lines[svgColour(chartPalette[2])]
	if len(gloo) != 4 {
		t.Fatalf("gloo: %d lines", len(gloo))
	}
	var latency svgElement
	for _, l := range gloo {
		if x, _, _ := strings.Cut(strings.Fields(l.attrs["points"])[0], ","); strings.HasPrefix(x, strconv.Itoa(2*chartLeft+panelW)) {
			latency = l
		}
	}
	if latency.name == "" {
		t.Fatalf("gloo has no line in a latency panel: %v", gloo)
	}
	pts := strings.Fields(latency.attrs["points"])
	_, y0s, _ := strings.Cut(pts[0], ",")
	_, y1s, _ := strings.Cut(pts[len(pts)-1], ",")
	y0, _ := strconv.ParseFloat(y0s, 64)
	y1, _ := strconv.ParseFloat(y1s, 64)
	// The latency axis spans whole decades: 1 µs to 10 ms here (mpi-shm
	// starts at 2 µs, gorun ring ends at 2.1 ms): 4 decades.
	wantRise := panelH * math.Log10((40+float64(1<<20)/500)/(40+8.0/500)) / 4
	if math.Abs((y0-y1)-wantRise) > 0.5 {
		t.Fatalf("gloo's latency line rises %.1f px, want %.1f (log scale over 4 decades)", y0-y1, wantRise)
	}
}

func TestChartPNG(t *testing.T) {
	ours, theirs := chartFixture()
	series := ChartSeries(ours, theirs)
	var b bytes.Buffer
	if err := WriteChart(&b, "c.png", series); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if r := img.Bounds(); r.Dx() != 2*chartWidth || r.Dy() != 2*(2*chartRowH+10) {
		t.Fatalf("image %v, want %d×%d", r, 2*chartWidth, 2*(2*chartRowH+10))
	}
	// Every contestant's colour is drawn, and most of the image is the
	// white background.
	count := map[color.RGBA]int{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			count[c]++
		}
	}
	for i := range 4 {
		if count[chartPalette[i]] < 1000 {
			t.Errorf("colour %d: %d pixels", i, count[chartPalette[i]])
		}
	}
	if white := count[color.RGBA{255, 255, 255, 255}]; white < r.Dx()*r.Dy()/2 {
		t.Errorf("only %d of %d pixels white", white, r.Dx()*r.Dy())
	}
}

// TestRasterText: the bitmap font draws each character in its cells, a
// descender one row lower, and a character it lacks as '?'.
func TestRasterText(t *testing.T) {
	ink := color.RGBA{0, 0, 0, 255}
	draw := func(s string) (*rasterCanvas, int) {
		cv := newRasterCanvas(20, 12, 1)
		cv.text(1, 9, s, ink, anchorStart)
		n := 0
		for i := 0; i < len(cv.img.Pix); i += 4 {
			if cv.img.Pix[i] == 0 {
				n++
			}
		}
		return cv, n
	}
	for _, c := range []struct {
		s    string
		want int // inked cells
	}{{"1", 10}, {"l", 10}, {" ", 0}, {"-", 5}} {
		if _, n := draw(c.s); n != c.want {
			t.Errorf("%q: %d pixels inked, want %d", c.s, n, c.want)
		}
	}
	// 'g' descends: its last row is below the baseline (y = 9).
	cv, _ := draw("g")
	if cv.img.RGBAAt(2, 9).R != 0 || cv.img.RGBAAt(2, 8).R == 0 {
		t.Errorf("g: no ink under the baseline")
	}
	_, q := draw("?")
	if _, n := draw("ж"); n != q {
		t.Errorf("a character the font lacks: %d pixels, want '?' (%d)", n, q)
	}
}

// TestFontGlyphs: every glyph is seven rows of five cells.
func TestFontGlyphs(t *testing.T) {
	for r := rune(0); r < 0x2200; r++ {
		g, _, ok := glyph(r)
		if !ok {
			continue
		}
		for i, row := range g {
			if len(row) != 5 || strings.Trim(row, ".#") != "" {
				t.Errorf("%q row %d: %q", r, i, row)
			}
		}
	}
	for _, r := range "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,:-_=()/%+µ" {
		if _, _, ok := glyph(r); !ok {
			t.Errorf("%q missing", r)
		}
	}
}

func TestChartErrors(t *testing.T) {
	if err := WriteChart(io.Discard, "c.svg", nil); err == nil || !strings.Contains(err.Error(), "no results") {
		t.Errorf("no series: %v", err)
	}
	for _, c := range []struct {
		path string
		ok   bool
	}{{"a.svg", true}, {"a.PNG", true}, {"a.jpg", false}, {"chart", false}} {
		err := ChartFormatOK(c.path)
		if (err == nil) != c.ok || err != nil && !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s: %v", c.path, err)
		}
	}
	ours, _ := chartFixture()
	if err := WriteChart(io.Discard, "c.gif", ChartSeries(ours, nil)); err == nil {
		t.Errorf("c.gif written")
	}
}
