package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/commtest"
	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/train/data"
	"github.com/gorun/gorun/train/report"
)

// epochRecorder keeps the epochs reported.
type epochRecorder struct{ epochs []report.Epoch }

func (r *epochRecorder) Step(report.Step) error     { return nil }
func (r *epochRecorder) Epoch(e report.Epoch) error { r.epochs = append(r.epochs, e); return nil }
func (r *epochRecorder) Close() error               { return nil }

// TestEpochTimes: each epoch's report carries its own time breakdown —
// not the run's so far — with the gradient all-reduce's time and wait in
// a data-parallel run (two ranks) and without them alone; the parts fit
// within the epoch.
func TestEpochTimes(t *testing.T) {
	run := func(g *comm.Group) ([]report.Epoch, Times, error) {
		cfg, err := Defaults("mnist")
		if err != nil {
			return nil, Times{}, err
		}
		cfg.Epochs, cfg.Threads, cfg.BatchSize = 2, 1, 32
		tr, _ := data.Synthetic(data.FormatMNIST, 256, 1)
		te, _ := data.Synthetic(data.FormatMNIST, 64, 2)
		be := cpu.New(1)
		defer be.Close()
		var opts []Option
		if g != nil {
			opts = append(opts, WithGroup(g))
		}
		trainer, err := New(context.Background(), cfg, be, tr, te, opts...)
		if err != nil {
			return nil, Times{}, err
		}
		defer trainer.Close()
		rec := &epochRecorder{}
		trainer.Report = rec
		err = trainer.Run(context.Background())
		return rec.epochs, trainer.Times(), err
	}
	check := func(t *testing.T, epochs []report.Epoch, total Times, world int) {
		t.Helper()
		want := []string{"data", "forward", "backward", "optimizer", "evaluation", "checkpoint"}
		if world > 1 {
			want = append(want, "allreduce", "allreduce_wait")
		}
		if len(epochs) != 2 {
			t.Fatalf("%d epochs reported", len(epochs))
		}
		for _, e := range epochs {
			if len(e.Times) != len(want) {
				t.Fatalf("epoch %d: parts %+v, want %v", e.Epoch, e.Times, want)
			}
			sum := 0.0
			got := map[string]float64{}
			for i, p := range e.Times {
				if p.Name != want[i] || p.Seconds < 0 {
					t.Fatalf("epoch %d: part %d %+v, want %s", e.Epoch, i, p, want[i])
				}
				got[p.Name] = p.Seconds
				if !(p.Name == "allreduce" || p.Name == "allreduce_wait") {
					sum += p.Seconds
				}
			}
			// Training (not evaluation) is in e.Seconds; evaluation comes after.
			if got["forward"] <= 0 || got["backward"] <= 0 || sum-got["evaluation"] > e.Seconds*1.01 || got["evaluation"] <= 0 {
				t.Errorf("epoch %d (%.3f s): parts %+v", e.Epoch, e.Seconds, e.Times)
			}
			if world > 1 && (got["allreduce"] <= 0 || got["allreduce_wait"] > got["allreduce"]) {
				t.Errorf("epoch %d: all-reduce %v s, waited %v s", e.Epoch, got["allreduce"], got["allreduce_wait"])
			}
		}
		// Per epoch, not cumulative: the epochs' parts add up to the
		// run's.
		for i, whole := range []time.Duration{total.Data, total.Forward, total.Backward, total.Optimizer, total.Eval} {
			if sum := epochs[0].Times[i].Seconds + epochs[1].Times[i].Seconds; math.Abs(sum-whole.Seconds()) > 1e-6 {
				t.Errorf("%s: the epochs' %v s and %v s against the run's %v", want[i], epochs[0].Times[i].Seconds, epochs[1].Times[i].Seconds, whole)
			}
		}
		if world > 1 {
			if sum := epochs[0].Times[6].Seconds + epochs[1].Times[6].Seconds; math.Abs(sum-total.Comm.Seconds()) > 1e-6 {
				t.Errorf("all-reduce: the epochs' %v s against the run's %v", sum, total.Comm)
			}
		}
	}
	t.Run("alone", func(t *testing.T) {
		epochs, total, err := run(nil)
		if err != nil {
			t.Fatal(err)
		}
		check(t, epochs, total, 1)
	})
	t.Run("ddp", func(t *testing.T) {
		gs := commtest.Groups(t, 2)
		got, totals := make([][]report.Epoch, 2), make([]Times, 2)
		commtest.EachRank(t, gs, func(g *comm.Group) error {
			var err error
			got[g.Rank()], totals[g.Rank()], err = run(g)
			return err
		})
		for r := range got {
			check(t, got[r], totals[r], 2)
		}
	})
}

// TestFailedRunTimes: a run that fails waiting in a gradient all-reduce
// for a rank that never takes its step still has its times, with that
// wait under the all-reduce (the trainer prints them on its way out; the
// wait used to show as "other").
func TestFailedRunTimes(t *testing.T) {
	const timeout = 500 * time.Millisecond
	gs := commtest.Groups(t, 2, comm.WithTimeout(timeout), comm.WithStallAfter(0))
	done := make(chan struct{})
	commtest.EachRank(t, gs, func(g *comm.Group) error {
		cfg, err := Defaults("mnist")
		if err != nil {
			return err
		}
		cfg.Epochs, cfg.Threads, cfg.BatchSize = 1, 1, 32
		tr, _ := data.Synthetic(data.FormatMNIST, 256, 1)
		te, _ := data.Synthetic(data.FormatMNIST, 64, 2)
		be := cpu.New(1)
		defer be.Close()
		trainer, err := New(context.Background(), cfg, be, tr, te, WithGroup(g))
		if err != nil {
			return err
		}
		defer trainer.Close()
		if g.Rank() == 1 {
			// Takes part in Run's check of the settings, then never trains.
			if err := g.CheckSame(context.Background(), trainer.runSchedule()); err != nil {
				return err
			}
			<-done
			return nil
		}
		defer close(done)
		if err := trainer.Run(context.Background()); err == nil {
			return errors.New("the run succeeded without rank 1")
		}
		// The bucket's all-reduce started during backward; the transport
		// gave up 500 ms after that, most of it waited in Finish.
		times := trainer.Times()
		if times.CommExposed < timeout/2 || times.CommExposed > times.Total {
			return fmt.Errorf("the failed run's times: all-reduce waited %v of %v, want most of the %v the last all-reduce took", times.CommExposed, times.Total, timeout)
		}
		return nil
	})
}
