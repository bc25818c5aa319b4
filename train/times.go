package train

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/train/report"
)

// Times is where a run's time went.
type Times struct {
	Data       time.Duration // waiting for the loader
	Forward    time.Duration // forward pass and loss
	Backward   time.Duration
	Optimizer  time.Duration // the update and zeroing the gradients
	Eval       time.Duration
	Checkpoint time.Duration
	Total      time.Duration
	// Comm is the time gradient all-reduces ran (DDP); CommExposed the
	// time steps waited for them after backward. The rest was hidden
	// behind backward.
	Comm, CommExposed time.Duration
}

// Print writes the breakdown, seed 004's profile in a table:
//
//	Training time = 92.31 s
//	  data         0.41 s   0.4%
//	  forward     30.12 s  32.6%
//	  ...
func (t Times) Print(w io.Writer) {
	fmt.Fprintf(w, "Training time = %.2f s\n", t.Total.Seconds())
	rows := []struct {
		name string
		d    time.Duration
	}{{"data", t.Data}, {"forward", t.Forward}, {"backward", t.Backward}, {"all-reduce", t.CommExposed}, {"optimizer", t.Optimizer}, {"evaluation", t.Eval}, {"checkpoint", t.Checkpoint}}
	var sum time.Duration
	for _, r := range rows {
		sum += r.d
		fmt.Fprintf(w, "  %-11s %8.2f s %5.1f%%\n", r.name, r.d.Seconds(), 100*r.d.Seconds()/max(t.Total.Seconds(), 1e-9))
	}
	other := t.Total - sum
	fmt.Fprintf(w, "  %-11s %8.2f s %5.1f%%\n", "other", other.Seconds(), 100*other.Seconds()/max(t.Total.Seconds(), 1e-9))
	if t.Comm > 0 {
		hidden := max(t.Comm-t.CommExposed, 0)
		fmt.Fprintf(w, "Gradient all-reduce ran %.2f s: %.2f s (%.0f%%) hidden behind backward, %.2f s waited for\n",
			t.Comm.Seconds(), hidden.Seconds(), 100*hidden.Seconds()/t.Comm.Seconds(), t.CommExposed.Seconds())
	}
}

// epochTimes is the time breakdown since before (the run's times when
// an epoch began), for the epoch's report; the all-reduce parts only in
// data-parallel runs. (A group made anew after a lost rank counts its
// all-reduces from zero again: in the epoch that happens they are
// reported as no less than zero.)
func (t *Trainer) epochTimes(before Times) []report.Part {
	now := t.times
	now.Comm, now.CommExposed = t.sync.commTimes()
	delta := func(a, b time.Duration) float64 { return max(a-b, 0).Seconds() }
	parts := []report.Part{
		{Name: "data", Seconds: delta(now.Data, before.Data)},
		{Name: "forward", Seconds: delta(now.Forward, before.Forward)},
		{Name: "backward", Seconds: delta(now.Backward, before.Backward)},
		{Name: "optimizer", Seconds: delta(now.Optimizer, before.Optimizer)},
		{Name: "evaluation", Seconds: delta(now.Eval, before.Eval)},
		{Name: "checkpoint", Seconds: delta(now.Checkpoint, before.Checkpoint)},
	}
	if t.sync.world() > 1 {
		parts = append(parts, report.Part{Name: "allreduce", Seconds: delta(now.Comm, before.Comm)},
			report.Part{Name: "allreduce_wait", Seconds: delta(now.CommExposed, before.CommExposed)})
	}
	return parts
}

// PeakRSS returns the process's peak resident memory in bytes (VmHWM on
// Linux), or 0 where unknown.
func PeakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}
