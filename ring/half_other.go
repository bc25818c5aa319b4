//go:build !amd64 || purego

package ring

// Without the vector kernels the scalar loops do it all.

func widenVector[H half](dst []float32, src []H, add bool) int { return 0 }

func narrowVector[H half](dst []H, src []float32, div float32) int { return 0 }
