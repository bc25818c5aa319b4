package ring

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestReduceVectorMatchesScalar compares Reduce (the vector kernels where
// this build has them) with reduceScalar bit for bit: every length up to
// 70 and a few long ones, slices starting off a vector boundary, dst being
// a or b, and values that include NaNs, infinities and signed zeros.
func TestReduceVectorMatchesScalar(t *testing.T) {
	t.Logf("vector kernels: %v", haveAVX2)
	testReduceVector[float32](t)
	testReduceVector[float64](t)
}

func testReduceVector[T float32 | float64](t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	special := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1e-40, 3.5e38}
	value := func() T {
		if rng.IntN(8) == 0 {
			return T(special[rng.IntN(len(special))])
		}
		return T(rng.NormFloat64() * 4)
	}
	lengths := []int{1000, 1003, 4096 + 13}
	for n := range 71 {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		for _, off := range []int{0, 1, 3} {
			for _, op := range []Op{Sum, Avg, Prod, Max, Min} {
				for _, alias := range []string{"none", "dst=a", "dst=b"} {
					name := fmt.Sprintf("%v/n=%d/off=%d/%v/%s", DTypeOf[T](), n, off, op, alias)
					a, b := make([]T, n+off), make([]T, n+off)
					for i := range a {
						a[i], b[i] = value(), value()
					}
					a, b = a[off:], b[off:]
					want := make([]T, n)
					reduceScalar(op, want, a, b)
					var got []T
					switch alias {
					case "none":
						got = make([]T, n+off)[off:]
						Reduce(op, got, a, b)
					case "dst=a":
						got = append(make([]T, off), a...)[off:]
						Reduce(op, got, got, b)
					case "dst=b":
						got = append(make([]T, off), b...)[off:]
						Reduce(op, got, a, got)
					}
					for i := range want {
						if math.Float64bits(float64(got[i])) != math.Float64bits(float64(want[i])) {
							t.Fatalf("%s: element %d is %v, want %v (a %v, b %v)", name, i, got[i], want[i], a[i], b[i])
						}
					}
				}
			}
		}
	}
}

// BenchmarkReduce: the vector kernels against the scalar loop, in cache
// and out of it. `go test -tags purego` builds the scalar loop alone.
func BenchmarkReduce(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 14, 1 << 18, 1 << 22} {
		x, y := make([]float32, n), make([]float32, n)
		for _, impl := range []struct {
			name string
			fn   func(Op, []float32, []float32, []float32)
		}{{"Reduce", Reduce[float32]}, {"scalar", reduceScalar[float32]}} {
			b.Run(fmt.Sprintf("sum/float32/%d/%s", n, impl.name), func(b *testing.B) {
				b.SetBytes(int64(4 * n))
				for b.Loop() {
					impl.fn(Sum, x, x, y)
				}
			})
		}
	}
}
