package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

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
	for _, tc := range []struct{ kind, want string }{
		{"zstd", "want none, bf16, fp16 or powersgd:RANK"},
		{"powersgd:0", "the rank after powersgd: must be a whole number ≥ 1"},
		{"powersgd:x", "the rank after powersgd: must be a whole number ≥ 1"},
		{"powersgd:2:-1", "the start step after the rank must be a whole number ≥ 0"},
	} {
		if err := d.SetCompression(tc.kind); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetCompression(%s): %v, want an error saying %q", tc.kind, err, tc.want)
		}
	}
}

// TestPowerSGD: over 4 steps of different gradients on 2 ranks, a
// Linear layer's 16×24 weight gradient (compressed at rank 2) and its
// bias (uncompressed) come out on every rank as the sequential reference
// computes them in float64 from the definition — P = avg(Mᵢ·Q),
// orthonormalized, Q = avg(Mᵢᵀ·P), M ≈ P·Qᵀ, Mᵢ the gradient plus the
// error feedback, the next Q warm-started — within float32 rounding; the
// bias is the plain average; P, Q and the bias are all that travel. With
// START 2, the first two steps are plain averages.
func TestPowerSGD(t *testing.T) {
	const rows, cols, r, steps = 16, 24, 2, 4
	for _, start := range []int{0, 2} {
		t.Run(fmt.Sprintf("start=%d", start), func(t *testing.T) {
			gs := commtest.Groups(t, 2)
			grad := func(rank, step int) []float32 { // the weight's then the bias's
				rng := rand.New(rand.NewPCG(uint64(rank), uint64(step)))
				v := make([]float32, rows*cols+rows)
				for i := range v {
					v[i] = rng.Float32()*2 - 1
				}
				return v
			}
			got := make([][][]float32, 2) // by rank, by step
			wire := make([]int64, 2)
			var q0 []float32
			commtest.EachRank(t, gs, func(g *comm.Group) error {
				be := cpu.New(1)
				defer be.Close()
				net := nn.NewSequential(nn.NewLinear(be, cols, rows, rand.New(rand.NewPCG(1, 1))))
				d, err := NewDDP(context.Background(), g, net, be)
				if err != nil {
					return err
				}
				defer d.Close()
				if err := d.SetCompression(fmt.Sprintf("powersgd:%d:%d", r, start)); err != nil {
					return err
				}
				if g.Rank() == 0 {
					q0 = append([]float32(nil), d.psgd.buckets[0].mats[0].q...)
				}
				for step := range steps {
					v, k := grad(g.Rank(), step), 0
					for _, p := range nn.Params(net) {
						k += copy(p.Grad.Data, v[k:])
					}
					d.BeginStep(true)
					if _, err := d.Finish(); err != nil {
						return err
					}
					var out []float32
					for _, p := range nn.Params(net) {
						out = append(out, p.Grad.Data...)
					}
					got[g.Rank()] = append(got[g.Rank()], out)
				}
				wire[g.Rank()] = d.WireBytes()
				// The time the reductions ran is a span of this test, not
				// an interval from a zero time (a Work's start read before
				// it began).
				if busy, _ := d.CommTimes(); busy <= 0 || busy > time.Minute {
					return fmt.Errorf("rank %d: gradient reductions ran %v", g.Rank(), busy)
				}
				return nil
			})
			// The reference, in float64.
			q := make([]float64, cols*r)
			for i, v := range q0 {
				q[i] = float64(v)
			}
			errs := [2][]float64{make([]float64, rows*cols), make([]float64, rows*cols)}
			for step := range steps {
				in := [2][]float32{grad(0, step), grad(1, step)}
				want := make([]float64, rows*cols+rows)
				for i := range want {
					want[i] = (float64(in[0][i]) + float64(in[1][i])) / 2
				}
				if step >= start {
					var m [2][]float64
					for k := range 2 {
						m[k] = make([]float64, rows*cols)
						for i := range m[k] {
							m[k][i] = float64(in[k][i]) + errs[k][i]
						}
					}
					p := make([]float64, rows*r)
					for k := range 2 {
						for i := range rows {
							for c := range r {
								for j := range cols {
									p[i*r+c] += m[k][i*cols+j] * q[j*r+c] / 2
								}
							}
						}
					}
					for c := range r { // Gram–Schmidt
						for c2 := range c {
							var dot float64
							for i := range rows {
								dot += p[i*r+c] * p[i*r+c2]
							}
							for i := range rows {
								p[i*r+c] -= dot * p[i*r+c2]
							}
						}
						var norm float64
						for i := range rows {
							norm += p[i*r+c] * p[i*r+c]
						}
						for i := range rows {
							p[i*r+c] /= math.Sqrt(norm)
						}
					}
					clear(q)
					for k := range 2 {
						for j := range cols {
							for c := range r {
								for i := range rows {
									q[j*r+c] += m[k][i*cols+j] * p[i*r+c] / 2
								}
							}
						}
					}
					for i := range rows {
						for j := range cols {
							var a float64
							for c := range r {
								a += p[i*r+c] * q[j*r+c]
							}
							want[i*cols+j] = a
							for k := range 2 {
								errs[k][i*cols+j] = m[k][i*cols+j] - a
							}
						}
					}
				}
				for rank := range 2 {
					for i, w := range want {
						if d := math.Abs(float64(got[rank][step][i]) - w); d > 1e-4*(1+math.Abs(w)) {
							t.Fatalf("step %d, rank %d, gradient %d: %v, want %v", step, rank, i, got[rank][step][i], w)
						}
					}
				}
				if i := slices.Compare(got[0][step], got[1][step]); i != 0 {
					t.Fatalf("step %d: the ranks' gradients differ", step)
				}
			}
			plain, compressed := int64(4*(rows*cols+rows)), int64(4*(rows*r+rows+cols*r))
			if want := int64(start)*plain + int64(steps-start)*compressed; wire[0] != want {
				t.Errorf("%d bytes on the wire, want %d", wire[0], want)
			}
		})
	}
}
