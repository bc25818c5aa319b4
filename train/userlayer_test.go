package train_test

// A layer and a container defined outside model/nn, as a user's own code
// would define them, must work everywhere the built-in layers do: in a
// Chain, ZeroGrad, replicas, device moves, state files, DDP and pipeline
// stages. Nothing in nn or train may need to know their types.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorun/gorun/comm"
	"github.com/gorun/gorun/comm/commtest"
	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/model/zoo"
	"github.com/gorun/gorun/train"
)

// projection is y = x·Wᵀ without bias: a user's layer with a parameter,
// computed through the backend so it runs wherever the backend does.
type projection struct {
	be        tensor.Backend
	in, out   int
	w, dw     *tensor.Tensor
	x, y, dx  *tensor.Tensor
	replicaOf *projection
}

func newProjection(be tensor.Backend, in, out int, rng *rand.Rand) *projection {
	p := &projection{be: be, in: in, out: out, w: tensor.New(out, in), dw: tensor.New(out, in)}
	for i := range p.w.Data {
		p.w.Data[i] = rng.Float32() - 0.5
	}
	return p
}

func (p *projection) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	if x.Dims() != 2 || x.Shape[1] != p.in {
		return nil, fmt.Errorf("projection: input %s, want [N %d]", x, p.in)
	}
	p.x = x
	y := tensor.ReuseLike(&p.y, x, x.Shape[0], p.out)
	p.be.MatMul(x, false, p.w, true, y, 1, 0)
	return y, nil
}

func (p *projection) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	p.be.MatMul(dy, true, p.x, false, p.dw, 1, 1)
	dx := tensor.ReuseLike(&p.dx, dy, p.x.Shape...)
	p.be.MatMul(dy, false, p.w, false, dx, 1, 0)
	return dx, nil
}

func (p *projection) State() []nn.Var {
	return []nn.Var{{Name: "weight", Value: p.w, Grad: p.dw}}
}

func (p *projection) SetTraining(bool) {}

func (p *projection) Replica() nn.Layer {
	return &projection{be: p.be, in: p.in, out: p.out, w: p.w, dw: p.dw, replicaOf: p}
}

// residual is y = x + inner(x): a user's container.
type residual struct {
	be        tensor.Backend
	inner     nn.Layer
	y, dx     *tensor.Tensor
	trainings int
}

func (r *residual) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	h, err := r.inner.Forward(x)
	if err != nil {
		return nil, err
	}
	y := tensor.ReuseLike(&r.y, h, h.Shape...)
	r.be.Add(x, h, y)
	return y, nil
}

func (r *residual) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	g, err := r.inner.Backward(dy)
	if err != nil {
		return nil, err
	}
	dx := tensor.ReuseLike(&r.dx, dy, dy.Shape...)
	r.be.Add(dy, g, dx)
	return dx, nil
}

func (r *residual) State() []nn.Var {
	var s []nn.Var
	for _, v := range r.inner.State() {
		v.Name = "inner." + v.Name
		s = append(s, v)
	}
	return s
}

func (r *residual) SetTraining(on bool) { r.trainings++; r.inner.SetTraining(on) }

func (r *residual) Replica() nn.Layer { return &residual{be: r.be, inner: r.inner.Replica()} }

func (r *residual) Children() []nn.Layer { return []nn.Layer{r.inner} }

var _ nn.Container = (*residual)(nil)

const (
	userIn      = 6 // features of a sample: [1, 2, 3]
	userClasses = 3
)

// userNet is flatten → fc1 → relu → block (the user's residual around the
// user's projection) → head (the user's projection) → fc2, drawn from seed.
func userNet(be tensor.Backend, seed uint64) *nn.Chain {
	rng := rand.New(rand.NewPCG(seed, 7))
	return nn.NewChain(
		nn.Child{Layer: nn.NewFlatten()},
		nn.Child{Name: "fc1", Layer: nn.NewLinear(be, userIn, 8, rng)},
		nn.Child{Layer: nn.NewReLU(be)},
		nn.Child{Name: "block", Layer: &residual{be: be, inner: newProjection(be, 8, 8, rng)}},
		nn.Child{Name: "head", Layer: newProjection(be, 8, 5, rng)},
		nn.Child{Name: "fc2", Layer: nn.NewLinear(be, 5, userClasses, rng)},
	)
}

func userBatch(n int) (*tensor.Tensor, []int32) {
	rng := rand.New(rand.NewPCG(3, 4))
	x := tensor.New(n, 1, 2, 3)
	for i := range x.Data {
		x.Data[i] = rng.Float32()*2 - 1
	}
	labels := make([]int32, n)
	for i := range labels {
		labels[i] = int32(rng.IntN(userClasses))
	}
	return x, labels
}

// gradsOf runs net forward and backward on the batch (mean cross-entropy)
// and returns a copy of every parameter's gradient by name.
func gradsOf(t *testing.T, be tensor.Backend, net nn.Layer, x *tensor.Tensor, labels []int32) map[string][]float32 {
	t.Helper()
	loss := nn.NewCrossEntropyLoss(be)
	y, err := net.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loss.Forward(y, labels); err != nil {
		t.Fatal(err)
	}
	dy, _ := loss.Backward()
	if _, err := net.Backward(dy); err != nil {
		t.Fatal(err)
	}
	return grads(net)
}

func grads(net nn.Layer) map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range nn.Params(net) {
		out[p.Name] = append([]float32(nil), p.Grad.HostData()...)
	}
	return out
}

func closeTo(t *testing.T, what string, got, want map[string][]float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d gradients, want %d", what, len(got), len(want))
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok || len(g) != len(w) {
			t.Fatalf("%s: gradient %s missing or of the wrong size", what, name)
		}
		for i := range w {
			if d := math.Abs(float64(g[i] - w[i])); d > tol*(1+math.Abs(float64(w[i]))) {
				t.Fatalf("%s: %s[%d] = %v, want %v", what, name, i, g[i], w[i])
			}
		}
	}
}

func TestUserLayerInNN(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	net := userNet(be, 1)
	names := map[string]bool{}
	for _, p := range nn.Params(net) {
		names[p.Name] = true
	}
	for _, want := range []string{"block.inner.weight", "head.weight", "fc1.weight", "fc2.bias"} {
		if !names[want] {
			t.Fatalf("parameters %v lack %s", names, want)
		}
	}
	var walked []nn.Layer
	nn.Walk(net, func(l nn.Layer) { walked = append(walked, l) })
	inner := net.Layers[3].(*residual).inner
	found := false
	for _, l := range walked {
		found = found || l == inner
	}
	if !found {
		t.Fatal("Walk does not reach the layer inside the user's container")
	}

	x, labels := userBatch(8)
	want := gradsOf(t, be, net, x, labels)
	for name, g := range want {
		nonzero := false
		for _, v := range g {
			nonzero = nonzero || v != 0
		}
		if !nonzero {
			t.Fatalf("gradient %s is all zero after backward", name)
		}
	}

	t.Run("ZeroGrad", func(t *testing.T) {
		nn.ZeroGrad(be, nn.Params(net))
		for name, g := range grads(net) {
			for i, v := range g {
				if v != 0 {
					t.Fatalf("%s[%d] = %v after ZeroGrad", name, i, v)
				}
			}
		}
	})

	t.Run("Replica", func(t *testing.T) {
		nn.ZeroGrad(be, nn.Params(net))
		rep := net.Replica()
		// Each forward keeps its own activations: the replica's forward on
		// other data must not disturb the original's backward.
		other, _ := userBatch(4)
		for i := range other.Data {
			other.Data[i] *= 3
		}
		loss := nn.NewCrossEntropyLoss(be)
		y, err := net.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rep.Forward(other); err != nil {
			t.Fatal(err)
		}
		if _, err := loss.Forward(y, labels); err != nil {
			t.Fatal(err)
		}
		dy, _ := loss.Backward()
		if _, err := net.Backward(dy); err != nil {
			t.Fatal(err)
		}
		closeTo(t, "original after a replica's forward", grads(net), want, 0)
		// The replica accumulates into the same gradients.
		nn.ZeroGrad(be, nn.Params(net))
		closeTo(t, "replica", gradsOf(t, be, rep, x, labels), want, 0)
		closeTo(t, "original through the replica", grads(net), want, 0)
		if got := rep.(*nn.Chain).Layers[4].(*projection).replicaOf; got != net.Layers[4] {
			t.Fatal("the chain's replica did not ask the user's layer for its replica")
		}
	})

	t.Run("ToDevice", func(t *testing.T) {
		before := nn.StateTensors(net)
		nn.ToDevice(net, nil) // the host: every tensor stays
		after := nn.StateTensors(net)
		if len(after) != len(before) {
			t.Fatalf("%d entries after ToDevice, want %d", len(after), len(before))
		}
		for i := range before {
			if &after[i].F32[0] != &before[i].F32[0] {
				t.Fatalf("%s moved although the device is the host", before[i].Name)
			}
		}
	})

	t.Run("SaveLoad", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "user.safetensors")
		if err := nn.SaveFile(path, net, nil); err != nil {
			t.Fatal(err)
		}
		fresh := userNet(be, 99)
		if err := nn.LoadFile(path, fresh); err != nil {
			t.Fatal(err)
		}
		a, b := nn.StateTensors(net), nn.StateTensors(fresh)
		for i := range a {
			for j := range a[i].F32 {
				if a[i].F32[j] != b[i].F32[j] {
					t.Fatalf("%s[%d]: loaded %v, saved %v", a[i].Name, j, b[i].F32[j], a[i].F32[j])
				}
			}
		}
	})

	t.Run("SetTraining", func(t *testing.T) {
		block := net.Layers[3].(*residual)
		n := block.trainings
		net.SetTraining(false)
		net.SetTraining(true)
		if block.trainings != n+2 {
			t.Fatal("the chain did not pass SetTraining to the user's container")
		}
	})
}

// TestUserLayerDDP: two ranks, each with half the batch and its own initial
// weights (DDP takes rank 0's), must end with the whole batch's gradients
// of one process.
func TestUserLayerDDP(t *testing.T) {
	x, labels := userBatch(8)
	refBE := cpu.New(1)
	defer refBE.Close()
	want := gradsOf(t, refBE, userNet(refBE, 1), x, labels)

	gs := commtest.Groups(t, 2, comm.WithTimeout(30*time.Second))
	got := make([]map[string][]float32, 2)
	commtest.EachRank(t, gs, func(g *comm.Group) error {
		be := cpu.New(1)
		defer be.Close()
		net := userNet(be, uint64(1+10*g.Rank()))
		ddp, err := train.NewDDP(context.Background(), g, net, be)
		if err != nil {
			return err
		}
		defer ddp.Close()
		half := x.Len() / 2
		xs := tensor.New(4, 1, 2, 3)
		copy(xs.Data, x.Data[g.Rank()*half:(g.Rank()+1)*half])
		loss := nn.NewCrossEntropyLoss(be)
		ddp.BeginStep(true)
		y, err := net.Forward(xs)
		if err != nil {
			return err
		}
		if _, err := loss.Forward(y, labels[g.Rank()*4:(g.Rank()+1)*4]); err != nil {
			return err
		}
		dy, _ := loss.Backward()
		if _, err := net.Backward(dy); err != nil {
			return err
		}
		if _, err := ddp.Finish(); err != nil {
			return err
		}
		got[g.Rank()] = grads(net)
		return nil
	})
	for r := range got {
		closeTo(t, fmt.Sprintf("rank %d", r), got[r], want, 1e-5)
	}
}

// TestUserLayerPipeline: the net cut into two stages, the user's layers on
// both sides of the cut, four microbatches, gives the gradients of one
// process on the whole batch.
func TestUserLayerPipeline(t *testing.T) {
	x, labels := userBatch(8)
	refBE := cpu.New(1)
	defer refBE.Close()
	want := gradsOf(t, refBE, userNet(refBE, 1), x, labels)

	for _, schedule := range []string{"gpipe", "1f1b"} {
		t.Run(schedule, func(t *testing.T) {
			gs := commtest.Groups(t, 2, comm.WithTimeout(30*time.Second))
			got := make([]map[string][]float32, 2)
			commtest.EachRank(t, gs, func(g *comm.Group) error {
				be := cpu.New(1)
				defer be.Close()
				whole := userNet(be, 1)
				cut := 4 // stage 0: flatten, fc1, relu, block; stage 1: head, fc2
				lo, hi := 0, cut
				in, out := []int{1, 2, 3}, []int{8}
				if g.Rank() == 1 {
					lo, hi, in, out = cut, len(whole.Layers), []int{8}, []int{userClasses}
				}
				var children []nn.Child
				for i := lo; i < hi; i++ {
					children = append(children, nn.Child{Name: whole.Names[i], Layer: whole.Layers[i]})
				}
				stage := nn.NewChain(children...)
				m := &zoo.Model{Name: "user", Input: []int{1, 2, 3}, Classes: userClasses}
				p, err := train.NewPipeline(g, be, m, stage, in, out, 4, schedule)
				if err != nil {
					return err
				}
				if _, err := p.Step(context.Background(), x, labels); err != nil {
					return err
				}
				got[g.Rank()] = grads(stage)
				return nil
			})
			merged := map[string][]float32{}
			for _, m := range got {
				for k, v := range m {
					merged[k] = v
				}
			}
			closeTo(t, schedule, merged, want, 1e-5)
		})
	}
}

// deepNet is twelve linear layers with ReLUs between, 12 pieces of a
// pipeline: layer i as chain child "fc<i>".
func deepNet(be tensor.Backend, seed uint64) *nn.Chain {
	rng := rand.New(rand.NewPCG(seed, 9))
	children := []nn.Child{{Layer: nn.NewFlatten()}}
	in := userIn
	for i := range 12 {
		out := 8
		if i == 11 {
			out = userClasses
		}
		children = append(children, nn.Child{Name: fmt.Sprintf("fc%d", i), Layer: nn.NewLinear(be, in, out, rng)})
		if i < 11 {
			children = append(children, nn.Child{Layer: nn.NewReLU(be)})
		}
		in = out
	}
	return nn.NewChain(children...)
}

// TestInterleavedShortBatches: 4 stages of 3 chunks each (one linear layer
// and its ReLU per chunk), 8 microbatches a batch, given batches of 8, 5
// (five microbatches: the order Megatron-LM's warm-up cannot run, which
// the schedule repairs, holding more microbatches than a full batch) and
// 3 (fewer microbatches than stages): each step's gradients equal one
// process's on the same batch.
func TestInterleavedShortBatches(t *testing.T) {
	const p, v, micro = 4, 3, 8
	refBE := cpu.New(1)
	defer refBE.Close()
	ref := deepNet(refBE, 1)
	sizes := []int{8, 5, 3, 8}
	want := make([]map[string][]float32, len(sizes))
	for i, n := range sizes {
		x, labels := userBatch(n)
		nn.ZeroGrad(refBE, nn.Params(ref))
		want[i] = gradsOf(t, refBE, ref, x, labels)
	}
	gs := commtest.Groups(t, p, comm.WithTimeout(30*time.Second))
	got := make([][]map[string][]float32, p)
	commtest.EachRank(t, gs, func(g *comm.Group) error {
		be := cpu.New(1)
		defer be.Close()
		whole := deepNet(be, 1)
		// Chunk c: the flatten (c = 0), fc<c> and its ReLU.
		var chunks []train.Chunk
		for k := range v {
			c := k*p + g.Rank()
			lo, hi := 1+2*c, min(3+2*c, len(whole.Layers))
			if c == 0 {
				lo = 0
			}
			var children []nn.Child
			for i := lo; i < hi; i++ {
				children = append(children, nn.Child{Name: whole.Names[i], Layer: whole.Layers[i]})
			}
			in, out := []int{8}, []int{8}
			if c == 0 {
				in = []int{1, 2, 3}
			}
			if c == p*v-1 {
				out = []int{userClasses}
			}
			chunks = append(chunks, train.Chunk{Layer: nn.NewChain(children...), In: in, Out: out})
		}
		m := &zoo.Model{Name: "deep", Input: []int{1, 2, 3}, Classes: userClasses}
		pipe, err := train.NewInterleavedPipeline(g, be, m, chunks, micro)
		if err != nil {
			return err
		}
		params := nn.Params(pipe.Layer())
		for _, n := range sizes {
			x, labels := userBatch(n)
			nn.ZeroGrad(be, params)
			if _, err := pipe.Step(context.Background(), x, labels); err != nil {
				return fmt.Errorf("batch of %d: %w", n, err)
			}
			got[g.Rank()] = append(got[g.Rank()], grads(pipe.Layer()))
		}
		return nil
	})
	for i, n := range sizes {
		merged := map[string][]float32{}
		for r := range p {
			for k, g := range got[r][i] {
				merged[k] = g
			}
		}
		closeTo(t, fmt.Sprintf("batch %d of %d samples", i, n), merged, want[i], 1e-5)
	}
}
