package cpu

import (
	"math/rand/v2"
	"testing"
)

// reluBackwardBranchy is the obvious loop, kept to measure the branch-free
// one against: on ReLU outputs of random data its branch mispredicts about
// half the time.
func reluBackwardBranchy(y, dy, dx []float32) {
	for i, v := range y {
		if v > 0 {
			dx[i] = dy[i]
		} else {
			dx[i] = 0
		}
	}
}

// BenchmarkReLUBackward compares the branch-free ReLU backward with the
// branchy loop on 256 Ki elements, half of them zero.
//
//	go test ./model/cpu -run '^$' -bench ReLUBackward -count 3
func BenchmarkReLUBackward(b *testing.B) {
	const n = 1 << 18
	rng := rand.New(rand.NewPCG(1, 2))
	y, dy, dx := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range y {
		y[i] = max(float32(rng.NormFloat64()), 0)
		dy[i] = float32(rng.NormFloat64())
	}
	for _, c := range []struct {
		name string
		fn   func(y, dy, dx []float32)
	}{{"branchless", reluBackward}, {"branchy", reluBackwardBranchy}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(3 * 4 * n)
			for b.Loop() {
				c.fn(y, dy, dx)
			}
		})
	}
}

// TestReLUBackwardMatchesBranchy checks the branch-free loop against the
// obvious one, zeros and negative zeros included.
func TestReLUBackwardMatchesBranchy(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	y, dy := make([]float32, 1000), make([]float32, 1000)
	for i := range y {
		y[i] = max(float32(rng.NormFloat64()), 0)
		dy[i] = float32(rng.NormFloat64())
	}
	y[0], y[1] = 0, 1e-45 // zero, and the smallest positive
	got, want := make([]float32, 1000), make([]float32, 1000)
	reluBackward(y, dy, got)
	reluBackwardBranchy(y, dy, want)
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("element %d (y=%v): %v, want %v", i, y[i], got[i], want[i])
		}
	}
}
