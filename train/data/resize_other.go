//go:build !amd64 || purego

package data

// hasResizeKernels: without the vector kernels the loops do it all.
func hasResizeKernels() bool { return false }

// Unreachable: resizeScratch.vector is never true on this build.

func verticalRows(out, src *byte, stride int, coeffs *int32, taps, n int) {
	panic("no vector kernels")
}

func horizontalPixels(out, row *byte, bounds *int, coeffs *int32, ksize, count int) {
	panic("no vector kernels")
}
