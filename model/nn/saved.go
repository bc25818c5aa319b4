package nn

import (
	"slices"

	"github.com/gorun/gorun/model/tensor"
)

// savedOutput is where a convolution inside a Checkpoint keeps its output
// from the checkpoint's first pass (Checkpoint.Save), so that the
// recomputation in backward does not convolve again: PyTorch's selective
// activation checkpointing, which saves the outputs of chosen operations
// and recomputes the rest.
type savedOutput struct {
	phase savePhase
	pool  *bufferPool
	// out is where the output lies while saved: a pool buffer of its own
	// (out.lent), not the container's, and the output's view (out.view).
	out output
	x   []int // the input's shape in the first pass
}

type savePhase int

const (
	saveOff    savePhase = iota
	saveRecord           // the checkpoint's first pass: write the output into buf
	saveReplay           // its recomputation: return y instead of convolving
)

// output returns the tensor a convolution in the record phase writes its
// output to: a pool region that stays the saved output's, not the
// container's, until release.
func (s *savedOutput) output(x *tensor.Tensor, shape ...int) *tensor.Tensor {
	if s.out.lent == nil {
		s.out.lent = s.pool.get()
	}
	s.x = append(s.x[:0], x.Shape...)
	return s.out.get(x, shape...)
}

// y is the saved output.
func (s *savedOutput) y() *tensor.Tensor { return s.out.view }

// replays reports whether the convolution may return the saved output
// for input x instead of convolving.
func (s *savedOutput) replays(x *tensor.Tensor) bool {
	return s != nil && s.phase == saveReplay && s.out.lent != nil && slices.Equal(s.x, x.Shape)
}

// records reports whether the convolution writes its output into s.
func (s *savedOutput) records() bool { return s != nil && s.phase == saveRecord }

// release gives the saved output's region back to the pool.
func (s *savedOutput) release() {
	if s.out.lent != nil {
		s.pool.put(s.out.lent)
		s.out.lent = nil
	}
}
