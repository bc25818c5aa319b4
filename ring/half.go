package ring

import "math"

// BFloat16 is a bfloat16 number (8 exponent bits, 7 mantissa bits: float32
// with the low half cut off), as GPUs train in. Collectives move it as two
// bytes and reduce it in float32.
type BFloat16 uint16

// Float16 is an IEEE 754 half-precision number (5 exponent bits, 10
// mantissa bits).
type Float16 uint16

// NewBFloat16 rounds f to the nearest bfloat16, ties to even, as
// torch's conversion does; every NaN becomes torch's canonical NaN.
func NewBFloat16(f float32) BFloat16 {
	b := math.Float32bits(f)
	if b&0x7FFFFFFF > 0x7F800000 { // NaN: torch's canonical one
		return 0x7FC0
	}
	return BFloat16((b + 0x7FFF + (b>>16)&1) >> 16)
}

// Float32 returns b exactly.
func (b BFloat16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// NewFloat16 rounds f to the nearest float16, ties to even, as torch's
// conversion does: beyond the largest finite float16 (65504) to infinity,
// below the smallest normal to subnormals, NaN to NaN. The rounding takes
// no data-dependent branch for normal and subnormal results (the method
// of F. Giesen's float_to_half_fast3_rtne), which a per-element loop
// needs: half of all values round up.
func NewFloat16(f float32) Float16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	abs := b & 0x7FFFFFFF
	switch {
	case abs >= 0x47800000: // 65536 or more, infinity, NaN
		if abs > 0x7F800000 { // NaN: the quiet one, signed, as torch makes it
			return Float16(sign | 0x7E00)
		}
		return Float16(sign | 0x7C00)
	case abs < 0x38800000: // below 2^-14: a subnormal (or zero)
		// Adding 0.5, whose unit in the last place is 2^-24, leaves the
		// value in units of 2^-24 in the low bits, rounded to nearest
		// even by the addition itself.
		v := math.Float32frombits(abs) + 0.5
		return Float16(sign | uint16(math.Float32bits(v)-0x3F000000))
	}
	// Normal: rebias the exponent (−112 << 23) and round the 13 dropped
	// bits, ties to even, by adding 0xFFF plus the kept mantissa's lowest
	// bit; a carry may reach the exponent, up to infinity: still right.
	odd := (abs >> 13) & 1
	return Float16(sign | uint16((abs-0x38000000+0xFFF+odd)>>13))
}

// Float32 returns h exactly (a NaN quiet, as torch widens it).
func (h Float16) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	bits := uint32(h&0x7FFF) << 13 // exponent and mantissa, in float32's places
	switch bits & 0x0F800000 {
	case 0x0F800000: // infinity or NaN: the largest exponent
		bits += 0x70000000
		if bits&0x7FFFFF != 0 {
			bits |= 0x400000 // quiet
		}
	case 0: // zero or subnormal, m·2^-24: as 2^-14·(1 + m/1024) − 2^-14
		return math.Float32frombits(sign | math.Float32bits(math.Float32frombits(bits+0x38800000)-0x1p-14))
	default:
		bits += 0x38000000 // rebias the exponent: 127 − 15
	}
	return math.Float32frombits(sign | bits)
}

// half is either 16-bit float type.
type half interface{ BFloat16 | Float16 }

// widen returns h as float32.
func widen[H half](h H) float32 {
	if b, ok := any(h).(BFloat16); ok {
		return b.Float32()
	}
	return Float16(h).Float32()
}

// narrow rounds f to H.
func narrow[H half](f float32) H {
	var z H
	if _, ok := any(z).(BFloat16); ok {
		return H(NewBFloat16(f))
	}
	return H(NewFloat16(f))
}

// reduceHalf sets dst[i] = a[i] op b[i], computed in float32 and rounded
// once. Sums, the common case, run in loops written per type.
func reduceHalf[H half](op Op, dst, a, b []H) {
	n := len(dst)
	a, b = a[:n], b[:n]
	if op == Sum || op == Avg {
		switch d := any(dst).(type) {
		case []BFloat16:
			x, y := any(a).([]BFloat16), any(b).([]BFloat16)
			for i := range d {
				d[i] = NewBFloat16(x[i].Float32() + y[i].Float32())
			}
			return
		case []Float16:
			x, y := any(a).([]Float16), any(b).([]Float16)
			for i := range d {
				d[i] = NewFloat16(x[i].Float32() + y[i].Float32())
			}
			return
		}
	}
	for i := range dst {
		x, y := widen(a[i]), widen(b[i])
		var v float32
		switch op {
		case Prod:
			v = x * y
		case Max:
			v = max(x, y)
		case Min:
			v = min(x, y)
		}
		dst[i] = narrow[H](v)
	}
}

// divideHalf divides every element by n in float32, rounding once.
func divideHalf[H half](v []H, n int) {
	g := float32(n)
	switch d := any(v).(type) {
	case []BFloat16:
		for i, h := range d {
			d[i] = NewBFloat16(h.Float32() / g)
		}
	case []Float16:
		for i, h := range d {
			d[i] = NewFloat16(h.Float32() / g)
		}
	}
}

// NarrowInto sets dst[i] to src[i] rounded to H (NewBFloat16 or
// NewFloat16); dst is at least as long as src. The loops are written per
// type: a generic one pays a dictionary call per element (about 3 ns).
// These, WidenInto's and accumulateInto's sums run vector kernels where
// the processor has them (half_amd64.s: AVX2 for bfloat16, F16C for
// float16), which made two-rank all-reduces of 1 MiB 3.5–4.2× faster in
// bfloat16 and 9.7–10.7× in float16 (bench/results/current/
// bf16-vector-2026-11-29-zen4.txt, fp16-f16c-2026-11-29-zen4.txt).
func NarrowInto[H half](dst []H, src []float32) {
	switch d := any(dst).(type) {
	case []BFloat16:
		d = d[:len(src)]
		for i := narrowVector(d, src, 1); i < len(src); i++ {
			d[i] = NewBFloat16(src[i])
		}
	case []Float16:
		d = d[:len(src)]
		for i := narrowVector(d, src, 1); i < len(src); i++ {
			d[i] = NewFloat16(src[i])
		}
	}
}

// narrowDivInto sets dst[i] to src[i] / div rounded to H; dst is at
// least as long as src.
func narrowDivInto[H half](dst []H, src []float32, div float32) {
	switch d := any(dst).(type) {
	case []BFloat16:
		d = d[:len(src)]
		for i := narrowVector(d, src, div); i < len(src); i++ {
			d[i] = NewBFloat16(src[i] / div)
		}
	case []Float16:
		d = d[:len(src)]
		for i := narrowVector(d, src, div); i < len(src); i++ {
			d[i] = NewFloat16(src[i] / div)
		}
	}
}

// WidenInto sets dst[i] to src[i] exactly; dst is at least as long as
// src.
func WidenInto[H half](dst []float32, src []H) {
	dst = dst[:len(src)]
	switch s := any(src).(type) {
	case []BFloat16:
		for i := widenVector(dst, s, false); i < len(s); i++ {
			dst[i] = s[i].Float32()
		}
	case []Float16:
		for i := widenVector(dst, s, false); i < len(s); i++ {
			dst[i] = s[i].Float32()
		}
	}
}

// accumulateInto combines src into acc element-wise in float32 (acc[i] =
// acc[i] op src[i]; for Avg, a sum).
func accumulateInto[H half](op Op, acc []float32, src []H) {
	acc = acc[:len(src)]
	if op == Sum || op == Avg {
		switch s := any(src).(type) {
		case []BFloat16:
			for i := widenVector(acc, s, true); i < len(s); i++ {
				acc[i] += s[i].Float32()
			}
			return
		case []Float16:
			for i := widenVector(acc, s, true); i < len(s); i++ {
				acc[i] += s[i].Float32()
			}
			return
		}
	}
	for i, h := range src {
		v := widen(h)
		switch op {
		case Prod:
			acc[i] *= v
		case Max:
			acc[i] = max(acc[i], v)
		case Min:
			acc[i] = min(acc[i], v)
		}
	}
}
