package train

import (
	"context"
	"math/rand/v2"
	"testing"

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
