package train

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/commtest"
	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/zoo"
)

// TestArrivalDelays: rank 1 of 2 is slowed on purpose by 100 ms before
// every step's gradient all-reduce; the DDP reports it about that late
// and rank 0, which the other waited for never, 0. The delay is measured
// against rank 0's own arrival, which a loaded machine (the race
// detector, CI's 2 cores) postpones by up to tens of milliseconds: the
// bounds allow half to four times the sleep.
func TestArrivalDelays(t *testing.T) {
	const slow = 100 * time.Millisecond
	gs := commtest.Groups(t, 2)
	delays := make([][]time.Duration, 2)
	commtest.EachRank(t, gs, func(g *comm.Group) error {
		be := cpu.New(1)
		defer be.Close()
		m := zoo.MNISTNet(be, rand.New(rand.NewPCG(1, 2)))
		ctx := context.Background()
		d, err := NewDDP(ctx, g, m.Net, be)
		if err != nil {
			return err
		}
		defer d.Close()
		for range 6 {
			if g.Rank() == 1 {
				time.Sleep(slow)
			}
			d.BeginStep(true)
			if _, err := d.Finish(); err != nil {
				return err
			}
		}
		delays[g.Rank()], err = d.ArrivalDelays(ctx)
		return err
	})
	for r, ds := range delays {
		if ds[0] != 0 {
			t.Errorf("rank %d: rank 0, never late, has delay %v", r, ds[0])
		}
		if ds[1] < slow/2 || ds[1] > 4*slow {
			t.Errorf("rank %d: rank 1, %v late every step, has delay %v", r, slow, ds[1])
		}
	}
}
