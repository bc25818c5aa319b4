// Package tensor defines the float32 tensor the layers compute on and the
// Backend interface the computation runs behind.
//
// A Tensor is a shape and a row-major (NCHW for images) float32 buffer.
// Layers never loop over tensor data themselves: every computation is a
// Backend call, so a GPU backend can replace the CPU one without touching a
// layer. Layers keep their outputs between steps and resize them with
// Reuse, so a training step in steady state allocates nothing.
package tensor
