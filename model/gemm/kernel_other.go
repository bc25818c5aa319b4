//go:build !amd64

package gemm

func bestKernel() kernel { return goKernel }
