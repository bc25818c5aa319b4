package ring

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// TestHalfConversionsMatchTorch: rounding float32 to bfloat16 and float16
// (ties, overflow, subnormals, NaN) and widening 16-bit patterns back give
// torch's bits exactly (testdata/gen_half.py); for bfloat16 NaNs only
// NaN-ness, torch's own payload varying with its code path.
func TestHalfConversionsMatchTorch(t *testing.T) {
	raw, err := os.ReadFile("testdata/half.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		F32, Patterns []uint32
		BF16, FP16    []uint16
		BF16Wide      []uint32 `json:"bf16_f32"`
		FP16Wide      []uint32 `json:"fp16_f32"`
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.F32) < 1000 || len(fx.F32) != len(fx.BF16) || len(fx.F32) != len(fx.FP16) || len(fx.Patterns) != len(fx.BF16Wide) {
		t.Fatalf("fixture sizes: %d values, %d bf16, %d fp16; %d patterns", len(fx.F32), len(fx.BF16), len(fx.FP16), len(fx.Patterns))
	}
	bad := 0
	for i, bits := range fx.F32 {
		f := math.Float32frombits(bits)
		if got := NewBFloat16(f); f != f {
			// torch's NaN depends on its code path (0x7fc0 or 0xffff):
			// only NaN-ness is compared.
			if !math.IsNaN(float64(got.Float32())) {
				bad++
				t.Errorf("bfloat16(NaN %#08x) = %#04x, not a NaN", bits, uint16(got))
			}
		} else if uint16(got) != fx.BF16[i] {
			bad++
			t.Errorf("bfloat16(%#08x = %g) = %#04x, torch %#04x", bits, f, uint16(got), fx.BF16[i])
		}
		if got := NewFloat16(f); uint16(got) != fx.FP16[i] {
			bad++
			t.Errorf("float16(%#08x = %g) = %#04x, torch %#04x", bits, f, uint16(got), fx.FP16[i])
		}
		if bad > 20 {
			t.FailNow()
		}
	}
	for i, p := range fx.Patterns {
		if got := math.Float32bits(BFloat16(p).Float32()); got != fx.BF16Wide[i] {
			t.Errorf("bfloat16 %#04x widens to %#08x, torch %#08x", p, got, fx.BF16Wide[i])
		}
		if got := math.Float32bits(Float16(p).Float32()); got != fx.FP16Wide[i] {
			t.Errorf("float16 %#04x widens to %#08x, torch %#08x", p, got, fx.FP16Wide[i])
		}
	}
}

// TestHalfRoundTrip: every 16-bit pattern that is not a NaN survives
// widening and rounding back.
func TestHalfRoundTrip(t *testing.T) {
	for p := range 1 << 16 {
		if b := BFloat16(p); !math.IsNaN(float64(b.Float32())) && NewBFloat16(b.Float32()) != b {
			t.Fatalf("bfloat16 %#04x → %g → %#04x", p, b.Float32(), uint16(NewBFloat16(b.Float32())))
		}
		if h := Float16(p); !math.IsNaN(float64(h.Float32())) && NewFloat16(h.Float32()) != h {
			t.Fatalf("float16 %#04x → %g → %#04x", p, h.Float32(), uint16(NewFloat16(h.Float32())))
		}
	}
}

// halfReference combines in[q][i] as the owners do: widened to float32,
// op in rank order, Avg divided by n, rounded once.
func halfReference[H half](op Op, in [][]H) []H {
	out := make([]H, len(in[0]))
	for i := range out {
		acc := widen(in[0][i])
		for q := 1; q < len(in); q++ {
			v := widen(in[q][i])
			switch op {
			case Sum, Avg:
				acc += v
			case Prod:
				acc *= v
			case Max:
				acc = max(acc, v)
			case Min:
				acc = min(acc, v)
			}
		}
		if op == Avg {
			acc /= float32(len(in))
		}
		out[i] = narrow[H](acc)
	}
	return out
}

// TestHalfReductions: AllReduce, ReduceScatter and Reduce of bfloat16 and
// float16 give every rank (or the root) the contributions combined in
// float32 and rounded once — bit for bit the reference — for groups of 1
// to 8 and counts 0 to 1000 in 64-byte frames.
func TestHalfReductions(t *testing.T) {
	t.Run("bfloat16", func(t *testing.T) { testHalfReductions[BFloat16](t) })
	t.Run("float16", func(t *testing.T) { testHalfReductions[Float16](t) })
}

func testHalfReductions[H half](t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		for _, count := range []int{0, 1, 7, 1000} {
			f := contributions(n, n*count)
			in := make([][]H, n)
			for r := range in {
				in[r] = make([]H, n*count)
				for i, v := range f[r] {
					in[r][i] = narrow[H](v * 3)
				}
			}
			for _, op := range []Op{Sum, Avg, Max, Min, Prod} {
				want := halfReference(op, in)
				out := make([][]H, n)
				onEveryRank(t, n, 64, func(ctx context.Context, r int, c *Collectives) error {
					out[r] = append([]H(nil), in[r]...)
					return AllReduce(ctx, c, out[r], op)
				})
				for r := range n {
					for i := range want {
						if out[r][i] != want[i] {
							t.Fatalf("n=%d count=%d AllReduce %v: rank %d element %d is %g, want %g", n, count, op, r, i, widen(out[r][i]), widen(want[i]))
						}
					}
				}
				onEveryRank(t, n, 64, func(ctx context.Context, r int, c *Collectives) error {
					out[r] = make([]H, count)
					return ReduceScatter(ctx, c, in[r], out[r], op)
				})
				for r := range n {
					for i := range count {
						if out[r][i] != want[r*count+i] {
							t.Fatalf("n=%d count=%d ReduceScatter %v: rank %d element %d differs", n, count, op, r, i)
						}
					}
				}
				root := n / 2
				onEveryRank(t, n, 64, func(ctx context.Context, r int, c *Collectives) error {
					out[r] = append([]H(nil), in[r]...)
					return ReduceToRoot(ctx, c, out[r], op, root)
				})
				for i := range want {
					if out[root][i] != want[i] {
						t.Fatalf("n=%d count=%d Reduce %v: element %d differs", n, count, op, i)
					}
				}
			}
		}
	}
}

// TestHalfBulkMatchesScalar: the loops written per type (NarrowInto,
// WidenInto, the sums of reduceHalf, divideHalf, accumulateInto) give
// the bits of the element-by-element conversions, special values
// included.
func TestHalfBulkMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	src := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		1e-40, -3e-8, 65504, 65520, 1e30, 1 + 1.0/256, 1 + 1.0/2048}
	for len(src) < 4096 {
		src = append(src, float32(rng.NormFloat64()*math.Pow(10, float64(rng.IntN(12)-6))))
	}
	bulkMatches(t, src, NewBFloat16)
	bulkMatches(t, src, NewFloat16)
}

func bulkMatches[H half](t *testing.T, src []float32, scalar func(float32) H) {
	t.Helper()
	same := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b) }
	h := make([]H, len(src))
	NarrowInto(h, src)
	for i, v := range src {
		if h[i] != scalar(v) {
			t.Fatalf("%T NarrowInto(%v) = %#x, want %#x", h[i], v, h[i], scalar(v))
		}
	}
	w := make([]float32, len(h))
	WidenInto(w, h)
	for i, x := range h {
		if !same(w[i], widen(x)) {
			t.Fatalf("%T WidenInto(%#x) = %v, want %v", x, x, w[i], widen(x))
		}
	}
	rev := slices.Clone(h)
	slices.Reverse(rev)
	for _, op := range []Op{Sum, Avg, Prod, Max, Min} {
		got := make([]H, len(h))
		reduceHalf(op, got, h, rev)
		acc := make([]float32, len(h))
		WidenInto(acc, h)
		accumulateInto(op, acc, rev)
		for i := range h {
			x, y := widen(h[i]), widen(rev[i])
			var v float32
			switch op {
			case Sum, Avg:
				v = x + y
			case Prod:
				v = x * y
			case Max:
				v = max(x, y)
			case Min:
				v = min(x, y)
			}
			if got[i] != narrow[H](v) && !(v != v && widen(got[i]) != widen(got[i])) {
				t.Fatalf("%T reduce %v of %v and %v = %#x, want %#x", h[i], op, x, y, got[i], narrow[H](v))
			}
			if !same(acc[i], v) {
				t.Fatalf("%T accumulate %v of %v and %v = %v, want %v", h[i], op, x, y, acc[i], v)
			}
		}
	}
	div := slices.Clone(h)
	divideHalf(div, 3)
	for i, x := range h {
		if want := narrow[H](widen(x) / 3); div[i] != want && widen(div[i]) == widen(div[i]) {
			t.Fatalf("%T divide %v by 3 = %#x, want %#x", x, widen(x), div[i], want)
		}
	}
}
