//go:build !amd64 || purego

package ring

// Without the vector kernels the scalar loops do it all.

func widenBF16Vector(dst []float32, src []BFloat16) int { return 0 }

func accumulateBF16Vector(acc []float32, src []BFloat16) int { return 0 }

func narrowBF16Vector(dst []BFloat16, src []float32) int { return 0 }

func narrowDivBF16Vector(dst []BFloat16, src []float32, div float32) int { return 0 }
