package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/parallel"
)

// reference computes alpha·op(A)·op(B) + beta·C in float64, one dot product
// per element.
func reference(m, n, k int, alpha float32, a, b Matrix, beta float32, c []float32, ldc int) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for l := 0; l < k; l++ {
				s += float64(at(a, i, l)) * float64(at(b, l, j))
			}
			v := float64(alpha) * s
			if beta != 0 {
				v += float64(beta) * float64(c[i*ldc+j])
			}
			out[i*n+j] = v
		}
	}
	return out
}

func at(m Matrix, i, j int) float32 {
	if m.Trans {
		return m.Data[j*m.Stride+i]
	}
	return m.Data[i*m.Stride+j]
}

// copyOf returns a copy of m with storage of its own.
func copyOf(m Matrix) Matrix {
	m.Data = append([]float32(nil), m.Data...)
	return m
}

func randomMatrix(r *rand.Rand, rows, cols, pad int, trans bool) Matrix {
	if trans {
		rows, cols = cols, rows
	}
	stride := cols + pad
	d := make([]float32, rows*stride)
	for i := range d {
		d[i] = r.Float32()*2 - 1
	}
	return Matrix{Data: d, Stride: stride, Trans: trans}
}

// TestSgemmMatchesReference runs every micro-kernel the CPU supports (AVX-512,
// AVX2/FMA, pure Go) on one and three threads on random shapes, odd ones included, every
// transpose combination, padded strides and several alpha/beta pairs, and
// compares each with a float64 reference and with each other.
func TestSgemmMatchesReference(t *testing.T) {
	var engines []*Engine
	for _, k := range availableKernels() {
		for _, threads := range []int{1, 3} {
			e := newEngine(parallel.New(threads), true, k)
			defer e.Close()
			engines = append(engines, e)
		}
	}
	t.Logf("kernels: %d engines over %d micro-kernels", len(engines), len(availableKernels()))
	r := rand.New(rand.NewPCG(1, 2))
	shapes := [][3]int{{1, 1, 1}, {6, 16, 1}, {7, 17, 3}, {5, 3, 300}, {97, 33, 257}, {128, 128, 128}, {13, 200, 9}, {250, 7, 520}, {1, 513, 64}, {193, 1, 31}, {0, 5, 5}, {4, 0, 5}, {3, 4, 0}}
	for i := 0; i < 12; i++ {
		shapes = append(shapes, [3]int{1 + r.IntN(150), 1 + r.IntN(150), 1 + r.IntN(300)})
	}
	scalars := [][2]float32{{1, 0}, {1, 1}, {-0.5, 2}, {2, -1}}
	for _, s := range shapes {
		m, n, k := s[0], s[1], s[2]
		for tr := 0; tr < 4; tr++ {
			ta, tb := tr&1 == 1, tr&2 == 2
			ab := scalars[(m+n+k+tr)%len(scalars)]
			name := fmt.Sprintf("m%d_n%d_k%d_ta%v_tb%v_a%v_b%v", m, n, k, ta, tb, ab[0], ab[1])
			t.Run(name, func(t *testing.T) {
				a := randomMatrix(r, m, k, r.IntN(3), ta)
				b := randomMatrix(r, k, n, r.IntN(3), tb)
				c0 := randomMatrix(r, m, n, r.IntN(3), false)
				if ab[1] == 0 && len(c0.Data) > 0 {
					c0.Data[0] = float32(math.NaN()) // beta = 0 must ignore old C
				}
				want := reference(m, n, k, ab[0], a, b, ab[1], c0.Data, c0.Stride)
				for _, e := range engines {
					c := copyOf(c0)
					if err := e.Sgemm(m, n, k, ab[0], a, b, ab[1], c); err != nil {
						t.Fatal(err)
					}
					tol := 1e-5 * float64(k+1)
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							got := float64(c.Data[i*c.Stride+j])
							if d := math.Abs(got - want[i*n+j]); d > tol*(1+math.Abs(want[i*n+j])) || math.IsNaN(got) {
								t.Fatalf("%s (%d threads): C[%d,%d] = %v, want %v", e.Kernel(), e.Threads(), i, j, got, want[i*n+j])
							}
						}
						// Padding between rows must be untouched.
						for j := n; j < c.Stride && i < m-1; j++ {
							if math.Float32bits(c.Data[i*c.Stride+j]) != math.Float32bits(c0.Data[i*c.Stride+j]) {
								t.Fatalf("%s wrote padding C[%d,%d]", e.Kernel(), i, j)
							}
						}
					}
				}
			})
		}
	}
}

func TestSgemmRejectsBadViews(t *testing.T) {
	e := New(1)
	defer e.Close()
	ok := func(r, c int) Matrix { return Matrix{Data: make([]float32, r*c), Stride: c} }
	tests := []struct {
		name    string
		a, b, c Matrix
	}{
		{"short A", Matrix{Data: make([]float32, 5), Stride: 3}, ok(3, 4), ok(2, 4)},
		{"stride below columns", Matrix{Data: make([]float32, 6), Stride: 2}, ok(3, 4), ok(2, 4)},
		{"short C", ok(2, 3), ok(3, 4), Matrix{Data: make([]float32, 7), Stride: 4}},
		{"transposed C", ok(2, 3), ok(3, 4), Matrix{Data: make([]float32, 8), Stride: 2, Trans: true}},
	}
	for _, tt := range tests {
		if err := e.Sgemm(2, 4, 3, 1, tt.a, tt.b, 0, tt.c); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
}

// TestSgemmAllocatesNothing: a product allocates nothing once the
// engine is warm, with B packed (transposed) and with B read unpacked
// (a short product, where the kernel can).
func TestSgemmAllocatesNothing(t *testing.T) {
	e := New(2)
	defer e.Close()
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range []struct {
		name      string
		m, n, k   int
		transB    bool
		unpackedB bool // B read unpacked where the kernel can (directB)
	}{
		{"B transposed", 200, 150, 300, true, false},
		{"short product", 64, 784, 64, false, true},
	} {
		a, b, c := randomMatrix(r, s.m, s.k, 0, false), randomMatrix(r, s.k, s.n, 0, s.transB), randomMatrix(r, s.m, s.n, 0, false)
		if s.unpackedB && e.k.tileColsB != nil && !e.k.directB(b, s.m, s.n, s.k) {
			t.Fatalf("%s: B is not read unpacked", s.name)
		}
		allocs := testing.AllocsPerRun(20, func() {
			if err := e.Sgemm(s.m, s.n, s.k, 1, a, b, 0, c); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Fatalf("%s: Sgemm allocates %v times per call", s.name, allocs)
		}
	}
}

// TestNewKernelWithPool: a user's override picks each kernel this CPU
// runs, by its first word or its whole name, and one it cannot run is an
// error naming those it can.
func TestNewKernelWithPool(t *testing.T) {
	p := parallel.New(1)
	defer p.Close()
	names := Kernels()
	if len(names) == 0 || names[len(names)-1] != "go" {
		t.Fatalf("kernels %v: the Go kernel runs everywhere and comes last", names)
	}
	for _, k := range availableKernels() {
		for _, name := range []string{k.id(), k.name} {
			e, err := NewKernelWithPool(p, name)
			if err != nil || e.Kernel() != k.name {
				t.Fatalf("%q: %v, %v", name, e, err)
			}
		}
	}
	_, err := NewKernelWithPool(p, "sse9")
	if err == nil {
		t.Fatal("sse9: no error")
	}
	for _, want := range append([]string{`"sse9"`}, names...) {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestSplitAtDepthSameBits: a product split along K at multiples of
// Depth, its parts added into C in order, gives the bits of the whole
// product (the convolutions' column matrices are built and multiplied a
// block of Depth rows at a time on that promise), for every kernel and
// both transposes of B; split elsewhere it need not.
func TestSplitAtDepthSameBits(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	p := parallel.New(1)
	defer p.Close()
	for _, k := range availableKernels() {
		e := newEngine(p, false, k)
		depth := e.Depth()
		m, n, kk := 2*k.mr+3, 3*k.nr+5, 2*depth+depth/2+7
		for _, transB := range []bool{false, true} {
			a := randomMatrix(r, m, kk, 1, false)
			b := randomMatrix(r, kk, n, 2, transB)
			whole := make([]float32, m*n)
			must(t, e.SgemmSerial(0, m, n, kk, 1, a, b, 0, Matrix{Data: whole, Stride: n}))
			parts := make([]float32, m*n)
			for k0 := 0; k0 < kk; k0 += depth {
				k1 := min(kk, k0+depth)
				ap, bp := a.ColsFrom(k0), b.RowsFrom(k0)
				beta := float32(1)
				if k0 == 0 {
					beta = 0
				}
				must(t, e.SgemmSerial(0, m, n, k1-k0, 1, ap, bp, beta, Matrix{Data: parts, Stride: n}))
			}
			for i := range whole {
				if math.Float32bits(whole[i]) != math.Float32bits(parts[i]) {
					t.Fatalf("%s, B transposed %v: C[%d] = %v split at multiples of %d, %v whole", k.name, transB, i, parts[i], depth, whole[i])
				}
			}
		}
	}
}

// TestDirectASameBits: a narrow product whose A the kernel reads
// unpacked (tileRows, directA) gives the bits of the same product with A
// packed, on one and two threads: ragged rows and columns, several depth
// blocks, A a view with a row stride wider than its depth, beta 0, 1 and
// another, and B transposed or not. Products directA leaves to packing
// (alpha ≠ 1, A transposed, wider than directAMaxCols) are covered by
// TestSgemmMatchesReference.
func TestDirectASameBits(t *testing.T) {
	ks := kernelsWith(t, func(k kernel) bool { return k.tileRows != nil }, "reads A unpacked (tileRows: the AVX2 and AVX-512 kernels)")
	r := rand.New(rand.NewPCG(13, 14))
	for _, k := range ks {
		packed := k
		packed.tileRows = nil
		for _, threads := range []int{1, 2} {
			direct, ref := newEngine(parallel.New(threads), true, k), newEngine(parallel.New(threads), true, packed)
			defer direct.Close()
			defer ref.Close()
			for _, s := range [][3]int{{256, 64, 1152}, {12, 32, 1}, {k.mc + 7, 33, 2*k.kc + 9}, {5, 64, 40}, {37, 1, 300}, {2*k.mr + 1, 50, k.kc}} {
				m, n, kk := s[0], s[1], s[2]
				if !k.directA(Matrix{}, n, 1) {
					t.Fatalf("%s: a %d-column product is not read unpacked", k.name, n)
				}
				for _, beta := range []float32{0, 1, -0.5} {
					for _, transB := range []bool{false, true} {
						a := randomMatrix(r, m, kk, 3, false)
						b := randomMatrix(r, kk, n, 1, transB)
						c0 := randomMatrix(r, m, n, 2, false)
						got, want := copyOf(c0), copyOf(c0)
						must(t, direct.Sgemm(m, n, kk, 1, a, b, beta, got))
						must(t, ref.Sgemm(m, n, kk, 1, a, b, beta, want))
						label := fmt.Sprintf("%s, %d threads, %d×%d×%d, beta %v, B transposed %v", k.name, threads, m, n, kk, beta, transB)
						for i := range want.Data {
							if math.Float32bits(got.Data[i]) != math.Float32bits(want.Data[i]) {
								t.Fatalf("%s: C[%d] = %v with A unpacked, %v packed", label, i, got.Data[i], want.Data[i])
							}
						}
					}
				}
			}
		}
	}
}

// TestDirectAChoice: only an untransposed A, alpha 1, a kernel with
// tileRows and a product at most directAMaxCols wide read A unpacked.
func TestDirectAChoice(t *testing.T) {
	rows := func(kc int, a []float32, lda int, b, c []float32, ldc int, add bool) {}
	with, without := kernel{tileRows: rows}, kernel{}
	for _, c := range []struct {
		name  string
		k     kernel
		trans bool
		alpha float32
		n     int
		want  bool
	}{
		{"narrow", with, false, 1, 64, true},
		{"one column", with, false, 1, 1, true},
		{"widest", with, false, 1, directAMaxCols, true},
		{"too wide", with, false, 1, directAMaxCols + 1, false},
		{"A transposed", with, true, 1, 64, false},
		{"alpha not 1", with, false, 2, 64, false},
		{"no tileRows", without, false, 1, 64, false},
	} {
		if got := c.k.directA(Matrix{Trans: c.trans}, c.n, c.alpha); got != c.want {
			t.Errorf("%s: directA = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestDirectBSameBits: a short product whose B the kernel reads unpacked
// (tileColsB, directB) gives the bits of the same product with B packed,
// on one and two threads: ragged rows and columns, several depth
// blocks, B a view with a row stride wider than its columns, alpha and
// beta other than 1 and 0, and A transposed or not. Products directB
// leaves to packing (B transposed, taller than directBMaxRows, strides
// that crowd the cache) are covered by TestSgemmMatchesReference.
func TestDirectBSameBits(t *testing.T) {
	ks := kernelsWith(t, func(k kernel) bool { return k.tileColsB != nil }, "reads B unpacked (tileColsB: the AVX2 and AVX-512 kernels)")
	r := rand.New(rand.NewPCG(15, 16))
	for _, k := range ks {
		packed := k
		packed.tileColsB = nil
		for _, threads := range []int{1, 2} {
			direct, ref := newEngine(parallel.New(threads), true, k), newEngine(parallel.New(threads), true, packed)
			defer direct.Close()
			defer ref.Close()
			for _, s := range [][4]int{{64, 784, 64, 0}, {directBMaxRows, 300, 2*k.kc + 9, 5}, {k.mr + 1, directBMinCols + 3, 70, 1}, {1, directBMinCols, directBMinDepth, 1}, {37, 1000, k.kc, 3}, {13, 2*directBMinCols + 5, 65, 0}} {
				m, n, kk, pad := s[0], s[1], s[2], s[3]
				for _, ab := range [][2]float32{{1, 0}, {1, 1}, {-2, -0.5}} {
					for _, transA := range []bool{false, true} {
						a := randomMatrix(r, m, kk, 2, transA)
						b := randomMatrix(r, kk, n, pad, false)
						if !k.directB(b, m, n, kk) {
							t.Fatalf("%s: B of a %d-row product (stride %d) is not read unpacked", k.name, m, b.Stride)
						}
						c0 := randomMatrix(r, m, n, 1, false)
						got, want := copyOf(c0), copyOf(c0)
						must(t, direct.Sgemm(m, n, kk, ab[0], a, b, ab[1], got))
						must(t, ref.Sgemm(m, n, kk, ab[0], a, b, ab[1], want))
						label := fmt.Sprintf("%s, %d threads, %d×%d×%d, alpha %v, beta %v, A transposed %v", k.name, threads, m, n, kk, ab[0], ab[1], transA)
						for i := range want.Data {
							if math.Float32bits(got.Data[i]) != math.Float32bits(want.Data[i]) {
								t.Fatalf("%s: C[%d] = %v with B unpacked, %v packed", label, i, got.Data[i], want.Data[i])
							}
						}
					}
				}
			}
		}
	}
}

// TestShortTilesSameBits: products whose last panel of A has fewer rows
// than the kernel's tile, run with the kernel's short tiles (shortFor),
// give the bits of the same products run with the full tile on every
// panel, on one and two threads: every count of rows left in a panel,
// ragged and full last columns, B packed and read unpacked (tileColsB),
// several depth blocks, alpha and beta other than 1 and 0, A transposed
// or not.
func TestShortTilesSameBits(t *testing.T) {
	ks := kernelsWith(t, func(k kernel) bool { return len(k.short) > 0 }, "has short tiles (the AVX2 and AVX-512 kernels)")
	r := rand.New(rand.NewPCG(17, 18))
	for _, k := range ks {
		full := k
		full.short = nil
		var ms []int
		for m := 1; m <= 2*k.mr; m++ {
			ms = append(ms, m)
		}
		ms = append(ms, 64, k.mc+4, k.mc+k.mr+8)
		for _, threads := range []int{1, 2} {
			short, ref := newEngine(parallel.New(threads), true, k), newEngine(parallel.New(threads), true, full)
			defer short.Close()
			defer ref.Close()
			for _, m := range ms {
				// n, depth and B's padding: packed with a ragged last
				// panel; packed and full; read unpacked (directB) over
				// several depth blocks.
				for _, s := range [][3]int{{3*k.nr + 7, 9, 0}, {2 * k.nr, 40, 0}, {directBMinCols + 44, 2*k.kc + 9, 5}} {
					n, kk, pad := s[0], s[1], s[2]
					for _, ab := range [][2]float32{{1, 0}, {-2, 0.5}} {
						for _, transA := range []bool{false, true} {
							a := randomMatrix(r, m, kk, 1, transA)
							b := randomMatrix(r, kk, n, pad, false)
							c0 := randomMatrix(r, m, n, 3, false)
							got, want := copyOf(c0), copyOf(c0)
							must(t, short.Sgemm(m, n, kk, ab[0], a, b, ab[1], got))
							must(t, ref.Sgemm(m, n, kk, ab[0], a, b, ab[1], want))
							for i := range want.Data {
								if math.Float32bits(got.Data[i]) != math.Float32bits(want.Data[i]) {
									t.Fatalf("%s, %d threads, %d×%d×%d (B unpacked %v), alpha %v, beta %v, A transposed %v: C[%d] = %v with short tiles, %v with full ones", k.name, threads, m, n, kk, k.directB(b, m, n, kk), ab[0], ab[1], transA, i, got.Data[i], want.Data[i])
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestShortFor: a panel takes the shortest short tile with at least its
// rows, and the full tile past the tallest.
func TestShortFor(t *testing.T) {
	k := kernel{mr: 12, short: []shortTile{{rows: 4}, {rows: 8}}}
	for _, c := range []struct{ mr, want int }{{1, 4}, {4, 4}, {5, 8}, {8, 8}, {9, 12}, {11, 12}} {
		if got := k.shortFor(c.mr).rows; got != c.want {
			t.Errorf("shortFor(%d) runs %d rows, want %d", c.mr, got, c.want)
		}
	}
	if got := (kernel{mr: 6}).shortFor(4).rows; got != 6 {
		t.Errorf("a kernel without short tiles: shortFor(4) runs %d rows, want 6", got)
	}
}

// kernelsWith returns the micro-kernels this CPU runs that have what has
// looks for, and skips the test when none has: "no micro-kernel on this
// CPU " and what.
func kernelsWith(t *testing.T, has func(kernel) bool, what string) []kernel {
	t.Helper()
	var ks []kernel
	for _, k := range availableKernels() {
		if has(k) {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		t.Skip("no micro-kernel on this CPU " + what)
	}
	return ks
}

// TestDirectBChoice: only an untransposed B whose row stride is not a
// multiple of directBStrideBlock, a kernel with tileColsB and a product
// at most directBMaxRows tall, at least directBMinCols wide and at least
// directBMinDepth deep read B unpacked.
func TestDirectBChoice(t *testing.T) {
	cols := func(kc int, a, b []float32, ldb int, c []float32, ldc int, add bool) {}
	with, without := kernel{tileColsB: cols}, kernel{}
	for _, c := range []struct {
		name   string
		k      kernel
		trans  bool
		stride int
		m, n   int
		depth  int
		want   bool
	}{
		{"56×56 map", with, false, 3136, 64, 3136, 256, true},
		{"one row", with, false, 3136, 1, 3136, 256, true},
		{"tallest", with, false, 784, directBMaxRows, 784, 512, true},
		{"too tall", with, false, 784, directBMaxRows + 1, 784, 512, false},
		{"narrowest", with, false, 338, 32, directBMinCols, 64, true},
		{"too narrow", with, false, 196, 64, directBMinCols - 1, 1024, false},
		{"shallowest", with, false, 338, 32, 338, directBMinDepth, true},
		{"too shallow", with, false, 288, 64, 288, directBMinDepth - 1, false},
		{"B transposed", with, true, 784, 64, 784, 256, false},
		{"32×32 map", with, false, 1024, 64, 1024, 256, false},
		{"stride a multiple of the block", with, false, 3 * directBStrideBlock, 64, 384, 256, false},
		{"no tileColsB", without, false, 3136, 64, 3136, 256, false},
	} {
		if got := c.k.directB(Matrix{Trans: c.trans, Stride: c.stride}, c.m, c.n, c.depth); got != c.want {
			t.Errorf("%s: directB = %v, want %v", c.name, got, c.want)
		}
	}
}

// sameBits fails the test where got differs from want in any bit.
func sameBits(t *testing.T, label string, got, want []float32) {
	t.Helper()
	for i, v := range want {
		if math.Float32bits(got[i]) != math.Float32bits(v) {
			t.Fatalf("%s: C[%d] = %v, the unpacked product gives %v", label, i, got[i], v)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSgemmPackedA: a product with A packed once (PackA) gives
// SgemmSerial's bits, for every micro-kernel, A transposed or not,
// across depth blocks, ragged panels and row blocks, on any worker's
// buffers, and again with the same packing; a packing of another shape
// or kernel is refused, and a call allocates nothing.
func TestSgemmPackedA(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	kernels := availableKernels()
	for _, kr := range kernels {
		e := newEngine(parallel.New(2), true, kr)
		for _, s := range [][3]int{{64, 100, 147}, {200, 40, 300}, {7, 33, 5}, {1, 1, 1}, {kr.mc + 5, 50, 2*kr.kc + 3}, {0, 8, 4}, {9, 0, 4}} {
			m, n, k := s[0], s[1], s[2]
			for _, ta := range []bool{false, true} {
				for _, beta := range []float32{0, 1, -0.5} {
					name := fmt.Sprintf("%s, m%d n%d k%d, A transposed %v, beta %v", e.Kernel(), m, n, k, ta, beta)
					a, b := randomMatrix(r, m, k, 1, ta), randomMatrix(r, k, n, 2, false)
					c0 := randomMatrix(r, m, n, 1, false)
					want := copyOf(c0)
					must(t, e.SgemmSerial(0, m, n, k, 1, a, b, beta, want))
					pa, err := e.PackA(nil, m, k, a)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					for worker := range 2 {
						got := copyOf(c0)
						if err := e.SgemmSerialPackedA(worker, m, n, k, pa, b, beta, got); err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						sameBits(t, fmt.Sprintf("%s, worker %d", name, worker), got.Data, want.Data)
					}
				}
			}
		}
		a := randomMatrix(r, 8, 30, 0, false)
		pa, err := e.PackA(nil, 8, 30, a)
		if err != nil {
			t.Fatal(err)
		}
		b, c := randomMatrix(r, 30, 40, 0, false), randomMatrix(r, 8, 40, 0, false)
		for _, bad := range []struct {
			name            string
			worker, m, n, k int
		}{{"other depth", 0, 8, 40, 29}, {"other height", 0, 7, 40, 30}, {"negative width", 0, 8, -1, 30}, {"worker out of range", 2, 8, 40, 30}} {
			if err := e.SgemmSerialPackedA(bad.worker, bad.m, bad.n, bad.k, pa, b, 0, c); err == nil {
				t.Errorf("%s: %s accepted", e.Kernel(), bad.name)
			}
		}
		if _, err := e.PackA(nil, 9, 30, a); err == nil {
			t.Errorf("%s: packing more rows than A holds accepted", e.Kernel())
		}
		if allocs := testing.AllocsPerRun(10, func() { _ = e.SgemmSerialPackedA(1, 8, 40, 30, pa, b, 0, c) }); allocs != 0 {
			t.Errorf("%s: SgemmSerialPackedA allocates %v times a call", e.Kernel(), allocs)
		}
		for _, other := range kernels {
			if other.mr == kr.mr && other.kc == kr.kc {
				continue
			}
			o := newEngine(parallel.New(1), true, other)
			if err := o.SgemmSerialPackedA(0, 8, 40, 30, pa, b, 0, c); err == nil {
				t.Errorf("%s's packing accepted by %s", e.Kernel(), o.Kernel())
			}
			o.Close()
		}
		e.Close()
	}
}

// TestSgemmPackedB: a product with B packed once (PackB) gives Sgemm's
// bits, for every micro-kernel, on one and three threads (C split by rows
// and by columns) and on one worker's buffers (SgemmSerialPackedB), B
// transposed or not, across depth blocks and ragged panels, and again
// with the same packing; a packing of another shape or kernel is
// refused, and a call allocates nothing.
func TestSgemmPackedB(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	kernels := availableKernels()
	for _, kr := range kernels {
		for _, threads := range []int{1, 3} {
			e := newEngine(parallel.New(threads), true, kr)
			for _, s := range [][3]int{{32, 1024, 600}, {200, 40, 300}, {7, 33, 5}, {1, 1, 1}, {64, 512, 2*kr.kc + 3}, {0, 8, 4}} {
				m, n, k := s[0], s[1], s[2]
				for _, tb := range []bool{false, true} {
					for _, ab := range [][2]float32{{1, 0}, {-0.5, 2}} {
						name := fmt.Sprintf("%s, %d threads, m%d n%d k%d, B transposed %v, alpha %v beta %v", e.Kernel(), threads, m, n, k, tb, ab[0], ab[1])
						a, b := randomMatrix(r, m, k, 1, false), randomMatrix(r, k, n, 2, tb)
						c0 := randomMatrix(r, m, n, 1, false)
						want := copyOf(c0)
						if err := e.Sgemm(m, n, k, ab[0], a, b, ab[1], want); err != nil {
							t.Fatal(err)
						}
						pb, err := e.PackB(nil, k, n, b)
						if err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						for call := range 3 {
							got := copyOf(c0)
							var err error
							if call < 2 {
								err = e.SgemmPackedB(m, n, k, ab[0], a, pb, ab[1], got)
							} else {
								err = e.SgemmSerialPackedB(threads-1, m, n, k, ab[0], a, pb, ab[1], got)
							}
							if err != nil {
								t.Fatalf("%s: %v", name, err)
							}
							sameBits(t, fmt.Sprintf("%s, call %d", name, call), got.Data, want.Data)
						}
					}
				}
			}
			b := randomMatrix(r, 30, 40, 0, false)
			pb, err := e.PackB(nil, 30, 40, b)
			if err != nil {
				t.Fatal(err)
			}
			c := randomMatrix(r, 8, 40, 0, false)
			a := randomMatrix(r, 8, 30, 0, false)
			for _, bad := range []struct {
				name    string
				m, n, k int
			}{{"other depth", 8, 40, 29}, {"other width", 8, 39, 30}, {"negative rows", -1, 40, 30}} {
				if err := e.SgemmPackedB(bad.m, bad.n, bad.k, 1, a, pb, 0, c); err == nil {
					t.Errorf("%s, %d threads: %s accepted", e.Kernel(), threads, bad.name)
				}
				if err := e.SgemmSerialPackedB(0, bad.m, bad.n, bad.k, 1, a, pb, 0, c); err == nil {
					t.Errorf("%s, %d threads: %s accepted on one worker", e.Kernel(), threads, bad.name)
				}
			}
			if err := e.SgemmSerialPackedB(threads, 8, 40, 30, 1, a, pb, 0, c); err == nil {
				t.Errorf("%s, %d threads: worker %d accepted", e.Kernel(), threads, threads)
			}
			if allocs := testing.AllocsPerRun(10, func() { _ = e.SgemmSerialPackedB(0, 8, 40, 30, 1, a, pb, 0, c) }); allocs != 0 {
				t.Errorf("%s, %d threads: SgemmSerialPackedB allocates %v times a call", e.Kernel(), threads, allocs)
			}
			if _, err := e.PackB(nil, 31, 40, b); err == nil {
				t.Errorf("%s: packing more rows than B holds accepted", e.Kernel())
			}
			if allocs := testing.AllocsPerRun(10, func() { _ = e.SgemmPackedB(8, 40, 30, 1, a, pb, 0, c) }); allocs != 0 {
				t.Errorf("%s, %d threads: SgemmPackedB allocates %v times a call", e.Kernel(), threads, allocs)
			}
			for _, other := range kernels {
				if other.nr == kr.nr {
					continue
				}
				o := newEngine(parallel.New(1), true, other)
				if err := o.SgemmPackedB(8, 40, 30, 1, a, pb, 0, c); err == nil {
					t.Errorf("%s's packing accepted by %s", e.Kernel(), o.Kernel())
				}
				o.Close()
			}
			e.Close()
		}
	}
}
