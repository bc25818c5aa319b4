package data

import (
	"fmt"
	"math/rand/v2"
)

// Sampler chooses which images each rank sees in an epoch, as PyTorch's
// DistributedSampler does: one permutation of the dataset per epoch, drawn
// from Seed and the epoch number (so every rank draws the same one, and
// set_epoch-style reshuffling needs no communication), made divisible by
// World by repeating its first indices (or, with DropLast, by dropping its
// tail), and dealt out round-robin: rank r takes positions r, r+World, ….
// With World 1 it is an ordinary shuffling (or sequential) sampler.
type Sampler struct {
	N        int // dataset size
	Shuffle  bool
	Seed     uint64
	Rank     int
	World    int
	DropLast bool
	// Skip is how many positions of the epoch's order were trained on
	// before (by a job of another size, which shrank or was resumed on
	// fewer or more ranks): the rest of the order is dealt out.
	Skip int
}

// Validate reports an impossible configuration.
func (s Sampler) Validate() error {
	if s.World < 1 || s.Rank < 0 || s.Rank >= s.World {
		return fmt.Errorf("sampler: rank %d of world size %d", s.Rank, s.World)
	}
	if s.N < 1 {
		return fmt.Errorf("sampler: empty dataset")
	}
	if s.Skip < 0 || s.Skip > s.N {
		return fmt.Errorf("sampler: skip %d of %d samples", s.Skip, s.N)
	}
	if s.DropLast && s.N < s.World {
		return fmt.Errorf("sampler: %d samples cannot be dropped evenly across %d ranks", s.N, s.World)
	}
	return nil
}

// Len returns how many indices each rank gets per epoch.
func (s Sampler) Len() int {
	n := s.N - s.Skip
	if s.DropLast && n%s.World != 0 {
		return (n - s.World + s.World - 1) / s.World // ceil((N − World)/World), as PyTorch
	}
	return (n + s.World - 1) / s.World
}

// Indices returns this rank's indices for epoch.
func (s Sampler) Indices(epoch int) []int {
	perm := make([]int, s.N)
	for i := range perm {
		perm[i] = i
	}
	if s.Shuffle {
		rng := rand.New(rand.NewPCG(s.Seed, uint64(epoch)))
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	}
	perm = perm[s.Skip:]
	total := s.Len() * s.World
	for len(perm) < total { // pad by repeating from the start
		perm = append(perm, perm[:min(len(perm), total-len(perm))]...)
	}
	perm = perm[:total]
	mine := make([]int, 0, s.Len())
	for i := s.Rank; i < total; i += s.World {
		mine = append(mine, perm[i])
	}
	return mine
}
