package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/cpu"
)

// noResidualSum is the CPU backend without tensor.ResidualConvBackend
// (its method shadowed by one of another signature): residual blocks sum
// in their own pass on it.
type noResidualSum struct{ *cpu.Backend }

func (noResidualSum) Conv2dPreparedResidual() {}

// TestResidualSumInConv: evaluating with weights frozen, a residual
// block whose shortcut is the identity has its last convolution add the
// shortcut and apply the relu as it finishes each image: the same bits as
// the sum and relu in a pass of their own (a backend without
// ResidualConvBackend), on one and two threads, whole and in evaluation
// slices; blocks with a downsample, and evaluation with the weights not
// frozen, keep their own pass.
func TestResidualSumInConv(t *testing.T) {
	for _, threads := range []int{1, 2} {
		be := cpu.New(threads)
		defer be.Close()
		rng := rand.New(rand.NewPCG(31, 32))
		for _, slice := range []int{0, 2} {
			for _, frozen := range []bool{true, false} {
				label := fmt.Sprintf("threads=%d, slices of %d, frozen %v", threads, slice, frozen)
				summing, plain := tinyResNet(be, 6), tinyResNet(noResidualSum{be}, 6)
				for _, net := range []*Chain{summing, plain} {
					net.SliceImages = slice
					Freeze(net, frozen)
					net.SetTraining(false)
					SetGradEnabled(net, false)
				}
				for _, n := range []int{5, 1} {
					x := randTensor(rng, n, 3, 16, 16)
					want, err := plain.Forward(x)
					if err != nil {
						t.Fatal(err)
					}
					got, err := summing.Forward(x)
					if err != nil {
						t.Fatalf("%s, %d images: %v", label, n, err)
					}
					if !sameBits(got.HostData(), want.HostData()) {
						t.Fatalf("%s, %d images: other bits than the sum in its own pass", label, n)
					}
					var identity, summed int
					Walk(summing, func(l Layer) {
						b, ok := l.(*Residual)
						if !ok {
							return
						}
						if b.Downsample == nil {
							identity++
						}
						if c := b.summingConv(); c != nil && c.summed {
							summed++
						}
					})
					if wantSummed := map[bool]int{true: identity, false: 0}[frozen]; identity != 2 || summed != wantSummed {
						t.Errorf("%s, %d images: %d of %d identity blocks summed in their convolution, want %d", label, n, summed, identity, wantSummed)
					}
				}
			}
		}
	}
}
