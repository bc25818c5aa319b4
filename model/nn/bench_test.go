package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/cpu"
)

// BenchmarkConvLayer times forward + backward of CIFARNet's convolutions at
// batch 32, one and two threads; bench/competitors/torch_layers.py times
// the same layers in PyTorch.
//
//	go test ./model/nn -run '^$' -bench ConvLayer -count 3
func BenchmarkConvLayer(b *testing.B) {
	shapes := []struct {
		name        string
		in, out, hw int
	}{{"conv1_3x64x32", 3, 64, 32}, {"conv2_64x128x16", 64, 128, 16}, {"conv3_128x256x8", 128, 256, 8}, {"conv4_256x512x8", 256, 512, 8}}
	for _, threads := range []int{1, 2} {
		be := cpu.New(threads)
		for _, s := range shapes {
			b.Run(fmt.Sprintf("threads=%d/%s", threads, s.name), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 1))
				c := NewConv2d(be, s.in, s.out, 3, Conv2dOptions{Padding: 1}, rng)
				x := randTensor(rng, 32, s.in, s.hw, s.hw)
				y, _ := c.Forward(x)
				dy := randTensor(rng, y.Shape...)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := c.Forward(x); err != nil {
						b.Fatal(err)
					}
					if _, err := c.Backward(dy); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		be.Close()
	}
}
