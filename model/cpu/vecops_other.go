//go:build !amd64 || purego

package cpu

// hasVectorOps: without the vector kernels the loops do it all.
func hasVectorOps() bool { return false }

// hasWideOps: nor the AVX-512 ones.
func hasWideOps() bool { return false }

// Unreachable: vecOps.vector is never true on this build.

func bt4Vector(y0, y1, y2, y3, x0, x1, x2, x3 *float32, n int) { panic("no vector kernels") }
func at2Vector(y0, y1, x0, x1, x2, x3 *float32, n int)         { panic("no vector kernels") }
func a4Vector(y0, y1, y2, y3, x0, x1 *float32, n int)          { panic("no vector kernels") }
func bt6Vector(y *float32, ys int, x *float32, xs, n int)      { panic("no vector kernels") }
func at4Vector(y *float32, ys int, x *float32, xs, n int)      { panic("no vector kernels") }
func g6Vector(y *float32, ys int, x *float32, xs, n int)       { panic("no vector kernels") }
func transposeBlocksVector(dst *float32, dstRow, dstStep int, src *float32, srcRow, srcStep, blocks int) {
	panic("no vector kernels")
}
func transposeBlocksBiasVector(dst *float32, dstRow, dstStep int, src *float32, srcRow, srcStep, blocks int, bias *float32) {
	panic("no vector kernels")
}
func hbt4Vector(y0, y1, y2, y3 *float32, ys int, x *float32, xs, n, rows int) {
	panic("no vector kernels")
}
func deinterleaveVector(e, o *float32, es int, x *float32, xs, n, rows int) {
	panic("no vector kernels")
}
func interleaveVector(y *float32, ys int, e, o *float32, es int, b float32, n, rows int) {
	panic("no vector kernels")
}
func affineVector(y, x *float32, scale, shift float32, n int) { panic("no vector kernels") }
func bnGradVector(out, dy, x *float32, a, bx, mu, d float32, n int) {
	panic("no vector kernels")
}
func momentsVector(v *float32, n int, k float64) (float64, float64) { panic("no vector kernels") }
func gradSumsVector(x, dy *float32, n int, mean float64) (float64, float64) {
	panic("no vector kernels")
}
func affineReLUVector(y, x *float32, scale, shift float32, n int) { panic("no vector kernels") }
func bnGradReLUVector(out, dy, x *float32, a, bx, mu, d, scale, shift float32, n int) {
	panic("no vector kernels")
}
func gradSumsReLUVector(x, dy *float32, n int, mean float64, scale, shift float32) (float64, float64) {
	panic("no vector kernels")
}
func addReLUVector(y, a, b *float32, n int)        { panic("no vector kernels") }
func addVector(y, a, b *float32, n int)            { panic("no vector kernels") }
func reluVector(y, x *float32, n int)              { panic("no vector kernels") }
func reluBackwardVector(dx, dy, y *float32, n int) { panic("no vector kernels") }
func maxPoolRowVector(y, r0, r1 *float32, n int)   { panic("no vector kernels") }
func gather2Vector(dst, src *float32, n int)       { panic("no vector kernels") }
func rowPicks3Vector(v *float32, at *int32, row *float32, first, n int) {
	panic("no vector kernels")
}
func pickRowsVector(best *float32, at *int32, v *float32, cols *int32, base, n int) {
	panic("no vector kernels")
}
func maxPoolBackwardRowVector(d0, d1, r0, r1, grad *float32, n int) {
	panic("no vector kernels")
}
func sgdMomentumVector(p, grad, buf *float32, lr, wd, mom, damp1 float32, n int) {
	panic("no vector kernels")
}
func sgdMomentumDecayVector(p, grad, buf *float32, lr, wd, mom, damp1 float32, n int) {
	panic("no vector kernels")
}
func adadeltaVector(p, grad, sq, acc *float32, lr, rho, eps, wd float32, n int) {
	panic("no vector kernels")
}
func adadeltaDecayVector(p, grad, sq, acc *float32, lr, rho, eps, wd float32, n int) {
	panic("no vector kernels")
}
func dropoutWide(y, mask, x *float32, p, keep float32, seed, off uint64, n int) {
	panic("no vector kernels")
}
func dropoutVector(y, mask, x *float32, p, keep float32, seed, off uint64, n int) {
	panic("no vector kernels")
}
func g4Vector(y0, y1, y2, y3, x0, x1, x2 *float32, n int) { panic("no vector kernels") }
func adamVector(p, grad, m, v *float32, step, bc2, eps, b1c, b2, b2c, wd float32, n int) {
	panic("no vector kernels")
}
func adamDecayVector(p, grad, m, v *float32, step, bc2, eps, b1c, b2, b2c, wd float32, n int) {
	panic("no vector kernels")
}
