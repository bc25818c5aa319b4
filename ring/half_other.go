//go:build !amd64 || purego

package ring

// Without the vector kernels the scalar loops do it all.

func widenBF16Vector(dst []float32, src []BFloat16) int { return 0 }

func accumulateBF16Vector(acc []float32, src []BFloat16) int { return 0 }

func narrowBF16Vector(dst []BFloat16, src []float32) int { return 0 }

func narrowDivBF16Vector(dst []BFloat16, src []float32, div float32) int { return 0 }

func widenF16Vector(dst []float32, src []Float16) int { return 0 }

func accumulateF16Vector(acc []float32, src []Float16) int { return 0 }

func narrowF16Vector(dst []Float16, src []float32) int { return 0 }

func narrowDivF16Vector(dst []Float16, src []float32, div float32) int { return 0 }
