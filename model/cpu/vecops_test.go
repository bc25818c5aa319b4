package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestVecOps checks the vector row kernels against the loops, bit for
// bit, for every length up to 40 (whole vectors of eight, a vector of four
// and single elements) and one to four rows with strides a little longer
// than the rows, with signed zeros among the values: the whole output
// buffers are compared, so neither may write between the rows or past
// the last.
func TestVecOps(t *testing.T) {
	if !hasVectorOps() {
		t.Skip("no vector Winograd kernels on this build or processor (AVX2 missing or purego): the loops are all there is")
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
	stride := func(least int) int { return least + rng.IntN(3) }
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
				c.run(vecOps{vector: true}, got)
				for i := range want {
					for j := range want[i] {
						if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
							t.Fatalf("%s, n = %d, %d rows: output %d [%d] = %v (%#x), the loop gives %v (%#x)", op.name, n, rows, i, j,
								got[i][j], math.Float32bits(got[i][j]), want[i][j], math.Float32bits(want[i][j]))
						}
					}
				}
			}
		}
	}
}
