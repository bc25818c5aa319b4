//go:build !amd64

package gemm

func bestKernel() kernel { return goKernel }

// availableKernels lists every micro-kernel this CPU can run, best first.
func availableKernels() []kernel { return []kernel{goKernel} }
