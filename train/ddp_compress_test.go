package train

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/commtest"
	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
)

// TestDDPGradientCompression: with bf16 or fp16 compression, every rank
// ends with the same gradients: each rank's gradient rounded to 16 bits,
// the average taken in float32 and rounded once, widened back — and half
// the bytes of float32 on the wire. An unknown kind is an error.
func TestDDPGradientCompression(t *testing.T) {
	for _, kind := range []string{"none", "bf16", "fp16"} {
		t.Run(kind, func(t *testing.T) {
			gs := commtest.Groups(t, 2)
			grads := make([][]float32, 2)
			wire := make([]int64, 2)
			values := func(r int) []float32 {
				rng := rand.New(rand.NewPCG(uint64(r), 9))
				v := make([]float32, 5*7+7)
				for i := range v {
					v[i] = rng.Float32()*2 - 1
				}
				return v
			}
			commtest.EachRank(t, gs, func(g *comm.Group) error {
				be := cpu.New(1)
				defer be.Close()
				net := nn.NewSequential(nn.NewLinear(be, 5, 7, rand.New(rand.NewPCG(1, 1))))
				d, err := NewDDP(context.Background(), g, net, be)
				if err != nil {
					return err
				}
				defer d.Close()
				if err := d.SetCompression(kind); err != nil {
					return err
				}
				v, k := values(g.Rank()), 0
				for _, p := range nn.Params(net) {
					k += copy(p.Grad.Data, v[k:])
				}
				d.BeginStep(true)
				if _, err := d.Finish(); err != nil {
					return err
				}
				for _, p := range nn.Params(net) {
					grads[g.Rank()] = append(grads[g.Rank()], p.Grad.Data...)
				}
				wire[g.Rank()] = d.WireBytes()
				return nil
			})
			a, b := values(0), values(1)
			// Params are listed weight then bias; so were the values.
			for i := range a {
				var want float32
				switch kind {
				case "bf16":
					want = comm.NewBFloat16((comm.NewBFloat16(a[i]).Float32() + comm.NewBFloat16(b[i]).Float32()) / 2).Float32()
				case "fp16":
					want = comm.NewFloat16((comm.NewFloat16(a[i]).Float32() + comm.NewFloat16(b[i]).Float32()) / 2).Float32()
				default:
					want = (a[i] + b[i]) / 2
				}
				for r := range 2 {
					if grads[r][i] != want {
						t.Fatalf("rank %d gradient %d: %v, want %v", r, i, grads[r][i], want)
					}
				}
			}
			perElem := int64(4)
			if kind != "none" {
				perElem = 2
			}
			if wire[0] != perElem*int64(len(a)) {
				t.Errorf("%d bytes on the wire for %d gradients, want %d", wire[0], len(a), perElem*int64(len(a)))
			}
		})
	}
	d := &DDP{}
	if err := d.SetCompression("zstd"); err == nil || !strings.Contains(err.Error(), "want none, bf16 or fp16") {
		t.Errorf("SetCompression(zstd): %v", err)
	}
}
