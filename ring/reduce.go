package ring

import "fmt"

// Elem is an element type the collectives move and reduce: MPI's
// floating-point and integer types, and the 16-bit floats GPUs train in
// (reduced in float32).
type Elem interface {
	float32 | float64 | BFloat16 | Float16 | int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64
}

// Op is a reduction.
type Op uint8

// Reductions. Avg is Sum divided by the group size, for floating-point types.
const (
	Sum Op = iota + 1
	Avg
	Max
	Min
	Prod
)

var opNames = [...]string{"", "sum", "avg", "max", "min", "prod"}

func (o Op) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// DTypeOf returns the DType of T.
func DTypeOf[T Elem]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case BFloat16:
		return BF16
	case Float16:
		return FP16
	case int8:
		return Int8
	case int16:
		return Int16
	case int32:
		return Int32
	case int64:
		return Int64
	case uint16:
		return Uint16
	case uint32:
		return Uint32
	case uint64:
		return Uint64
	default:
		return Uint8
	}
}

// IsHalf reports whether d is a 16-bit floating-point type.
func (d DType) IsHalf() bool { return d == BF16 || d == FP16 }

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == Float32 || d == Float64 || d.IsHalf() }

// ValidOp reports whether op applies to T.
func ValidOp[T Elem](op Op) error {
	switch op {
	case Sum, Max, Min, Prod:
		return nil
	case Avg:
		if DTypeOf[T]().IsFloat() {
			return nil
		}
		return fmt.Errorf("ring: op avg needs a floating-point type, not %v", DTypeOf[T]())
	}
	return fmt.Errorf("ring: unknown reduction %v", op)
}

// Reduce sets dst[i] = a[i] op b[i]. Avg reduces like Sum (the division by
// the group size happens once, at the end). dst may be a or b (the same
// slice, not a shifted one). It is the hot loop of the reductions: sums and
// products of floating-point elements run in vector kernels where the
// processor has them (reduce_amd64.s, the same bits as the scalar loop),
// the rest in reduceScalar.
func Reduce[T Elem](op Op, dst, a, b []T) {
	switch d := any(dst).(type) {
	case []BFloat16:
		reduceHalf(op, d, any(a).([]BFloat16), any(b).([]BFloat16))
		return
	case []Float16:
		reduceHalf(op, d, any(a).([]Float16), any(b).([]Float16))
		return
	}
	n := len(dst)
	a, b = a[:n], b[:n]
	i := reduceVector(op, dst, a, b)
	reduceScalar(op, dst[i:], a[i:], b[i:])
}

// reduceScalar is Reduce in Go: unrolled by eight, bounds checks hoisted.
// a and b are at least as long as dst.
func reduceScalar[T Elem](op Op, dst, a, b []T) {
	n := len(dst)
	a, b = a[:n], b[:n]
	switch op {
	case Sum, Avg:
		i := 0
		for ; i+8 <= n; i += 8 {
			d, x, y := dst[i:i+8:i+8], a[i:i+8:i+8], b[i:i+8:i+8]
			d[0] = x[0] + y[0]
			d[1] = x[1] + y[1]
			d[2] = x[2] + y[2]
			d[3] = x[3] + y[3]
			d[4] = x[4] + y[4]
			d[5] = x[5] + y[5]
			d[6] = x[6] + y[6]
			d[7] = x[7] + y[7]
		}
		for ; i < n; i++ {
			dst[i] = a[i] + b[i]
		}
	case Prod:
		for i := range dst {
			dst[i] = a[i] * b[i]
		}
	case Max:
		for i := range dst {
			dst[i] = max(a[i], b[i])
		}
	case Min:
		for i := range dst {
			dst[i] = min(a[i], b[i])
		}
	}
}

// Divide divides every floating-point element by n (used to finish Avg).
// For a power of two it multiplies by the reciprocal, which gives the same
// bits several times faster; otherwise it divides, as PyTorch does.
func Divide[T Elem](s []T, n int) {
	pow2 := n&(n-1) == 0
	switch v := any(s).(type) {
	case []float32:
		if pow2 {
			scale(v, 1/float32(n))
			return
		}
		g := float32(n)
		for i := range v {
			v[i] /= g
		}
	case []BFloat16:
		divideHalf(v, n)
	case []Float16:
		divideHalf(v, n)
	case []float64:
		if pow2 {
			scale(v, 1/float64(n))
			return
		}
		g := float64(n)
		for i := range v {
			v[i] /= g
		}
	}
}

func scale[F float32 | float64](v []F, f F) {
	i := 0
	for ; i+4 <= len(v); i += 4 {
		w := v[i : i+4 : i+4]
		w[0] *= f
		w[1] *= f
		w[2] *= f
		w[3] *= f
	}
	for ; i < len(v); i++ {
		v[i] *= f
	}
}
