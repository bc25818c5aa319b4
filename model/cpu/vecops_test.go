package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestVecOps checks the vector row kernels (the AVX2 ones, and the
// AVX-512 ones where the CPU has them) against the loops, bit for bit,
// for every length up to 40 (whole vectors of eight, a vector of four
// and single elements) and one to four rows with strides a little longer
// than the rows, with signed zeros among the values: the whole output
// buffers are compared, so neither may write between the rows or past
// the last.
func TestVecOps(t *testing.T) {
	if !hasVectorOps() {
		t.Skip("no vector kernels on this build or processor (AVX2 missing or purego): the loops are all there is")
	}
	const guard = 9
	rng := rand.New(rand.NewPCG(3, 4))
	input := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			switch rng.IntN(8) {
			case 0:
				x[i] = 0
			case 1:
				x[i] = float32(math.Copysign(0, -1))
			default:
				x[i] = float32(rng.NormFloat64())
			}
		}
		return x
	}
	var withNaNs func([]float32) []float32 // some NaNs of either sign among x
	// ties draws from a few values, NaNs and zeros of both signs among
	// them, so that pooling windows hold equal maxima and NaNs.
	ties := func(n int) []float32 {
		values := []float32{-1, 0, float32(math.Copysign(0, -1)), 0.5, 2, 2,
			math.Float32frombits(0x7fc00001), math.Float32frombits(0xffc00002)}
		x := make([]float32, n)
		for i := range x {
			x[i] = values[rng.IntN(len(values))]
		}
		return x
	}
	// A case: its inputs, the lengths of its outputs (guard included) and
	// how the operation is called on them.
	type opCase struct {
		ins  [][]float32
		outs []int
		run  func(o vecOps, y [][]float32)
	}
	flat := func(n int) int { return n + guard }
	ops := []struct {
		name string
		make func(n, rows int, stride func(least int) int) opCase
	}{
		{"bt4", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{input(n), input(n), input(n), input(n)}
			return opCase{x, []int{flat(n), flat(n), flat(n), flat(n)}, func(o vecOps, y [][]float32) {
				o.bt4(y[0][:n], y[1][:n], y[2][:n], y[3][:n], x[0], x[1], x[2], x[3])
			}}
		}},
		{"at2", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{input(n), input(n), input(n), input(n)}
			return opCase{x, []int{flat(n), flat(n)}, func(o vecOps, y [][]float32) {
				o.at2(y[0][:n], y[1][:n], x[0], x[1], x[2], x[3])
			}}
		}},
		{"a4", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{input(n), input(n)}
			return opCase{x, []int{flat(n), flat(n), flat(n), flat(n)}, func(o vecOps, y [][]float32) {
				o.a4(y[0][:n], y[1][:n], y[2][:n], y[3][:n], x[0], x[1])
			}}
		}},
		{"g4", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{input(n), input(n), input(n)}
			return opCase{x, []int{flat(n), flat(n), flat(n), flat(n)}, func(o vecOps, y [][]float32) {
				o.g4(y[0][:n], y[1][:n], y[2][:n], y[3][:n], x[0], x[1], x[2])
			}}
		}},
		{"bt6", func(n, _ int, stride func(int) int) opCase {
			ys, xs := stride(n), stride(n)
			x := [][]float32{input(rowsLen(6, xs, n))}
			return opCase{x, []int{rowsLen(6, ys, n) + guard}, func(o vecOps, y [][]float32) { o.bt6(y[0], ys, x[0], xs, n) }}
		}},
		{"g6", func(n, _ int, stride func(int) int) opCase {
			ys, xs := stride(n), stride(n)
			x := [][]float32{input(rowsLen(3, xs, n))}
			return opCase{x, []int{rowsLen(6, ys, n) + guard}, func(o vecOps, y [][]float32) { o.g6(y[0], ys, x[0], xs, n) }}
		}},
		{"transposeBlocks", func(n, rows int, stride func(int) int) opCase {
			blocks := n % 4
			// rows odd: channelsInnermost's pattern (blocks along the
			// source rows), even: channelsOutermost's (down them).
			srcRow, srcStep, dstRow, dstStep := stride(8*max(blocks, 1)), 8, stride(8), 0
			dstStep = 8 * dstRow
			if rows%2 == 0 {
				srcRow, dstRow = stride(8), stride(8*max(blocks, 1))
				srcStep, dstStep = 8*srcRow, 8
			}
			l := func(step, row int) int { return max(blocks-1, 0)*step + 7*row + 8 }
			x := [][]float32{withNaNs(input(l(srcStep, srcRow))), input(8)}
			var bias []float32
			if rows > 2 {
				bias = x[1]
			}
			return opCase{x, []int{l(dstStep, dstRow) + guard}, func(o vecOps, y [][]float32) {
				o.transposeBlocks(y[0], dstRow, dstStep, x[0], srcRow, srcStep, blocks, bias)
			}}
		}},
		{"at4", func(n, _ int, stride func(int) int) opCase {
			ys, xs := stride(n), stride(n)
			x := [][]float32{input(rowsLen(6, xs, n))}
			return opCase{x, []int{rowsLen(4, ys, n) + guard}, func(o vecOps, y [][]float32) { o.at4(y[0], ys, x[0], xs, n) }}
		}},
		{"hbt4", func(n, rows int, stride func(int) int) opCase {
			ys, xs := stride(n), stride(2*n+2)
			x := [][]float32{input(rowsLen(rows, xs, 2*n+2))}
			l := rowsLen(rows, ys, n) + guard
			return opCase{x, []int{l, l, l, l}, func(o vecOps, y [][]float32) {
				o.hbt4(y[0], y[1], y[2], y[3], ys, x[0], xs, n, rows)
			}}
		}},
		{"deinterleave", func(n, rows int, stride func(int) int) opCase {
			es, xs := stride(n), stride(2*n)
			x := [][]float32{input(rowsLen(rows, xs, 2*n))}
			l := rowsLen(rows, es, n) + guard
			return opCase{x, []int{l, l}, func(o vecOps, y [][]float32) {
				o.deinterleave(y[0], y[1], es, x[0], xs, n, rows)
			}}
		}},
		{"affine", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{input(n), input(2)}
			return opCase{x, []int{flat(n)}, func(o vecOps, y [][]float32) { o.affine(y[0][:n], x[0], x[1][0], x[1][1]) }}
		}},
		{"bnGrad", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{input(n), input(n), input(4)}
			return opCase{x, []int{flat(n)}, func(o vecOps, y [][]float32) {
				o.bnGrad(y[0][:n], x[0], x[1], x[2][0], x[2][1], x[2][2], x[2][3])
			}}
		}},
		{"affineReLU", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{withNaNs(input(n)), input(2)}
			return opCase{x, []int{flat(n)}, func(o vecOps, y [][]float32) { o.affineReLU(y[0][:n], x[0], x[1][0], x[1][1]) }}
		}},
		{"add", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{withNaNs(input(n)), input(n)}
			return opCase{x, []int{flat(n)}, func(o vecOps, y [][]float32) { o.add(y[0][:n], x[0], x[1]) }}
		}},
		{"addReLU", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{withNaNs(input(n)), input(n)}
			return opCase{x, []int{flat(n)}, func(o vecOps, y [][]float32) { o.addReLU(y[0][:n], x[0], x[1]) }}
		}},
		{"bnGradReLU", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{input(n), withNaNs(input(n)), input(6)}
			return opCase{x, []int{flat(n)}, func(o vecOps, y [][]float32) {
				o.bnGradReLU(y[0][:n], x[0], x[1], x[2][0], x[2][1], x[2][2], x[2][3], x[2][4], x[2][5])
			}}
		}},
		{"relu", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{withNaNs(input(n))}
			return opCase{x, []int{flat(n)}, func(o vecOps, y [][]float32) { o.relu(y[0][:n], x[0]) }}
		}},
		{"reluBackward", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{input(n), withNaNs(input(n))}
			return opCase{x, []int{flat(n)}, func(o vecOps, y [][]float32) { o.reluBackward(y[0][:n], x[0], x[1]) }}
		}},
		{"maxPoolRow", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{ties(2 * n), ties(2 * n)}
			return opCase{x, []int{flat(n)}, func(o vecOps, y [][]float32) { o.maxPoolRow(y[0][:n], x[0], x[1]) }}
		}},
		{"maxPoolBackwardRow", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{ties(2 * n), ties(2 * n), input(n)}
			return opCase{x, []int{flat(2 * n), flat(2 * n)}, func(o vecOps, y [][]float32) {
				o.maxPoolBackwardRow(y[0][:2*n], y[1][:2*n], x[0], x[1], x[2])
			}}
		}},
		{"sgdMomentum", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{withNaNs(input(n)), withNaNs(input(n)), input(n), input(4)}
			if rng.IntN(2) == 0 {
				x[3][1] = 0 // no weight decay
			}
			return opCase{x, []int{flat(n), flat(n)}, func(o vecOps, y [][]float32) {
				copy(y[0], x[0]) // the parameters and the momentum buffer are updated in place
				copy(y[1], x[2])
				o.sgdMomentum(y[0][:n], x[1], y[1][:n], x[3][0], x[3][1], x[3][2], x[3][3])
			}}
		}},
		{"adadelta", func(n, _ int, _ func(int) int) opCase {
			abs := func(x []float32) []float32 { // running averages of squares: never negative
				for i := range x {
					x[i] = float32(math.Abs(float64(x[i])))
				}
				return x
			}
			x := [][]float32{withNaNs(input(n)), withNaNs(input(n)), abs(input(n)), abs(input(n)), {1, 0.9, 1e-6, 0.01}}
			if rng.IntN(2) == 0 {
				x[4][3] = 0 // no weight decay
			}
			return opCase{x, []int{flat(n), flat(n), flat(n)}, func(o vecOps, y [][]float32) {
				copy(y[0], x[0]) // parameters and both running averages are updated in place
				copy(y[1], x[2])
				copy(y[2], x[3])
				o.adadelta(y[0][:n], x[1], y[1][:n], y[2][:n], x[4][0], x[4][1], x[4][2], x[4][3])
			}}
		}},
		{"adam", func(n, _ int, _ func(int) int) opCase {
			abs := func(x []float32) []float32 { // second moments: never negative
				for i := range x {
					x[i] = float32(math.Abs(float64(x[i])))
				}
				return x
			}
			c := adamConsts{step: 1e-3 / 0.1, bc2: float32(math.Sqrt(0.001)), eps: 1e-8, b1c: 0.1, b2: 0.999, b2c: 0.001, wd: 0.01}
			if rng.IntN(2) == 0 {
				c.wd = 0 // no weight decay
			}
			x := [][]float32{withNaNs(input(n)), withNaNs(input(n)), input(n), abs(input(n))}
			return opCase{x, []int{flat(n), flat(n), flat(n)}, func(o vecOps, y [][]float32) {
				copy(y[0], x[0]) // parameters and both moments are updated in place
				copy(y[1], x[2])
				copy(y[2], x[3])
				o.adam(y[0][:n], x[1], y[1][:n], y[2][:n], c)
			}}
		}},
		{"dropout", func(n, _ int, _ func(int) int) opCase {
			x := [][]float32{withNaNs(input(n))}
			p := []float32{0, 0.1, 0.5, 0.9, 1}[rng.IntN(5)]
			keep := float32(0)
			if p < 1 {
				keep = 1 / (1 - p)
			}
			seed, off := rng.Uint64(), rng.IntN(1<<40)
			return opCase{x, []int{flat(n), flat(n)}, func(o vecOps, y [][]float32) {
				o.dropout(y[0][:n], y[1][:n], x[0], p, keep, seed, off)
			}}
		}},
		{"interleave", func(n, rows int, stride func(int) int) opCase {
			ys, es := stride(2*n), stride(n)
			x := [][]float32{input(rowsLen(rows, es, n)), input(rowsLen(rows, es, n)), input(1)}
			if rng.IntN(2) == 0 {
				x[2][0] = 0 // no bias: adding +0 turns −0 into +0 in both
			}
			return opCase{x, []int{rowsLen(rows, ys, 2*n) + guard}, func(o vecOps, y [][]float32) {
				o.interleave(y[0], ys, x[0], x[1], es, x[2][0], n, rows)
			}}
		}},
	}
	withNaNs = func(x []float32) []float32 {
		for i := range x {
			if rng.IntN(16) == 0 {
				x[i] = math.Float32frombits(0x7fc00000 | uint32(rng.IntN(2))<<31) // either sign
			}
		}
		return x
	}
	stride := func(least int) int { return least + rng.IntN(3) }
	// The AVX2 kernels, and with AVX-512 the wide ones too (dropout's
	// AVX2 kernel is then tested alongside).
	kernels := []vecOps{{vector: true}}
	if hasWideOps() {
		kernels = append(kernels, vecOps{vector: true, wide: true})
	}
	for _, op := range ops {
		for n := range 41 {
			for rows := 1; rows <= 4; rows++ {
				c := op.make(n, rows, stride)
				want, got := make([][]float32, len(c.outs)), make([][]float32, len(c.outs))
				for i, l := range c.outs {
					want[i], got[i] = make([]float32, l), make([]float32, l)
					for j := range l {
						want[i][j], got[i][j] = 12345, 12345
					}
				}
				c.run(vecOps{}, want)
				for _, o := range kernels {
					for i := range got {
						for j := range got[i] {
							got[i][j] = 12345
						}
					}
					c.run(o, got)
					for i := range want {
						for j := range want[i] {
							if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
								t.Fatalf("%s, %s, n = %d, %d rows: output %d [%d] = %v (%#x), the loop gives %v (%#x)", op.name, o.name(), n, rows, i, j,
									got[i][j], math.Float32bits(got[i][j]), want[i][j], math.Float32bits(want[i][j]))
							}
						}
					}
				}
			}
		}
	}
}

// TestVecOpsSums checks batch norm's vector sums (with and without the
// relu after it) against the loops, bit for bit, for every length up to 70 and planes of ResNet-50's sizes
// (49 to 12544), with values far from and near the subtracted mean.
func TestVecOpsSums(t *testing.T) {
	if !hasVectorOps() {
		t.Skip("no vector kernels on this build or processor (AVX2 missing or purego): the loops are all there is")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	lengths := []int{196, 784, 3136, 12544}
	for n := range 71 {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		for _, centre := range []float64{0, 3.5, -1e4} {
			x, g := make([]float32, n), make([]float32, n)
			for i := range x {
				x[i] = float32(centre + rng.NormFloat64())
				g[i] = float32(rng.NormFloat64() * 1e-3)
			}
			k := centre + rng.Float64()
			// The relu after the batch norm cuts about half the gradient;
			// some inputs are NaN (of either sign), which it lets through
			// or not by the sign.
			scale := float32(rng.NormFloat64())
			shift := -scale * float32(centre)
			for i := range x {
				if rng.IntN(32) == 0 {
					x[i] = math.Float32frombits(0x7fc00000 | uint32(rng.IntN(2))<<31)
				}
			}
			loop, vector := vecOps{}, vecOps{vector: true}
			for _, c := range []struct {
				name      string
				want, got [2]float64
			}{
				{"moments", pair(loop.moments(x, k)), pair(vector.moments(x, k))},
				{"gradSums", pair(loop.gradSums(x, g, k)), pair(vector.gradSums(x, g, k))},
				{"gradSumsReLU", pair(loop.gradSumsReLU(x, g, k, scale, shift)), pair(vector.gradSumsReLU(x, g, k, scale, shift))},
			} {
				for i := range 2 {
					bothNaN := math.IsNaN(c.got[i]) && math.IsNaN(c.want[i]) // which NaN comes out of a sum is the hardware's choice
					if math.Float64bits(c.got[i]) != math.Float64bits(c.want[i]) && !bothNaN {
						t.Fatalf("%s, n = %d, centre %g: sum %d = %v, the loop gives %v", c.name, n, centre, i, c.got[i], c.want[i])
					}
				}
			}
		}
	}
}

func pair(a, b float64) [2]float64 { return [2]float64{a, b} }

// TestGather2: the stride-2 gather, vector kernel and loop, takes every
// second value bit for bit (a NaN and −0 among them): lengths 0 to 40
// (blocks of eight and the rest), sources holding just 2n − 1 values or
// more.
func TestGather2(t *testing.T) {
	vec := vecOps{vector: hasVectorOps()}
	for n := range 41 {
		for _, extra := range []int{0, 1, 17} {
			src := make([]float32, max(0, 2*n-1)+extra)
			for i := range src {
				src[i] = float32(i)*1.5 - 7
			}
			if len(src) > 4 {
				src[2] = float32(math.NaN())
				src[4] = float32(math.Copysign(0, -1))
			}
			for _, ops := range []vecOps{vec, {}} {
				got := make([]float32, n)
				ops.gather2(got, src)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(src[2*i]) {
						t.Fatalf("%s, n %d, extra %d: element %d is %v, want src[%d] = %v", ops.name(), n, extra, i, got[i], 2*i, src[2*i])
					}
				}
			}
		}
	}
}
