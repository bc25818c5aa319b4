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
// to 8 and counts 0 to 1000 in 64-byte frames, and blocks of several
// combining tiles (4500 elements a rank) in groups of 2 and 3.
func TestHalfReductions(t *testing.T) {
	t.Run("bfloat16", func(t *testing.T) { testHalfReductions[BFloat16](t) })
	t.Run("float16", func(t *testing.T) { testHalfReductions[Float16](t) })
}

func testHalfReductions[H half](t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		for _, count := range []int{0, 1, 7, 1000, 4500} {
			if count > combineTile && n > 3 {
				continue // several tiles a block: two and three ranks suffice
			}
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

// referenceNewFloat16 is NewFloat16 written case by case (the first
// implementation, checked against torch): it rounds f to the nearest float16, ties to even, as torch's
// conversion does: beyond the largest finite float16 (65504) to infinity,
// below the smallest normal to subnormals, NaN to NaN.
func referenceNewFloat16(f float32) Float16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	abs := b & 0x7FFFFFFF
	switch {
	case abs > 0x7F800000: // NaN: the quiet one, signed, as torch makes it
		return Float16(sign | 0x7E00)
	case abs >= 0x477FF000: // rounds to 65520 or more: infinity
		return Float16(sign | 0x7C00)
	case abs < 0x38800000: // below 2^-14: a subnormal (or zero)
		// The value in units of 2^-24, rounded to nearest even.
		if abs < 0x33000000 { // below 2^-25: rounds to zero
			return Float16(sign)
		}
		e := abs >> 23
		m := abs&0x7FFFFF | 0x800000
		shift := 126 - e // 14 + (127−e) − 1 bits to drop, for 2^-24 units
		half := uint32(1) << (shift - 1)
		r := m >> shift
		rem := m & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return Float16(sign | uint16(r))
	}
	// Normal: rebias the exponent, round the mantissa's 13 dropped bits.
	h := (abs - 0x38000000) >> 13
	rem := abs & 0x1FFF
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, up to infinity: still right
	}
	return Float16(sign | uint16(h))
}

// referenceFloat32 is Float16.Float32 written case by case: h exactly
// (a NaN quiet, as torch widens it).
func referenceFloat32(h Float16) float32 {
	sign := uint32(h&0x8000) << 16
	e := uint32(h>>10) & 0x1F
	m := uint32(h) & 0x3FF
	switch {
	case e == 0x1F && m == 0:
		return math.Float32frombits(sign | 0x7F800000)
	case e == 0x1F: // NaN, made quiet as torch does
		return math.Float32frombits(sign | 0x7FC00000 | m<<13)
	case e != 0:
		return math.Float32frombits(sign | (e+112)<<23 | m<<13)
	case m == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: m·2^-24, made normal.
	e = 113
	for m&0x400 == 0 {
		m <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (m&0x3FF)<<13)
}

// TestFloat16MatchesReference: the branch-light conversions give the
// case-by-case ones' bits for every float16 and for float32s across the
// whole range (every 4099th bit pattern, and each float16's neighbourhood:
// ties and the values either side).
func TestFloat16MatchesReference(t *testing.T) {
	for h := range 1 << 16 {
		got, want := Float16(h).Float32(), referenceFloat32(Float16(h))
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("Float16(%#04x).Float32() = %#08x, want %#08x", h, math.Float32bits(got), math.Float32bits(want))
		}
	}
	check := func(b uint32) {
		f := math.Float32frombits(b)
		if got, want := NewFloat16(f), referenceNewFloat16(f); got != want {
			t.Fatalf("NewFloat16(%v = %#08x) = %#04x, want %#04x", f, b, got, want)
		}
	}
	for b := uint64(0); b < 1<<32; b += 4099 {
		check(uint32(b))
	}
	for h := range 1 << 15 {
		w := math.Float32bits(referenceFloat32(Float16(h)))
		for d := uint32(0); d < 1<<13; d += 0x3FF {
			check(w + d)
			check(w - d)
			check((w + d) | 0x80000000)
		}
		check(w + 0x1000) // a tie
		check(w + 0x0FFF)
		check(w + 0x1001)
	}
}

// TestHalfKernelsMatchScalar: NarrowInto, narrowDivInto, WidenInto and
// accumulateInto's sums — the vector kernels where the processor has
// them (AVX2; F16C for float16), then the scalar loop for the tail — give
// the bits of the element-by-element conversions for every length up to
// 40 and every start within a vector: ties both ways, NaNs with payloads
// and signs, infinities, the largest finite values, subnormals.
func TestHalfKernelsMatchScalar(t *testing.T) {
	t.Run("bfloat16", func(t *testing.T) {
		kernelsMatchScalar(t, NewBFloat16, []uint32{0x3F808000, 0x3F818000, 0x3F807FFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x80008000, 0x00018000}, 0x8000, 16)
	})
	t.Run("float16", func(t *testing.T) {
		// 65504, 65519.99, 65520 (a tie to infinity), 2^-24 and half of it,
		// a subnormal tie, 2^-14 minus a bit, a tie at 1.
		kernelsMatchScalar(t, NewFloat16, []uint32{0x477FE000, 0x477FEFFF, 0x477FF000, 0x33800000, 0x33000000, 0x33C00000, 0x387FFFFF, 0x3F801000}, 0x1000, 13)
	})
}

// kernelsMatchScalar checks H's bulk conversions against newH (its
// scalar rounding) on special values, ties (tieBit set, the bits below
// it clear, at random exponents) and random bits.
func kernelsMatchScalar[H half](t *testing.T, newH func(float32) H, special []uint32, tieBit uint32, dropped uint) {
	rng := rand.New(rand.NewPCG(7, 8))
	special = append(special, 0x7F800001, 0xFFC12345, 0x7FFFFFFF, 0x7FC00000, 0x7F800000, 0xFF800000, 0x00000001, 0x80000000, 0)
	bits := make([]uint32, 4096)
	for i := range bits {
		switch i % 4 {
		case 0:
			bits[i] = special[rng.IntN(len(special))]
		case 1: // a tie: the dropped bits exactly half a unit
			e := uint32(rng.IntN(40)+100) << 23
			bits[i] = rng.Uint32()&0x80000000 | e | rng.Uint32()&0x007FFFFF&^(1<<dropped-1) | tieBit
		case 2: // within float16's range
			bits[i] = math.Float32bits(float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)-7))))
		default:
			bits[i] = rng.Uint32()
		}
	}
	src := make([]float32, len(bits))
	for i, b := range bits {
		src[i] = math.Float32frombits(b)
	}
	same := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }
	for start := range 8 {
		for n := range 41 {
			in := src[start*37 : start*37+n]
			got := make([]H, n)
			NarrowInto(got, in)
			for i, v := range in {
				if want := newH(v); got[i] != want {
					t.Fatalf("NarrowInto of %d from %d: element %d (%#08x) = %#04x, want %#04x", n, start, i, math.Float32bits(v), got[i], want)
				}
			}
			narrowDivInto(got, in, 3)
			for i, v := range in {
				if want := newH(v / 3); got[i] != want {
					t.Fatalf("narrowDivInto of %d from %d: element %d (%#08x) / 3 = %#04x, want %#04x", n, start, i, math.Float32bits(v), got[i], want)
				}
			}
			h := make([]H, n)
			for i := range h {
				h[i] = H(rng.Uint32())
			}
			w := make([]float32, n)
			WidenInto(w, h)
			for i, x := range h {
				if !same(w[i], widen(x)) {
					t.Fatalf("WidenInto of %d: element %d (%#04x) = %#08x, want %#08x", n, i, x, math.Float32bits(w[i]), math.Float32bits(widen(x)))
				}
			}
			acc := slices.Clone(in)
			accumulateInto(Sum, acc, h)
			for i := range acc {
				want := in[i] + widen(h[i])
				bothNaN := in[i] != in[i] && widen(h[i]) != widen(h[i])
				if !same(acc[i], want) && !(bothNaN && acc[i] != acc[i]) {
					t.Fatalf("accumulateInto of %d: element %d: %#08x + %#04x = %#08x, want %#08x", n, i, math.Float32bits(in[i]), h[i], math.Float32bits(acc[i]), math.Float32bits(want))
				}
			}
		}
	}
}
