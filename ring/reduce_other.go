//go:build !amd64 || purego

package ring

// haveAVX2 is false where the vector kernels are not built.
const haveAVX2 = false

// reduceVector: without the vector kernels the scalar loop does it all.
func reduceVector[T Elem](op Op, dst, a, b []T) int { return 0 }
