package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"
)

// interleaver is one of the packings' transposing steps.
type interleaver func(dst []float32, width int, src []float32, base, stride, kc int, alpha float32)

// TestInterleaveVector holds the AVX2 transposing kernels to the Go
// loops' bits (four rows and two): every column count from 0 to 41 and a
// full block, panel widths of both micro-kernels, padded strides, alpha 1
// and not, and special values (NaN, infinities, −0, subnormals) among the
// inputs; the panel's other columns must stay untouched.
func TestInterleaveVector(t *testing.T) {
	if !cpu.X86.HasAVX2 {
		t.Skip("this CPU has no AVX2: the vector kernels never run here")
	}
	for _, c := range []struct {
		rows     int
		go_, vec interleaver
	}{{4, interleave4, interleave4Vector}, {2, interleave2, interleave2Vector}} {
		t.Run(fmt.Sprintf("rows=%d", c.rows), func(t *testing.T) { testInterleaveVector(t, c.rows, c.go_, c.vec) })
	}
}

func testInterleaveVector(t *testing.T, rows int, goLoop, vector interleaver) {
	r := rand.New(rand.NewPCG(4, 4))
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, 1e-40}
	kcs := []int{256}
	for kc := range 42 {
		kcs = append(kcs, kc)
	}
	for _, kc := range kcs {
		for _, width := range []int{4, 6, 12, 16, 32} {
			for _, alpha := range []float32{1, -0.75} {
				stride := kc + 3
				base := 5
				src := make([]float32, base+rows*stride)
				for i := range src {
					src[i] = r.Float32()*8 - 4
					if r.IntN(16) == 0 {
						src[i] = special[r.IntN(len(special))]
					}
				}
				offset := r.IntN(width - rows + 1) // the group's first column in the panel
				want := make([]float32, max(kc, 1)*width+offset)
				for i := range want {
					want[i] = -7
				}
				got := append([]float32(nil), want...)
				goLoop(want[offset:], width, src, base, stride, kc, alpha)
				vector(got[offset:], width, src, base, stride, kc, alpha)
				name := fmt.Sprintf("kc=%d width=%d alpha=%g", kc, width, alpha)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s: element %d is %g (%#x), want %g (%#x)", name, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
				}
			}
		}
	}
}

// BenchmarkInterleave4 measures the packing's transposing step, one
// 256-column block of four rows into a 32-wide panel, in the Go loop and
// the AVX2 kernel.
//
//	go test ./model/gemm -run '^$' -bench Interleave4 -count 5
func BenchmarkInterleave4(b *testing.B) {
	const kc, width, stride = 256, 32, 3136
	src := make([]float32, 4*stride)
	dst := make([]float32, kc*width)
	for _, c := range []struct {
		name string
		f    func(dst []float32, width int, src []float32, base, stride, kc int, alpha float32)
	}{{"go", interleave4}, {"avx2", interleave4Vector}} {
		if c.name == "avx2" && !cpu.X86.HasAVX2 {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(4 * kc * 4)
			for b.Loop() {
				c.f(dst, width, src, 0, stride, kc, 1)
			}
		})
	}
}

// BenchmarkInterleave2 measures a six-row A panel's last two rows, one
// 256-column block into a 6-wide panel, as transposeRows did them before
// (a row at a time), in interleave2 and in the AVX2 kernel.
//
//	go test ./model/gemm -run '^$' -bench Interleave2 -count 5
func BenchmarkInterleave2(b *testing.B) {
	const kc, width, stride = 256, 6, 3136
	src := make([]float32, 2*stride)
	dst := make([]float32, kc*width)
	rowAtATime := func(dst []float32, width int, src []float32, base, stride, kc int, alpha float32) {
		for r := range 2 {
			for l, v := range src[base+r*stride : base+r*stride+kc] {
				dst[l*width+r] = alpha * v
			}
		}
	}
	for _, c := range []struct {
		name string
		f    interleaver
	}{{"rows", rowAtATime}, {"go", interleave2}, {"avx2", interleave2Vector}} {
		if c.name == "avx2" && !cpu.X86.HasAVX2 {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(2 * kc * 4)
			for b.Loop() {
				c.f(dst, width, src, 0, stride, kc, 1)
			}
		})
	}
}

// TestCopyRowsVector holds the AVX2 panel copy to copyRows: both panel
// widths, one row to a full block, strides equal to the width and padded,
// and the panel's bytes past the copied rows untouched.
func TestCopyRowsVector(t *testing.T) {
	for _, width := range []int{6, 12, 16, 32} {
		for _, kc := range []int{1, 2, 7, 256} {
			for _, stride := range []int{width, width + 3, 3 * width} {
				src := make([]float32, (kc-1)*stride+width)
				for i := range src {
					src[i] = float32(i) + 0.25
				}
				got, want := make([]float32, kc*width+5), make([]float32, kc*width+5)
				for i := kc * width; i < len(got); i++ {
					got[i], want[i] = -1, -1
				}
				copyRowsVector(got, src, stride, kc, width)
				copyRows(want, src, stride, kc, width)
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("width %d, kc %d, stride %d: element %d is %v, want %v", width, kc, stride, i, got[i], want[i])
					}
				}
			}
		}
	}
}
