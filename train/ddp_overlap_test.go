package train

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/commtest"
	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/model/zoo"
)

// TestDDPReducesDuringBackward: for every zoo model family — plain
// chains, residual blocks with downsampling chains inside them, and
// blocks under activation checkpointing — every gradient bucket's
// all-reduce has started by the time the network's backward returns, so
// communication overlaps backward instead of all waiting for Finish.
// (Residual blocks' inner chains once reported their parameters a second
// time, which turned the overlap off for every ResNet.)
func TestDDPReducesDuringBackward(t *testing.T) {
	for _, tc := range []struct {
		model     string
		recompute bool
	}{
		{"mnist", false},
		{"cifarnet", false},
		{"resnet18", false},
		{"resnet18", true},
	} {
		name := tc.model
		if tc.recompute {
			name += "-recompute"
		}
		t.Run(name, func(t *testing.T) {
			gs := commtest.Groups(t, 1)
			commtest.EachRank(t, gs, func(g *comm.Group) error {
				be := cpu.New(1)
				defer be.Close()
				spec, err := zoo.Lookup(tc.model)
				if err != nil {
					return err
				}
				spec.Recompute = tc.recompute
				m := spec.Build(be, 1)
				d, err := NewDDP(context.Background(), g, m.Net, be)
				if err != nil {
					return err
				}
				defer d.Close()
				const batch = 2
				x := tensor.New(append([]int{batch}, m.Input...)...)
				rng := rand.New(rand.NewPCG(3, 4))
				for i := range x.Data {
					x.Data[i] = rng.Float32()
				}
				y, err := m.Net.Forward(x)
				if err != nil {
					return err
				}
				loss := m.NewLoss(be)
				if _, err := loss.Forward(y, []int32{1, 0}); err != nil {
					return err
				}
				d.BeginStep(true)
				dy, err := loss.Backward()
				if err != nil {
					return err
				}
				if _, err := m.Net.Backward(dy); err != nil {
					return err
				}
				for _, b := range d.buckets {
					if b.work == nil {
						t.Errorf("bucket %d of %d (%d parameters) had not started when backward returned", b.index, len(d.buckets), b.params)
					}
				}
				_, err = d.Finish()
				return err
			})
		})
	}
}

// TestDDPFailedWaitCounted: a rank whose gradient all-reduce fails after
// waiting for a peer that never arrives counts that wait as exposed
// communication, so that the time breakdown the trainer prints on its
// way out puts it under all-reduce, not "other".
func TestDDPFailedWaitCounted(t *testing.T) {
	const timeout = 400 * time.Millisecond
	gs := commtest.Groups(t, 2, comm.WithTimeout(timeout), comm.WithStallAfter(0))
	done := make(chan struct{})
	commtest.EachRank(t, gs, func(g *comm.Group) error {
		be := cpu.New(1)
		defer be.Close()
		spec, err := zoo.Lookup("mnist")
		if err != nil {
			return err
		}
		m := spec.Build(be, 1)
		d, err := NewDDP(context.Background(), g, m.Net, be)
		if err != nil {
			return err
		}
		defer d.Close()
		if g.Rank() == 1 {
			<-done // never takes the step
			return nil
		}
		defer close(done)
		d.BeginStep(true)
		waited, err := d.Finish() // every bucket, without a backward
		if err == nil {
			return errors.New("Finish succeeded without rank 1")
		}
		if busy, exposed := d.CommTimes(); waited < timeout || exposed != waited || busy < timeout {
			return fmt.Errorf("Finish failed (%v) after %v; exposed communication %v, want the wait, at least %v; the all-reduces ran %v, want the failed one's time too", err, waited, exposed, timeout, busy)
		}
		return nil
	})
}
