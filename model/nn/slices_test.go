package nn

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/tensor"
)

// TestChainEvalSlices: a chain with SliceImages set gives, evaluating
// with gradients off, the same outputs to the bit as the same network
// without, for batches that split evenly, unevenly and not at all, on one
// and two threads; its pool's storage is smaller (a slice's
// activations); a warm sliced pass allocates nothing. Training passes, with gradients
// on or off, run whole (batch statistics need the whole batch): their
// outputs too equal the unsliced network's.
func TestChainEvalSlices(t *testing.T) {
	for _, threads := range []int{1, 2} {
		be := cpu.New(threads)
		defer be.Close()
		plain, sliced := tinyResNet(be, 5), tinyResNet(be, 5)
		sliced.SliceImages = 2
		rng := rand.New(rand.NewPCG(8, 1))
		for _, n := range []int{6, 5, 2, 1} {
			x := randTensor(rng, n, 3, 16, 16)
			for _, training := range []bool{false, true} {
				for _, net := range []*Chain{plain, sliced} {
					net.SetTraining(training)
					SetGradEnabled(net, false)
				}
				want, err := plain.Forward(x)
				if err != nil {
					t.Fatal(err)
				}
				got, err := sliced.Forward(x)
				if err != nil {
					t.Fatalf("threads=%d, %d images, training=%v: %v", threads, n, training, err)
				}
				if !sameBits(got.HostData(), want.HostData()) || !got.SameShape(want.Shape...) {
					t.Fatalf("threads=%d, %d images, training=%v: %s sliced, %s whole, or other bits", threads, n, training, got, want)
				}
			}
		}
		// Fresh networks, so that neither pool has seen a training pass.
		plain, sliced = tinyResNet(be, 5), tinyResNet(be, 5)
		sliced.SliceImages = 2
		x := randTensor(rng, 8, 3, 16, 16)
		for _, net := range []*Chain{plain, sliced} {
			net.SetTraining(false)
			SetGradEnabled(net, false)
			if _, err := net.Forward(x); err != nil {
				t.Fatal(err)
			}
		}
		if fc := sliced.Layers[8].(*Linear); fc.x.Shape[0] != 2 {
			t.Errorf("threads=%d: fc took %d images at a time, want 2", threads, fc.x.Shape[0])
		}
		_, whole := poolStorage(plain.pool())
		_, parts := poolStorage(sliced.pool())
		if parts*2 > whole {
			t.Errorf("threads=%d: the sliced pass's pool holds %d elements, the whole one's %d: want at most half", threads, parts, whole)
		}
		if allocs := testing.AllocsPerRun(3, func() { sliced.Forward(x) }); allocs != 0 {
			t.Errorf("threads=%d: a warm sliced pass allocates %v times", threads, allocs)
		}
		// Gradients on: a whole training step, as without.
		for _, net := range []*Chain{plain, sliced} {
			net.SetTraining(true)
			SetGradEnabled(net, true)
		}
		sameStep(t, be, sliced, plain, x, randTensor(rng, 8, 5).Data, "training with gradients on")
	}
}

// shaped is a layer whose output has the shape its function gives for
// the input's batch size, as layers mixing a batch's images would give.
type shaped struct {
	shape func(n int) []int
	y     *tensor.Tensor
}

func (l *shaped) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	return tensor.Reuse(&l.y, l.shape(x.Shape[0])...), nil
}
func (l *shaped) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) { return dy, nil }
func (l *shaped) State() []Var                                       { return nil }
func (l *shaped) SetTraining(bool)                                   {}
func (l *shaped) Replica() Layer                                     { return &shaped{shape: l.shape} }

// TestChainEvalSlicesRefuse: a chain whose layers do not give one output
// per image, of one shape for every slice, fails a sliced pass with an
// error naming the images and the shapes, instead of assembling garbage.
func TestChainEvalSlicesRefuse(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	for _, c := range []struct {
		name  string
		shape func(n int) []int
		want  string
	}{
		{"one row for the slice", func(int) []int { return []int{1, 3} }, "images 0 to 1 gave [1 3], not one output per image"},
		{"rows as wide as the slice", func(n int) []int { return []int{n, n} }, "images 4 to 4 gave [1 1], after [5 2]"},
	} {
		rng := rand.New(rand.NewPCG(2, 2))
		net := NewChain(Child{"fc", NewLinear(be, 4, 3, rng)}, Child{"", &shaped{shape: c.shape}})
		net.SliceImages = 2
		net.SetTraining(false)
		SetGradEnabled(net, false)
		if _, err := net.Forward(randTensor(rng, 5, 4)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
}
