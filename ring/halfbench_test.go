package ring

import (
	"fmt"
	"testing"
)

// BenchmarkHalf: the 16-bit reductions and conversions, per element.
func BenchmarkHalf(b *testing.B) {
	const n = 1 << 20
	f := make([]float32, n)
	for i := range f {
		f[i] = float32(i%1000) * 0.37
	}
	bf, hf := make([]BFloat16, n), make([]Float16, n)
	for i, v := range f {
		bf[i], hf[i] = NewBFloat16(v), NewFloat16(v)
	}
	run := func(name string, fn func()) {
		b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
			b.SetBytes(2 * n)
			b.ReportAllocs()
			for b.Loop() {
				fn()
			}
		})
	}
	run("reduce/bf16", func() { Reduce(Sum, bf, bf, bf) })
	run("reduce/fp16", func() { Reduce(Sum, hf, hf, hf) })
	run("divide/bf16", func() { divideHalf(bf, 3) })
	run("narrow/bf16", func() { NarrowInto(bf, f) })
	run("narrow/fp16", func() { NarrowInto(hf, f) })
	run("widen/bf16", func() { WidenInto(f, bf) })
	run("widen/fp16", func() { WidenInto(f, hf) })
}
