package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
)

// Competitor is another implementation's time for one collective at one
// size.
type Competitor struct {
	Name   string
	Op     string // as the harness names it: all_reduce, reduce, ...
	NP     int
	Bytes  int64
	TimeUS float64
}

var competitorLine = regexp.MustCompile(`^(gloo|mpi)(?: op=(\w+))? np=(\d+) bytes=(\d+) us=([0-9.]+)`)

// mpiOps are the collectives the Open MPI helper times.
var mpiOps = []string{"all_reduce", "broadcast", "all_gather", "reduce_scatter", "reduce", "gather", "scatter", "alltoall"}

// parseCompetitor reads the helpers' "NAME [op=OP] np=N bytes=B us=T"
// lines (no op: all_reduce).
func parseCompetitor(r io.Reader) []Competitor {
	var out []Competitor
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := competitorLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		op := m[2]
		if op == "" {
			op = "all_reduce"
		}
		np, _ := strconv.Atoi(m[3])
		b, _ := strconv.ParseInt(m[4], 10, 64)
		us, _ := strconv.ParseFloat(m[5], 64)
		out = append(out, Competitor{Name: m[1], Op: op, NP: np, Bytes: b, TimeUS: us})
	}
	return out
}

// RunCompetitors measures the collectives ops among all_reduce,
// broadcast, all_gather, reduce_scatter, reduce, gather, scatter and
// alltoall with Open MPI (openmpi-bin with mpicc), and
// all-reduce with gloo (Debian's python3-torch), at the given sizes and
// world size, using the helpers in dir (bench/competitors). A competitor
// that is not installed is reported in skipped and left out.
func RunCompetitors(ctx context.Context, dir string, np int, sizes []int64, ops []string) (results []Competitor, skipped []string) {
	args := []string{}
	for _, s := range sizes {
		args = append(args, strconv.FormatInt(s, 10))
	}
	var mpiArgs []string
	for _, op := range ops {
		if slices.Contains(mpiOps, op) {
			mpiArgs = append(append(mpiArgs, "op="+op), args...)
		}
	}
	if len(mpiArgs) == 0 {
		return nil, nil
	}
	if slices.Contains(ops, "all_reduce") { // gloo's helper times all-reduce only
		results, skipped = runGloo(ctx, dir, np, args)
	}
	mpicc, errc := exec.LookPath("mpicc")
	mpirun, errr := exec.LookPath("mpirun")
	if errc != nil || errr != nil {
		return results, append(skipped, "Open MPI: mpicc/mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
	}
	tmp, err := os.MkdirTemp("", "gorun-mpi")
	if err != nil {
		return results, append(skipped, "Open MPI: "+err.Error())
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "mpi_allreduce")
	if out, err := exec.CommandContext(ctx, mpicc, "-O2", "-o", bin, filepath.Join(dir, "mpi_allreduce.c")).CombinedOutput(); err != nil {
		return results, append(skipped, fmt.Sprintf("Open MPI: mpicc: %v: %s", err, out))
	}
	// Over TCP, and through shared memory (vader, Open MPI 4's
	// shared-memory transport).
	for _, path := range []struct{ btl, name string }{{"self,tcp", "mpi-tcp"}, {"self,vader", "mpi-shm"}} {
		cmd := exec.CommandContext(ctx, mpirun, append([]string{"--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(np), "--mca", "btl", path.btl, bin}, mpiArgs...)...)
		out, err := cmd.Output()
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("Open MPI (%s): %v", path.btl, err))
		}
		for _, c := range parseCompetitor(bytes.NewReader(out)) {
			c.Name = path.name
			results = append(results, c)
		}
	}
	return results, skipped
}

// runGloo times all-reduce with gloo through bench/competitors/gloo_allreduce.py.
func runGloo(ctx context.Context, dir string, np int, args []string) (results []Competitor, skipped []string) {
	if err := torchAvailable(); err != nil {
		return nil, []string{"gloo: " + err.Error()}
	}
	out, err := exec.CommandContext(ctx, TorchPython, append([]string{filepath.Join(dir, "gloo_allreduce.py"), strconv.Itoa(np)}, args...)...).Output()
	if err != nil {
		skipped = append(skipped, fmt.Sprintf("gloo: %v", err))
	}
	return parseCompetitor(bytes.NewReader(out)), skipped
}

// WriteComparison prints, for every collective the competitors ran,
// gorun's time beside theirs at each size: their time over ours (above 1:
// gorun is faster).
func WriteComparison(w io.Writer, ours []Result, theirs []Competitor, variant string) {
	var ops []string
	for _, c := range theirs {
		if !slices.Contains(ops, c.Op) {
			ops = append(ops, c.Op)
		}
	}
	for _, op := range ops {
		writeComparison(w, op, ours, theirs, variant)
	}
}

func writeComparison(w io.Writer, op string, ours []Result, theirs []Competitor, variant string) {
	fmt.Fprintf(w, "# %s against the competitors (variant %s): time in µs; ratio = their time / gorun's\n", op, variant)
	fmt.Fprintf(w, "# %3s %10s %10s %10s %7s %10s %7s %10s %7s\n", "np", "size(B)", "gorun", "gloo", "ratio", "mpi-tcp", "ratio", "mpi-shm", "ratio")
	find := func(name string, np int, b int64) (float64, bool) {
		for _, c := range theirs {
			if c.Name == name && c.Op == op && c.NP == np && c.Bytes == b {
				return c.TimeUS, true
			}
		}
		return 0, false
	}
	cell := func(v float64, ok bool, us float64) string {
		if !ok {
			return fmt.Sprintf("%10s %7s", "-", "-")
		}
		return fmt.Sprintf("%10.2f %6.2fx", v, v/us)
	}
	for _, r := range ours {
		if r.Op != op || r.Variant != variant {
			continue
		}
		g, gok := find("gloo", r.NP, r.Bytes)
		m, mok := find("mpi-tcp", r.NP, r.Bytes)
		v, vok := find("mpi-shm", r.NP, r.Bytes)
		fmt.Fprintf(w, "  %3d %10d %10.2f %s %s %s\n", r.NP, r.Bytes, r.TimeUS, cell(g, gok, r.TimeUS), cell(m, mok, r.TimeUS), cell(v, vok, r.TimeUS))
	}
}
