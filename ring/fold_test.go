package ring

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestFoldedAllReduces runs recursive doubling and halving-doubling in
// process for powers of two and the sizes between them (where ranks pair
// up first), with chunks small enough that every chunked step carries
// several, and checks every rank's result against a sequential reduction.
// Inputs are small integers (and powers of two for Prod), so every order of
// combining is exact and the reference must match bit for bit; all frames
// must have carried the algorithm under test.
func TestFoldedAllReduces(t *testing.T) {
	algos := []struct {
		algo Algo
		set  func(*Collectives)
	}{
		{AlgoDoubling, func(c *Collectives) { c.SmallBytes, c.OneShotBytes, c.ChunkBytes = 1<<30, -1, 256 }},
		{AlgoHalving, func(c *Collectives) { c.SmallBytes, c.OneShotBytes, c.HalvingBytes, c.ChunkBytes = -1, -1, 1<<30, 256 }},
	}
	for _, a := range algos {
		for _, n := range []int{3, 4, 5, 6, 7, 8} {
			for _, count := range []int{1, 7, 1000, 4097} { // an empty buffer always takes recursive doubling
				for _, op := range []Op{Sum, Avg, Max, Min, Prod} {
					t.Run(fmt.Sprintf("%v/n=%d/count=%d/%v", a.algo, n, count, op), func(t *testing.T) {
						in := exactInputs(n, count, op)
						want := sequential(op, in)
						net := newMemNet(n)
						out := runGroupWith(t, net, n, a.set, in, op)
						checkEveryRank(t, out, want)
						if _, ok := net.algos[a.algo]; !ok || len(net.algos) != 1 {
							t.Fatalf("frames carried %v, want %v only", net.algos, a.algo)
						}
					})
				}
			}
		}
	}
}

// exactInputs returns n ranks' inputs of count small integers (powers of
// two and −1 for Prod), seeded by n and count, which every order of
// combining reduces exactly: any algorithm must match the sequential
// reference bit for bit.
func exactInputs(n, count int, op Op) [][]float32 {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(count)))
	in := make([][]float32, n)
	for r := range in {
		in[r] = make([]float32, count)
		for i := range in[r] {
			if op == Prod {
				in[r][i] = []float32{0.5, 1, 2, -1}[rng.IntN(4)]
			} else {
				in[r][i] = float32(rng.IntN(9) - 4)
			}
		}
	}
	return in
}
