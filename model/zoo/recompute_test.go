package zoo

import (
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
)

// forwardConvs counts the forward convolutions run through it.
type forwardConvs struct {
	tensor.Backend
	calls int
}

func (f *forwardConvs) Conv2d(x, w, b, y *tensor.Tensor, p tensor.ConvParams) {
	f.calls++
	f.Backend.Conv2d(x, w, b, y, p)
}

// TestResNet50Recompute: ResNet-50 with --recompute's checkpoints (on a
// small input: its pooling adapts) gives the plain model's loss and
// gradients bit for bit, and its backward recomputes every convolution
// but those whose outputs the first pass saved (checkpointBlock): 53
// convolutions forward, then all again but the 16 3×3 ones, 8 first 1×1
// ones (layer3's five after the first, layer4's three) and layer4's
// downsample.
func TestResNet50Recompute(t *testing.T) {
	base := cpu.New(2)
	defer base.Close()
	be := &forwardConvs{Backend: base}
	rng := rand.New(rand.NewPCG(3, 4))
	x := tensor.New(2, 3, 32, 32)
	for i := range x.Data {
		x.Data[i] = rng.Float32()
	}
	target := []int32{1, 7}
	var losses [2]float32
	var grads [2][][]float32
	var calls [2]int
	for i, recompute := range []bool{false, true} {
		spec, err := Lookup("resnet50")
		if err != nil {
			t.Fatal(err)
		}
		spec.Recompute = recompute
		m := spec.Build(be, 7)
		loss := m.NewLoss(be)
		be.calls = 0
		y, err := m.Net.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		if losses[i], err = loss.Forward(y, target); err != nil {
			t.Fatal(err)
		}
		dy, _ := loss.Backward()
		if _, err := m.Net.Backward(dy); err != nil {
			t.Fatal(err)
		}
		calls[i] = be.calls
		for _, v := range nn.Params(m.Net) {
			grads[i] = append(grads[i], v.Grad.HostData())
		}
	}
	if want := [2]int{53, 53 + 53 - 16 - 8 - 1}; calls != want {
		t.Errorf("forward convolutions plain, recomputed: %v, want %v", calls, want)
	}
	if losses[0] != losses[1] {
		t.Errorf("loss %v recomputed, %v plain", losses[1], losses[0])
	}
	for k := range grads[0] {
		for j, g := range grads[0][k] {
			if grads[1][k][j] != g {
				t.Fatalf("parameter %d's gradient differs at %d: %v recomputed, %v plain", k, j, grads[1][k][j], g)
			}
		}
	}
}
