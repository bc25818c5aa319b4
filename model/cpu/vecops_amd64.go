//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// hasVectorOps reports whether this processor runs the AVX2 kernels of
// vecops_amd64.s (cpu.X86.HasAVX2 also checks that the operating system
// saves the YMM registers).
func hasVectorOps() bool { return cpu.X86.HasAVX2 }

// hasWideOps reports whether it runs their AVX-512 kernels (F and DQ; the
// operating system saving the ZMM registers is checked too).
func hasWideOps() bool { return cpu.X86.HasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ }

// The kernels of vecops_amd64.s, as vecOps' methods describe them, for
// n ≥ 1 and rows ≥ 1, strides in elements.

//go:noescape
func gather2Vector(dst, src *float32, n int)

//go:noescape
func bt4Vector(y0, y1, y2, y3, x0, x1, x2, x3 *float32, n int)

//go:noescape
func at2Vector(y0, y1, x0, x1, x2, x3 *float32, n int)

//go:noescape
func g4Vector(y0, y1, y2, y3, x0, x1, x2 *float32, n int)

//go:noescape
func a4Vector(y0, y1, y2, y3, x0, x1 *float32, n int)

// bt6Vector and at4Vector take strides in elements.
//
//go:noescape
func bt6Vector(y *float32, ys int, x *float32, xs, n int)

//go:noescape
func at4Vector(y *float32, ys int, x *float32, xs, n int)

//go:noescape
func g6Vector(y *float32, ys int, x *float32, xs, n int)

//go:noescape
func transposeBlocksVector(dst *float32, dstRow, dstStep int, src *float32, srcRow, srcStep, blocks int)

//go:noescape
func transposeBlocksBiasVector(dst *float32, dstRow, dstStep int, src *float32, srcRow, srcStep, blocks int, bias *float32)

//go:noescape
func hbt4Vector(y0, y1, y2, y3 *float32, ys int, x *float32, xs, n, rows int)

//go:noescape
func deinterleaveVector(e, o *float32, es int, x *float32, xs, n, rows int)

//go:noescape
func interleaveVector(y *float32, ys int, e, o *float32, es int, b float32, n, rows int)

//go:noescape
func affineVector(y, x *float32, scale, shift float32, n int)

//go:noescape
func bnGradVector(out, dy, x *float32, a, bx, mu, d float32, n int)

//go:noescape
func momentsVector(v *float32, n int, k float64) (float64, float64)

//go:noescape
func gradSumsVector(x, dy *float32, n int, mean float64) (float64, float64)

//go:noescape
func affineReLUVector(y, x *float32, scale, shift float32, n int)

//go:noescape
func bnGradReLUVector(out, dy, x *float32, a, bx, mu, d, scale, shift float32, n int)

//go:noescape
func gradSumsReLUVector(x, dy *float32, n int, mean float64, scale, shift float32) (float64, float64)

//go:noescape
func addReLUVector(y, a, b *float32, n int)

//go:noescape
func addVector(y, a, b *float32, n int)

//go:noescape
func reluVector(y, x *float32, n int)

//go:noescape
func reluBackwardVector(dx, dy, y *float32, n int)

// maxPoolRowVector and maxPoolBackwardRowVector take n a multiple of 4.
//
//go:noescape
func maxPoolRowVector(y, r0, r1 *float32, n int)

//go:noescape
func maxPoolBackwardRowVector(d0, d1, r0, r1, grad *float32, n int)

// rowPicks3Vector and pickRowsVector take n a multiple of 8.
//
//go:noescape
func rowPicks3Vector(v *float32, at *int32, row *float32, first, n int)

//go:noescape
func pickRowsVector(best *float32, at *int32, v *float32, cols *int32, base, n int)

// sgdMomentumVector takes wd = 0, sgdMomentumDecayVector any other.
//
//go:noescape
func sgdMomentumVector(p, grad, buf *float32, lr, wd, mom, damp1 float32, n int)

//go:noescape
func sgdMomentumDecayVector(p, grad, buf *float32, lr, wd, mom, damp1 float32, n int)

// adadeltaVector takes wd = 0, adadeltaDecayVector any other.
//
//go:noescape
func adadeltaVector(p, grad, sq, acc *float32, lr, rho, eps, wd float32, n int)

//go:noescape
func adadeltaDecayVector(p, grad, sq, acc *float32, lr, rho, eps, wd float32, n int)

// dropoutVector is vecOps.dropout in AVX2 for n a multiple of 8 (n ≥ 8).
//
//go:noescape
func dropoutVector(y, mask, x *float32, p, keep float32, seed, off uint64, n int)

// dropoutWide is vecOps.dropout in AVX-512 for n a multiple of 8.
//
//go:noescape
func dropoutWide(y, mask, x *float32, p, keep float32, seed, off uint64, n int)

// adamVector takes wd = 0, adamDecayVector any other.
//
//go:noescape
func adamVector(p, grad, m, v *float32, step, bc2, eps, b1c, b2, b2c, wd float32, n int)

//go:noescape
func adamDecayVector(p, grad, m, v *float32, step, bc2, eps, b1c, b2, b2c, wd float32, n int)
