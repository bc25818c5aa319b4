package zoo_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/optim"
	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/model/zoo"
)

// Build a model and train it by hand, as a PyTorch loop does: zero the
// gradients, forward, loss, backward, step.
func Example() {
	be := cpu.New(1)
	defer be.Close()
	m, err := zoo.New("mnist", be, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		fmt.Println(err)
		return
	}
	opt, _ := optim.NewSGD(be, nn.Params(m.Net), tensor.SGDOptions{LR: 0.05, Momentum: 0.9})
	loss := m.NewLoss(be)

	rng := rand.New(rand.NewPCG(3, 4))
	x := tensor.New(8, 1, 28, 28) // a batch of 8 images
	for i := range x.Data {
		x.Data[i] = rng.Float32()
	}
	labels := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	var first, last float32
	for step := range 10 {
		opt.ZeroGrad()
		y, err := m.Net.Forward(x)
		if err != nil {
			fmt.Println(err)
			return
		}
		l, _ := loss.Forward(y, labels)
		dy, _ := loss.Backward()
		if _, err := m.Net.Backward(dy); err != nil {
			fmt.Println(err)
			return
		}
		opt.Step()
		if step == 0 {
			first = l
		}
		last = l
	}
	fmt.Printf("%d parameters; the loss fell: %v\n", len(nn.Params(m.Net)), last < first)
	// Output: 8 parameters; the loss fell: true
}
