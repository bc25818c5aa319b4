// Package cpu is the default compute backend: every tensor.Backend operation
// in Go on the host, GEMM through model/gemm's assembly micro-kernel, and
// convolutions spread over a fixed number of threads.
package cpu
