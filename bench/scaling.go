package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
)

// ScalingRow is one contestant's run of the same training work at one
// world size: a row of seed 003's table.
type ScalingRow struct {
	Contestant string  `json:"contestant"` // "gorun", "gorun tcp", "pytorch-ddp"
	NP         int     `json:"np"`
	Seconds    float64 `json:"seconds"`   // the epoch's run time
	ImgPerSec  float64 `json:"img_per_s"` // over all ranks
	// SpeedUp is ImgPerSec over the contestant's row at its smallest
	// world size; Efficiency is SpeedUp over the growth of the world
	// size (1 when every rank adds a whole rank's throughput).
	SpeedUp    float64 `json:"speedup"`
	Efficiency float64 `json:"efficiency"`
}

// FillSpeedUps sets every row's SpeedUp and Efficiency against its
// contestant's row at the smallest world size.
func FillSpeedUps(rows []ScalingRow) {
	base := map[string]ScalingRow{}
	for _, r := range rows {
		if b, ok := base[r.Contestant]; !ok || r.NP < b.NP {
			base[r.Contestant] = r
		}
	}
	for i, r := range rows {
		b := base[r.Contestant]
		if b.ImgPerSec > 0 {
			rows[i].SpeedUp = r.ImgPerSec / b.ImgPerSec
			rows[i].Efficiency = rows[i].SpeedUp * float64(b.NP) / float64(r.NP)
		}
	}
}

// contestants lists the rows' contestants in order of appearance.
func contestants(rows []ScalingRow) []string {
	var names []string
	for _, r := range rows {
		if !slices.Contains(names, r.Contestant) {
			names = append(names, r.Contestant)
		}
	}
	return names
}

// WriteScalingTable prints seed 003's table: each contestant's run time,
// throughput, speed-up and efficiency per world size, then gorun's
// throughput over each other contestant's at the world sizes both ran.
func WriteScalingTable(w io.Writer, title string, rows []ScalingRow) {
	fmt.Fprintf(w, "# %s\n# %-14s %4s %10s %10s %8s %10s\n", title, "contestant", "np", "seconds", "img/s", "speedup", "efficiency")
	for _, r := range rows {
		fmt.Fprintf(w, "  %-14s %4d %10.1f %10.0f %7.2fx %9.0f%%\n", r.Contestant, r.NP, r.Seconds, r.ImgPerSec, r.SpeedUp, 100*r.Efficiency)
	}
	names := contestants(rows)
	if len(names) < 2 {
		return
	}
	for _, other := range names[1:] {
		line := ""
		for _, r := range rows {
			if r.Contestant != names[0] {
				continue
			}
			for _, o := range rows {
				if o.Contestant == other && o.NP == r.NP && o.ImgPerSec > 0 {
					line += fmt.Sprintf(" np=%d %.2fx", r.NP, r.ImgPerSec/o.ImgPerSec)
				}
			}
		}
		if line != "" {
			fmt.Fprintf(w, "# %s ÷ %s (img/s):%s\n", names[0], other, line)
		}
	}
}

// WriteScalingJSON writes the rows as a JSON array.
func WriteScalingJSON(w io.Writer, rows []ScalingRow) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rows)
}

// WriteScalingChart draws throughput and speed-up against the world size
// (log₂ scale), a line per contestant and, on the speed-up panel, the
// ideal (speed-up = growth of the world size) in grey. SVG, or PNG for a
// path ending in .png.
func WriteScalingChart(w io.Writer, path, title string, rows []ScalingRow) error {
	if len(rows) == 0 {
		return fmt.Errorf("chart: no results to draw")
	}
	var nps []float64
	for _, r := range rows {
		if !slices.Contains(nps, float64(r.NP)) {
			nps = append(nps, float64(r.NP))
		}
	}
	slices.Sort(nps)
	var ips, speed []plotLine
	var legend []legendEntry
	for i, name := range contestants(rows) {
		c := chartPalette[i%len(chartPalette)]
		var xs, ys, ss []float64
		for _, r := range rows {
			if r.Contestant == name {
				xs, ys, ss = append(xs, float64(r.NP)), append(ys, r.ImgPerSec), append(ss, r.SpeedUp)
			}
		}
		ips = append(ips, plotLine{colour: c, xs: xs, ys: ys})
		speed = append(speed, plotLine{colour: c, xs: xs, ys: ss})
		legend = append(legend, legendEntry{label: name, colour: c})
	}
	ideal := make([]float64, len(nps))
	for i, np := range nps {
		ideal[i] = np / nps[0]
	}
	speed = append(speed, plotLine{colour: chartFrame, dash: []float64{4, 4}, xs: nps, ys: ideal, thin: true})
	legend = append(legend, legendEntry{label: "ideal", colour: chartFrame, dash: []float64{4, 4}})
	npLabel := func(v float64) string { return strconv.Itoa(int(v)) }
	number := func(v float64) string { return fmt.Sprintf("%.6g", v) }
	return render(w, path, chartWidth, chartRowH+10, func(cv canvas) {
		plot{title: title + ": img/s by world size", xTitle: "ranks (np)", xTicks: nps, xLabel: npLabel, yLabel: number, lines: ips}.draw(cv, chartLeft, chartTop)
		plot{title: "speed-up by world size", xTitle: "ranks (np)", xTicks: nps, xLabel: npLabel, yLabel: number, lines: speed}.draw(cv, 2*chartLeft+panelW, chartTop)
		drawLegend(cv, float64(2*(chartLeft+panelW)+30), chartTop, legend)
	})
}

var torchDDPLine = regexp.MustCompile(`^torch-ddp \S+ np=(\d+): (\d+) images in ([0-9.]+) s, ([0-9.]+) img/s`)

// ParseTorchDDP reads the result line of bench/competitors/torch_ddp.py.
func ParseTorchDDP(r io.Reader) (ScalingRow, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := torchDDPLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		np, _ := strconv.Atoi(m[1])
		secs, _ := strconv.ParseFloat(m[3], 64)
		ips, _ := strconv.ParseFloat(m[4], 64)
		return ScalingRow{Contestant: "pytorch-ddp", NP: np, Seconds: secs, ImgPerSec: ips}, nil
	}
	if err := sc.Err(); err != nil {
		return ScalingRow{}, err
	}
	return ScalingRow{}, fmt.Errorf("no \"torch-ddp ... img/s\" line in its output")
}

// TorchPython is Debian's Python, the one with python3-torch.
const TorchPython = "/usr/bin/python3"

// TorchDDPAvailable reports why PyTorch DDP cannot run here (nil: it can).
func TorchDDPAvailable(helpers string) error {
	if _, err := os.Stat(filepath.Join(helpers, "torch_ddp.py")); err != nil {
		return fmt.Errorf("%w (run from the repository root or pass -helpers)", err)
	}
	return torchAvailable()
}

// torchAvailable reports why TorchPython cannot run torch.distributed
// (nil: it can).
func torchAvailable() error {
	if err := exec.Command(TorchPython, "-c", "import torch.distributed").Run(); err != nil {
		return fmt.Errorf("%s with torch not found (apt-get install python3-torch): %w", TorchPython, err)
	}
	return nil
}

// RunTorchDDP runs PyTorch DDP over gloo on the training work model with
// n images at world size np, one thread per rank
// (bench/competitors/torch_ddp.py in helpers).
func RunTorchDDP(ctx context.Context, helpers, model string, n, np int) (ScalingRow, error) {
	cmd := exec.CommandContext(ctx, TorchPython, filepath.Join(helpers, "torch_ddp.py"), model, strconv.Itoa(n), strconv.Itoa(np))
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return ScalingRow{}, fmt.Errorf("pytorch-ddp np=%d: %w\n%s", np, err, out)
	}
	row, err := ParseTorchDDP(bytes.NewReader(out))
	if err != nil {
		return ScalingRow{}, fmt.Errorf("pytorch-ddp np=%d: %w\n%s", np, err, out)
	}
	return row, nil
}
