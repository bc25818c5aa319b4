package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/cpu"
)

// TestFreeze: a frozen network evaluating with gradients off gives the
// bits of the same network unfrozen, pass after pass, with its
// convolutions' weights prepared once and a warm pass allocating nothing;
// after its weights change, each of SetTraining, SetGradEnabled and
// Freeze makes it prepare them again (the outputs follow the new
// weights), as loading them from a file does; training passes and Freeze(false) prepare nothing.
func TestFreeze(t *testing.T) {
	for _, threads := range []int{1, 2} {
		be := cpu.New(threads)
		defer be.Close()
		plain, frozen := tinyResNet(be, 5), tinyResNet(be, 5)
		Freeze(frozen, true)
		rng := rand.New(rand.NewPCG(3, 4))
		x := randTensor(rng, 4, 3, 16, 16)
		evaluate := func(what string) {
			t.Helper()
			want, err := plain.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			wantData := want.HostData()
			got, err := frozen.Forward(x)
			if err != nil {
				t.Fatalf("threads=%d, %s: %v", threads, what, err)
			}
			if !sameBits(got.HostData(), wantData) {
				t.Fatalf("threads=%d, %s: the frozen network's outputs differ", threads, what)
			}
		}
		for _, net := range []*Chain{plain, frozen} {
			net.SetTraining(false)
			SetGradEnabled(net, false)
		}
		evaluate("first pass")
		if n, all := preparedConvs(frozen), convs(frozen, nil); n != all {
			t.Fatalf("threads=%d: %d convolutions prepared, want all %d", threads, n, all)
		}
		evaluate("second pass")
		if allocs := testing.AllocsPerRun(3, func() { _, _ = frozen.Forward(x) }); allocs != 0 {
			t.Errorf("threads=%d: a warm frozen pass allocates %v times", threads, allocs)
		}

		// The weights change (as an optimizer step would) in both; one
		// call on the frozen network makes it follow.
		for i, drop := range []struct {
			name string
			call func()
		}{
			{"SetTraining(false)", func() { frozen.SetTraining(false) }},
			{"SetGradEnabled(false)", func() { SetGradEnabled(frozen, false) }},
			{"Freeze(true)", func() { Freeze(frozen, true) }},
		} {
			for _, net := range []*Chain{plain, frozen} {
				for _, p := range Params(net) {
					for j := range p.Value.Data {
						p.Value.Data[j] *= 1 - 0.01*float32(i+1)
					}
				}
			}
			drop.call()
			if n := preparedConvs(frozen); n != 0 {
				t.Errorf("threads=%d: %d convolutions kept their prepared weights after %s", threads, n, drop.name)
			}
			evaluate("weights changed, then " + drop.name)
		}

		// Weights loaded from a file (another network's) are prepared
		// on the next pass.
		other := tinyResNet(be, 6)
		path := t.TempDir() + "/other.safetensors"
		if err := SaveFile(path, other, nil); err != nil {
			t.Fatal(err)
		}
		for _, net := range []*Chain{plain, frozen} {
			if err := LoadFile(path, net); err != nil {
				t.Fatal(err)
			}
		}
		evaluate("weights loaded from a file")

		// Training passes (which move the batch norms' running
		// statistics, in both) prepare nothing, gradients on or off.
		for _, grads := range []bool{true, false} {
			for _, net := range []*Chain{plain, frozen} {
				net.SetTraining(true)
				SetGradEnabled(net, grads)
				if _, err := net.Forward(x); err != nil {
					t.Fatal(err)
				}
			}
			if n := preparedConvs(frozen); n != 0 {
				t.Errorf("threads=%d: a training pass (gradients %v) prepared %d convolutions", threads, grads, n)
			}
		}
		for _, net := range []*Chain{plain, frozen} {
			net.SetTraining(false)
			SetGradEnabled(net, false)
		}
		Freeze(frozen, false)
		evaluate("unfrozen")
		if n := preparedConvs(frozen); n != 0 {
			t.Errorf("threads=%d: unfrozen, %d convolutions prepared", threads, n)
		}
	}
}

// preparedConvs counts the convolutions in l holding prepared weights.
func preparedConvs(l Layer) int {
	return convs(l, func(c *Conv2d) bool { return c.prep.State != nil })
}

// convs counts the convolutions in l for which keep holds (all, when nil).
func convs(l Layer, keep func(*Conv2d) bool) int {
	n := 0
	eachConv(l, func(c *Conv2d) {
		if keep == nil || keep(c) {
			n++
		}
	})
	return n
}

// TestFreezeNeedsPreparedBackend: on a backend without prepared
// convolutions, Freeze leaves the network as it was.
func TestFreezeNeedsPreparedBackend(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	net := tinyResNet(unfusing{be}, 5)
	Freeze(net, true)
	net.SetTraining(false)
	SetGradEnabled(net, false)
	if _, err := net.Forward(randTensor(rand.New(rand.NewPCG(1, 1)), 2, 3, 16, 16)); err != nil {
		t.Fatal(err)
	}
	Walk(net, func(x Layer) {
		if c, ok := x.(*Conv2d); ok && c.frozen {
			t.Errorf("a convolution is frozen on a backend without prepared convolutions")
		}
	})
}

// TestConvKeepsForBackward: on a backend that keeps (the CPU's), each
// training forward pass with gradients on leaves the dense layers' matrix
// for their backward pass; three steps with the weights updated in
// between give the bits of the same network on a backend that keeps
// nothing, and a forward pass with gradients off leaves nothing for a
// backward pass to read.
func TestConvKeepsForBackward(t *testing.T) {
	be := cpu.New(2)
	defer be.Close()
	keeping, plain := tinyResNet(be, 8), tinyResNet(unfusing{be}, 8)
	rng := rand.New(rand.NewPCG(12, 13))
	for step := range 3 {
		x := randTensor(rng, 3, 3, 16, 16)
		r := randTensor(rng, 3, 5).Data
		sameStep(t, be, keeping, plain, x, r, fmt.Sprintf("step %d", step))
		if n := convs(keeping, func(c *Conv2d) bool { return c.keptLive }); n != convs(keeping, nil) {
			t.Fatalf("step %d: %d of %d convolutions kept their forward pass", step, n, convs(keeping, nil))
		}
		for _, net := range []*Chain{keeping, plain} {
			for _, p := range Params(net) {
				for i, g := range p.Grad.Data {
					p.Value.Data[i] -= 0.1 * g
				}
			}
		}
	}
	SetGradEnabled(keeping, false)
	if _, err := keeping.Forward(randTensor(rng, 3, 3, 16, 16)); err != nil {
		t.Fatal(err)
	}
	if n := convs(keeping, func(c *Conv2d) bool { return c.keptLive }); n != 0 {
		t.Errorf("a forward pass with gradients off left %d convolutions' passes live", n)
	}
}
