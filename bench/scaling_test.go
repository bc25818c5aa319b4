package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestFillSpeedUps(t *testing.T) {
	rows := []ScalingRow{
		{Contestant: "gorun", NP: 2, ImgPerSec: 150},
		{Contestant: "gorun", NP: 1, ImgPerSec: 100},
		{Contestant: "gorun", NP: 4, ImgPerSec: 300},
		{Contestant: "pytorch-ddp", NP: 2, ImgPerSec: 80}, // no np=1 row: its smallest world is the base
		{Contestant: "pytorch-ddp", NP: 4, ImgPerSec: 120},
	}
	FillSpeedUps(rows)
	for i, want := range []struct{ speedUp, efficiency float64 }{{1.5, 0.75}, {1, 1}, {3, 0.75}, {1, 1}, {1.5, 0.75}} {
		if math.Abs(rows[i].SpeedUp-want.speedUp) > 1e-12 || math.Abs(rows[i].Efficiency-want.efficiency) > 1e-12 {
			t.Errorf("row %d (%s np=%d): speed-up %v, efficiency %v; want %v, %v", i, rows[i].Contestant, rows[i].NP,
				rows[i].SpeedUp, rows[i].Efficiency, want.speedUp, want.efficiency)
		}
	}
}

func TestParseTorchDDP(t *testing.T) {
	out := "some warning\ntorch-ddp cifarnet np=2: 2560 images in 11.32 s, 226 img/s (tcmalloc)\n"
	row, err := ParseTorchDDP(strings.NewReader(out))
	if err != nil || row != (ScalingRow{Contestant: "pytorch-ddp", NP: 2, Seconds: 11.32, ImgPerSec: 226}) {
		t.Fatalf("%+v, %v", row, err)
	}
	if _, err := ParseTorchDDP(strings.NewReader("Traceback (most recent call last):\n")); err == nil {
		t.Fatal("no result line: no error")
	}
}

func scalingFixture() []ScalingRow {
	rows := []ScalingRow{
		{Contestant: "gorun", NP: 1, Seconds: 16.2, ImgPerSec: 790},
		{Contestant: "gorun", NP: 2, Seconds: 10.2, ImgPerSec: 1259},
		{Contestant: "gorun", NP: 4, Seconds: 10.1, ImgPerSec: 1268},
		{Contestant: "pytorch-ddp", NP: 1, Seconds: 10.4, ImgPerSec: 1225},
		{Contestant: "pytorch-ddp", NP: 2, Seconds: 7.3, ImgPerSec: 1761},
	}
	FillSpeedUps(rows)
	return rows
}

func TestWriteScalingTable(t *testing.T) {
	var b bytes.Buffer
	WriteScalingTable(&b, "seed 003", scalingFixture())
	s := b.String()
	for _, want := range []string{
		"# seed 003\n",
		"  gorun             2       10.2       1259    1.59x        80%\n",
		"  pytorch-ddp       2        7.3       1761    1.44x        72%\n",
		// gorun over PyTorch where both ran (not at np = 4).
		"# gorun ÷ pytorch-ddp (img/s): np=1 0.64x np=2 0.71x\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	var js bytes.Buffer
	if err := WriteScalingJSON(&js, scalingFixture()); err != nil {
		t.Fatal(err)
	}
	var back []ScalingRow
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back) != 5 || back[1] != scalingFixture()[1] {
		t.Fatalf("JSON round trip: %v %+v", err, back)
	}
}

func TestScalingChart(t *testing.T) {
	var b bytes.Buffer
	if err := WriteScalingChart(&b, "s.svg", "mnist", scalingFixture()); err != nil {
		t.Fatal(err)
	}
	// Points of the lines inside the panels (left of the legend), by colour.
	legendX := float64(2*(chartLeft+panelW) + 30)
	points := map[string][]int{}
	var texts []string
	for _, e := range parseSVG(t, b.Bytes()) {
		switch e.name {
		case "polyline":
			pts := strings.Fields(e.attrs["points"])
			x, _, _ := strings.Cut(pts[0], ",")
			if xf, _ := strconv.ParseFloat(x, 64); xf < legendX && e.attrs["stroke"] != svgColour(chartGrid) {
				points[e.attrs["stroke"]] = append(points[e.attrs["stroke"]], len(pts))
			}
		case "text":
			texts = append(texts, e.text)
		}
	}
	// gorun (np = 1, 2, 4) and PyTorch (1, 2) in both panels; the ideal
	// (over 1, 2, 4) in the speed-up panel; the frames are rects.
	want := map[string][]int{svgColour(chartPalette[0]): {3, 3}, svgColour(chartPalette[1]): {2, 2}, svgColour(chartFrame): {3}}
	if fmt.Sprint(points) != fmt.Sprint(want) {
		t.Fatalf("lines' points by colour: %v, want %v", points, want)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"mnist: img/s by world size", "speed-up by world size", "gorun", "pytorch-ddp", "ideal", "ranks (np)"} {
		if !strings.Contains(all, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	b.Reset()
	if err := WriteScalingChart(&b, "s.png", "mnist", scalingFixture()); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&b); err != nil {
		t.Fatalf("PNG: %v", err)
	}
	if err := WriteScalingChart(&b, "s.svg", "mnist", nil); err == nil {
		t.Error("no rows: no error")
	}
	if err := WriteScalingChart(&b, "s.pdf", "mnist", scalingFixture()); err == nil {
		t.Error("s.pdf: no error")
	}
}
