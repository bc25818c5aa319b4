package gpu

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/gorun/gorun/cuda"
	"github.com/gorun/gorun/model/amp"
	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/tensor"
)

// opened opens the GPU once per test binary with its options.
type opened struct {
	once sync.Once
	o    Options
	b    *Backend
	err  error
}

func (o *opened) get(t *testing.T) *Backend {
	t.Helper()
	o.once.Do(func() { o.b, o.err = New(o.o) })
	if o.err != nil {
		if errors.Is(o.err, cuda.ErrNoDriver) || errors.Is(o.err, cuda.ErrNoDevice) {
			t.Skipf("no GPU here: %v", o.err)
		}
		t.Fatal(o.err)
	}
	return o.b
}

func newOpened(o Options) *opened { return &opened{o: o} }

func TestPTXIsEmbedded(t *testing.T) {
	need, err := cuda.PTXNeeds(PTX())
	if err != nil {
		t.Fatal(err)
	}
	if need > 13000 {
		t.Errorf("the kernels need a driver for CUDA %s", need)
	}
	k := &kernels{}
	for name := range k.table() {
		if !containsEntry(PTX(), name) {
			t.Errorf("kernel %s is not in the embedded PTX (run go generate ./model/gpu)", name)
		}
	}
}

func containsEntry(ptx []byte, name string) bool {
	needle := []byte(".entry " + name + "(")
	for i := 0; i+len(needle) <= len(ptx); i++ {
		if string(ptx[i:i+len(needle)]) == string(needle) {
			return true
		}
	}
	return false
}

// parityCase runs op on the CPU backend and on the GPU with the same random
// tensors, then compares every tensor (inputs and outputs) and the
// returned value.
type parityCase struct {
	name   string
	shapes [][]int
	// prepare adjusts the random host tensors (e.g. positive variances).
	prepare func(ts []*tensor.Tensor)
	op      func(be tensor.Backend, ts []*tensor.Tensor) float32
	tol     float64
}

func conv(k, s, p int) tensor.ConvParams {
	return tensor.ConvParams{KernelH: k, KernelW: k, StrideH: s, StrideW: s, PadH: p, PadW: p}
}

func parityCases() []parityCase {
	var cs []parityCase
	for _, mm := range []struct {
		ta, tb      bool
		alpha, beta float32
	}{{false, false, 1, 0}, {true, false, 1, 1}, {false, true, 0.5, 0}, {true, true, 2, -1}} {
		m, n, k := 33, 47, 129
		as, bs := []int{m, k}, []int{k, n}
		if mm.ta {
			as = []int{k, m}
		}
		if mm.tb {
			bs = []int{n, k}
		}
		cs = append(cs, parityCase{name: "MatMul", shapes: [][]int{as, bs, {m, n}}, op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
			be.MatMul(ts[0], mm.ta, ts[1], mm.tb, ts[2], mm.alpha, mm.beta)
			return 0
		}})
	}
	cs = append(cs,
		parityCase{name: "AddBias4D", shapes: [][]int{{3, 5, 7, 6}, {5}}, op: func(be tensor.Backend, ts []*tensor.Tensor) float32 { be.AddBias(ts[0], ts[1]); return 0 }},
		parityCase{name: "AddBias2D", shapes: [][]int{{9, 13}, {13}}, op: func(be tensor.Backend, ts []*tensor.Tensor) float32 { be.AddBias(ts[0], ts[1]); return 0 }},
		parityCase{name: "BiasGrad", shapes: [][]int{{4, 6, 5, 5}, {6}}, op: func(be tensor.Backend, ts []*tensor.Tensor) float32 { be.BiasGrad(ts[0], ts[1]); return 0 }},
	)
	for _, cv := range []struct {
		name          string
		n, c, h, w, f int
		p             tensor.ConvParams
		bias, dx      bool
	}{
		{"3x3pad1", 4, 3, 12, 10, 8, conv(3, 1, 1), true, true},
		{"5x5", 3, 2, 14, 14, 5, conv(5, 1, 0), true, false},
		{"7x7s2p3", 2, 3, 17, 15, 6, conv(7, 2, 3), false, true},
		{"1x1s2", 3, 8, 9, 9, 4, conv(1, 2, 0), false, true},
		{"3x3s2p1", 5, 4, 8, 8, 7, conv(3, 2, 1), true, true},
	} {
		oh, ow := cv.p.OutSize(cv.h, cv.w)
		shapes := [][]int{{cv.n, cv.c, cv.h, cv.w}, {cv.f, cv.c, cv.p.KernelH, cv.p.KernelW}, {cv.f}, {cv.n, cv.f, oh, ow}, {cv.n, cv.f, oh, ow}, {cv.n, cv.c, cv.h, cv.w}, {cv.f, cv.c, cv.p.KernelH, cv.p.KernelW}, {cv.f}}
		cs = append(cs, parityCase{name: "Conv2d" + cv.name, shapes: shapes, op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
			bias, db, dx := ts[2], ts[7], ts[5]
			if !cv.bias {
				bias, db = nil, nil
			}
			if !cv.dx {
				dx = nil
			}
			be.Conv2d(ts[0], ts[1], bias, ts[3], cv.p)
			be.Conv2dBackward(ts[0], ts[1], ts[4], dx, ts[6], db, cv.p)
			return 0
		}})
	}
	for _, pl := range []struct {
		name string
		p    tensor.PoolParams
	}{{"2x2", conv(2, 2, 0)}, {"3x3s2p1", conv(3, 2, 1)}, {"3x3s1", conv(3, 1, 0)}} {
		h, w := 11, 10
		oh, ow := pl.p.OutSize(h, w)
		shapes := [][]int{{3, 4, h, w}, {3, 4, oh, ow}, {3, 4, oh, ow}, {3, 4, h, w}}
		cs = append(cs,
			parityCase{name: "MaxPool" + pl.name, shapes: shapes, op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
				be.MaxPool2d(ts[0], ts[1], pl.p)
				be.MaxPool2dBackward(ts[0], ts[2], ts[3], pl.p)
				return 0
			}},
			parityCase{name: "AvgPool" + pl.name, shapes: shapes, op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
				be.AvgPool2d(ts[0], ts[1], pl.p)
				be.AvgPool2dBackward(ts[2], ts[3], pl.p)
				return 0
			}})
	}
	for _, ad := range [][4]int{{7, 7, 1, 1}, {5, 9, 3, 4}} {
		shapes := [][]int{{2, 3, ad[0], ad[1]}, {2, 3, ad[2], ad[3]}, {2, 3, ad[2], ad[3]}, {2, 3, ad[0], ad[1]}}
		cs = append(cs, parityCase{name: "AdaptiveAvgPool", shapes: shapes, op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
			be.AdaptiveAvgPool2d(ts[0], ts[1])
			be.AdaptiveAvgPool2dBackward(ts[2], ts[3])
			return 0
		}})
	}
	for _, bn := range []struct {
		name     string
		x        []int
		training bool
	}{
		{"Train4D", []int{6, 5, 7, 7}, true}, {"Eval4D", []int{6, 5, 7, 7}, false}, {"Train2D", []int{16, 9}, true},
		// Planes of 256 or more elements (the _planes kernels): 3136 is
		// three full segments of 1024 and a partial one, and the channel's
		// 62,720 elements split into 7 parts that end mid-plane; 300 is
		// under one segment.
		{"Train4DLargePlanes", []int{20, 3, 56, 56}, true}, {"Eval4DLargePlanes", []int{20, 3, 56, 56}, false},
		{"Train4DPlanes300", []int{5, 4, 15, 20}, true},
	} {
		c := bn.x[1]
		// x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd, dy, dx, dgamma, dbeta
		shapes := [][]int{bn.x, bn.x, {c}, {c}, {c}, {c}, {c}, {c}, bn.x, bn.x, {c}, {c}}
		cs = append(cs, parityCase{name: "BatchNorm" + bn.name, shapes: shapes,
			prepare: func(ts []*tensor.Tensor) {
				for i := range ts[5].Data {
					ts[5].Data[i] = 0.5 + ts[5].Data[i]*ts[5].Data[i]
				}
			},
			op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
				p := tensor.BatchNormParams{Training: bn.training, Momentum: 0.1, Eps: 1e-5}
				be.BatchNorm(ts[0], ts[1], ts[2], ts[3], ts[4], ts[5], ts[6], ts[7], p)
				be.BatchNormBackward(ts[0], ts[8], ts[9], ts[2], ts[10], ts[11], ts[6], ts[7], p)
				return 0
			}})
		if bn.training {
			// A training pass, then one over the same x with its saved
			// statistics (a checkpoint's recomputation) into dx's place.
			cs = append(cs, parityCase{name: "BatchNormSavedStats" + bn.name, shapes: shapes, prepare: cs[len(cs)-1].prepare,
				op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
					p := tensor.BatchNormParams{Training: true, Momentum: 0.1, Eps: 1e-5}
					be.BatchNorm(ts[0], ts[1], ts[2], ts[3], ts[4], ts[5], ts[6], ts[7], p)
					p.SavedStats = true
					be.BatchNorm(ts[0], ts[9], ts[2], ts[3], ts[4], ts[5], ts[6], ts[7], p)
					return 0
				}})
		}
		if len(bn.x) == 4 {
			// The same with the relu fused in (both backends have it).
			cs = append(cs, parityCase{name: "BatchNormReLU" + bn.name, shapes: shapes, prepare: cs[len(cs)-1].prepare,
				op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
					f := be.(tensor.BatchNormReLUBackend)
					p := tensor.BatchNormParams{Training: bn.training, Momentum: 0.1, Eps: 1e-5}
					f.BatchNormReLU(ts[0], ts[1], ts[2], ts[3], ts[4], ts[5], ts[6], ts[7], p)
					f.BatchNormReLUBackward(ts[0], ts[8], ts[9], ts[2], ts[3], ts[10], ts[11], ts[6], ts[7], p)
					return 0
				}})
		}
	}
	ew := [][]int{{5, 7, 9, 11}, {5, 7, 9, 11}, {5, 7, 9, 11}}
	cs = append(cs,
		parityCase{name: "ReLU", shapes: ew, op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
			be.ReLU(ts[0], ts[1])
			be.ReLUBackward(ts[1], ts[2], ts[0])
			return 0
		}, tol: 1e-7},
		parityCase{name: "Dropout", shapes: ew, op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
			be.Dropout(ts[0], ts[1], ts[2], 0.3, 12345)
			return 0
		}, tol: 1e-7},
		parityCase{name: "AddReLU", shapes: append(ew, ew[0]), op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
			be.(tensor.AddReLUBackend).AddReLU(ts[0], ts[1], ts[2])
			return 0
		}, tol: 1e-7},
		parityCase{name: "MulAddCopyFill", shapes: append(ew, ew[0]), op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
			be.Mul(ts[0], ts[1], ts[2])
			be.Add(ts[2], ts[0], ts[2])
			be.Copy(ts[2], ts[3])
			be.Fill(ts[1], -1.25)
			return 0
		}, tol: 1e-7},
	)
	for _, c := range []int{10, 1000} {
		n := 37
		cs = append(cs, parityCase{name: "LogSoftmaxNLL", shapes: [][]int{{n, c}, {n, c}, {n, c}, {n, c}, {n, c}}, op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
			target := make([]int32, n)
			for i := range target {
				target[i] = int32((i * 7919) % c)
			}
			be.LogSoftmax(ts[0], ts[1])
			loss := be.NLLLoss(ts[1], target)
			be.NLLLossBackward(target, ts[2], 0.75)
			be.LogSoftmaxBackward(ts[1], ts[2], ts[3])
			return loss
		}})
	}
	p := [][]int{{1000, 3}, {1000, 3}, {1000, 3}, {1000, 3}}
	cs = append(cs,
		parityCase{name: "SGD", shapes: p, op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
			o := tensor.SGDOptions{LR: 0.1, Momentum: 0.9, Dampening: 0.1, WeightDecay: 1e-3}
			be.SGDStep(ts[0], ts[1], ts[2], o, true)
			be.SGDStep(ts[0], ts[1], ts[2], o, false)
			o.Dampening, o.Nesterov = 0, true
			be.SGDStep(ts[0], ts[1], ts[2], o, false)
			be.SGDStep(ts[3], ts[1], nil, tensor.SGDOptions{LR: 0.01}, true)
			return 0
		}},
		parityCase{name: "Adam", shapes: p, prepare: positive(3), op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
			o := tensor.AdamOptions{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 1e-2}
			be.AdamStep(ts[0], ts[1], ts[2], ts[3], o, 1)
			be.AdamStep(ts[0], ts[1], ts[2], ts[3], o, 7)
			return 0
		}},
		parityCase{name: "Adadelta", shapes: p, prepare: positive(2, 3), op: func(be tensor.Backend, ts []*tensor.Tensor) float32 {
			o := tensor.AdadeltaOptions{LR: 1, Rho: 0.9, Eps: 1e-6, WeightDecay: 1e-3}
			be.AdadeltaStep(ts[0], ts[1], ts[2], ts[3], o)
			be.AdadeltaStep(ts[0], ts[1], ts[2], ts[3], o)
			return 0
		}},
	)
	return cs
}

// positive makes the listed tensors' elements positive (second moments).
func positive(idx ...int) func([]*tensor.Tensor) {
	return func(ts []*tensor.Tensor) {
		for _, i := range idx {
			for j, v := range ts[i].Data {
				ts[i].Data[j] = v * v
			}
		}
	}
}

// gpuOnce is the default backend (cuDNN's convolutions where the library
// is installed), im2colOnce the one with our own.
var gpuOnce, im2colOnce = newOpened(Options{}), newOpened(Options{Convolutions: ConvIm2col})

// TestParity runs every backend operation on the CPU and the GPU with
// fresh random inputs and compares all tensors: relative error under 1e-4
// in FP32 (TF32 is off here). The convolutions run both ways: as the
// default backend runs them and as im2col.
func TestParity(t *testing.T) {
	for _, be := range []struct {
		name string
		gpu  *opened
		only string
	}{{"default", gpuOnce, ""}, {"im2col", im2colOnce, "Conv2d"}} {
		t.Run(be.name, func(t *testing.T) {
			g := be.gpu.get(t)
			t.Logf("%s", g.Name())
			parity(t, g, be.only)
		})
	}
}

// parity runs the cases whose names start with prefix on g and on the CPU.
func parity(t *testing.T, g *Backend, prefix string) {
	compare(t, g, cpu.New(2), nil, prefix, 0)
}

// compare runs the cases whose names start with prefix on g and on ref
// and compares every tensor and the returned value: relative difference
// at most tol (0: the case's own, else 1e-4). With other (a backend
// computing differently, e.g. in float32 where ref rounds to 16 bits),
// g's results must also lie closer to ref's than to other's.
func compare(t *testing.T, g *Backend, ref, other tensor.Backend, prefix string, tol float64) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for _, c := range parityCases() {
		if !strings.HasPrefix(c.name, prefix) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			host := make([]*tensor.Tensor, len(c.shapes))
			for i, sh := range c.shapes {
				host[i] = tensor.New(sh...)
				for j := range host[i].Data {
					host[i].Data[j] = float32(rng.NormFloat64())
				}
			}
			if c.prepare != nil {
				c.prepare(host)
			}
			clone := func() []*tensor.Tensor {
				ts := make([]*tensor.Tensor, len(host))
				for i, h := range host {
					ts[i] = tensor.New(h.Shape...)
					copy(ts[i].Data, h.Data)
				}
				return ts
			}
			dev := make([]*tensor.Tensor, len(host))
			for i := range host {
				dev[i] = tensor.NewOn(g.Device(), host[i].Shape...)
				dev[i].SetHostData(host[i].Data)
			}
			var far []*tensor.Tensor
			if other != nil {
				far = clone()
				c.op(other, far)
			}
			want := c.op(ref, host)
			got := c.op(g, dev)
			if err := g.Synchronize(); err != nil {
				t.Fatal(err)
			}
			tol := tol
			if tol == 0 {
				tol = c.tol
			}
			if tol == 0 {
				tol = 1e-4
			}
			for i := range host {
				gi := dev[i].HostData()
				d := tensor.RelDiff(gi, host[i].Data, 1e-6)
				if d > tol || d != d {
					t.Errorf("tensor %d %s: relative difference %.3g (tolerance %.0g)", i, host[i], d, tol)
				}
				if far != nil {
					if dFar := tensor.RelDiff(gi, far[i].Data, 1e-6); dFar > 0 && dFar <= d {
						t.Errorf("tensor %d %s: %.3g from the reference but %.3g from the other backend's", i, host[i], d, dFar)
					}
				}
			}
			if d := tensor.RelDiff([]float32{got}, []float32{want}, 1e-6); d > tol || d != d {
				t.Errorf("returned %v, CPU %v", got, want)
			}
		})
	}
}

// TestAutocastParity: under autocast the GPU's matrix products and
// convolutions (forward and both gradients) give amp.Autocast's numbers
// on the CPU — the same rounding to 16 bits — within a tolerance of about
// one 16-bit unit in the last place (bf16 2^-8 ≈ 4e-3, fp16 2^-11 ≈ 5e-4
// relative), and lie closer to them than to float32's. Most results agree
// far closer; a convolution with a bias does not: cuDNN's 16-bit output
// is rounded before the rounded bias is added and the sum rounded again
// (PyTorch's order on a GPU), where the emulation rounds once — half a
// unit on many elements (0.3% measured on one small case).
func TestAutocastParity(t *testing.T) {
	for _, c := range []struct {
		p    amp.Precision
		gpu  *opened
		tol  float64
		name string
	}{{amp.BF16, bf16Once, 5e-3, "bf16"}, {amp.FP16, fp16Once, 8e-4, "fp16"}} {
		t.Run(c.name, func(t *testing.T) {
			g := c.gpu.get(t)
			t.Logf("%s", g.Name())
			ref, err := amp.NewAutocast(cpu.New(2), c.p)
			if err != nil {
				t.Fatal(err)
			}
			for _, prefix := range []string{"MatMul", "Conv2d"} {
				compare(t, g, ref, cpu.New(2), prefix, c.tol)
			}
		})
	}
}

// bf16Once and fp16Once are backends autocasting to bf16 and fp16.
var bf16Once, fp16Once = newOpened(Options{Autocast: "bf16"}), newOpened(Options{Autocast: "fp16"})

// TestFusedReLUIsSeparate: on the GPU, batch norm with its relu fused in
// gives the bits of BatchNorm then ReLU, and of ReLUBackward then
// BatchNormBackward (tensor.BatchNormReLUBackend's promise); AddReLU those
// of Add then ReLU.
func TestFusedReLUIsSeparate(t *testing.T) {
	g := gpuOnce.get(t)
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for _, shape := range [][]int{{6, 5, 7, 7}, {20, 3, 56, 56}} {
		c := shape[1]
		random := func(sh ...int) *tensor.Tensor {
			h := tensor.New(sh...)
			for i := range h.Data {
				h.Data[i] = float32(rng.NormFloat64())
			}
			d := tensor.NewOn(g.Device(), sh...)
			d.SetHostData(h.Data)
			return d
		}
		x, dy, gamma, beta, short := random(shape...), random(shape...), random(c), random(c), random(shape...)
		type run struct{ y, dx, dgamma, dbeta, sum *tensor.Tensor }
		runs := [2]run{}
		for i := range runs {
			r := run{tensor.NewOn(g.Device(), shape...), tensor.NewOn(g.Device(), shape...), tensor.NewOn(g.Device(), c), tensor.NewOn(g.Device(), c), tensor.NewOn(g.Device(), shape...)}
			runMean, runVar, mean, invStd := tensor.NewOn(g.Device(), c), tensor.NewOn(g.Device(), c), tensor.NewOn(g.Device(), c), tensor.NewOn(g.Device(), c)
			g.Fill(runVar, 1)
			p := tensor.BatchNormParams{Training: true, Momentum: 0.1, Eps: 1e-5}
			if i == 0 {
				g.BatchNorm(x, r.y, gamma, beta, runMean, runVar, mean, invStd, p)
				g.ReLU(r.y, r.y)
				masked := tensor.NewOn(g.Device(), shape...)
				g.ReLUBackward(r.y, dy, masked)
				g.BatchNormBackward(x, masked, r.dx, gamma, r.dgamma, r.dbeta, mean, invStd, p)
				g.Add(x, short, r.sum)
				g.ReLU(r.sum, r.sum)
			} else {
				g.BatchNormReLU(x, r.y, gamma, beta, runMean, runVar, mean, invStd, p)
				g.BatchNormReLUBackward(x, dy, r.dx, gamma, beta, r.dgamma, r.dbeta, mean, invStd, p)
				g.AddReLU(x, short, r.sum)
			}
			runs[i] = r
		}
		if err := g.Synchronize(); err != nil {
			t.Fatal(err)
		}
		for _, o := range []struct {
			name string
			a, b *tensor.Tensor
		}{{"y", runs[0].y, runs[1].y}, {"dx", runs[0].dx, runs[1].dx}, {"dgamma", runs[0].dgamma, runs[1].dgamma},
			{"dbeta", runs[0].dbeta, runs[1].dbeta}, {"relu(x + short)", runs[0].sum, runs[1].sum}} {
			sep, fused := o.a.HostData(), o.b.HostData()
			for i := range sep {
				if math.Float32bits(sep[i]) != math.Float32bits(fused[i]) {
					t.Errorf("%v: %s[%d] fused %v, separate %v", shape, o.name, i, fused[i], sep[i])
					break
				}
			}
		}
	}
}

// TestLaunchAllocations: a kernel launch makes two raw driver calls
// (context, launch), each allocating once inside purego; nothing else of
// the backend allocates.
func TestLaunchAllocations(t *testing.T) {
	g := gpuOnce.get(t)
	x := tensor.NewOn(g.Device(), 1000)
	y := tensor.NewOn(g.Device(), 1000)
	a := testing.AllocsPerRun(200, func() { g.ReLU(x, y) })
	f := testing.AllocsPerRun(200, func() { g.Fill(y, 1) })
	if err := g.Synchronize(); err != nil {
		t.Fatal(err)
	}
	t.Logf("allocations: %.1f per ReLU launch, %.1f per Fill", a, f)
	if a > 2 || f > 2 {
		t.Errorf("%.1f allocations per launch and %.1f per fill; want at most 2 (one per raw driver call)", a, f)
	}
}

func TestCuDNNVersion(t *testing.T) {
	for _, c := range []struct {
		v    int
		want string
	}{{91400, "9.14.0"}, {90100, "9.1.0"}, {8907, "8.9.7"}, {8600, "8.6.0"}} {
		if got := cudnnVersion(c.v); got != c.want {
			t.Errorf("cudnnVersion(%d) = %s, want %s", c.v, got, c.want)
		}
	}
}

// TestConvolutionChoice: an unknown choice is refused before the GPU is
// touched; asking for cuDNN gives its convolutions or an error saying it
// is missing; im2col is named as chosen.
func TestConvolutionChoice(t *testing.T) {
	if _, err := NewOn(nil, Options{Convolutions: "winograd"}); err == nil || !strings.Contains(err.Error(), `"winograd"`) {
		t.Errorf("an unknown choice: error %v, want one naming it", err)
	}
	g := im2colOnce.get(t)
	if name := g.Name(); !strings.Contains(name, "im2col convolutions (chosen)") {
		t.Errorf("im2col backend named %q", name)
	}
	b, err := New(Options{Convolutions: ConvCuDNN})
	switch {
	case err != nil && !strings.Contains(err.Error(), "convolutions in cuDNN"):
		t.Errorf("cuDNN asked for: %v", err)
	case err != nil:
		t.Logf("no cuDNN here: %v", err)
	default:
		if name := b.Name(); !strings.Contains(name, "cuDNN") {
			t.Errorf("cuDNN backend named %q", name)
		}
		t.Log(b.Name())
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestAutocastChoice: an unknown autocast format, and autocast with our
// own im2col convolutions, are refused before the GPU is touched, naming
// what was asked.
func TestAutocastChoice(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Autocast: "fp8"}, `autocast to "fp8": want bf16 or fp16`},
		{Options{Autocast: "bf16", Convolutions: ConvIm2col}, "autocast to bf16 runs its convolutions in cuDNN, not im2col"},
	} {
		if _, err := NewOn(nil, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one containing %q", c.o, err, c.want)
		}
	}
}
