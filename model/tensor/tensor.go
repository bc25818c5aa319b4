package tensor

import (
	"fmt"
	"math"
	"strings"
	"unsafe"
)

// Tensor is a dense float32 tensor in row-major order. On the host Data
// holds exactly Len() elements; on a device (a GPU) Data is nil and Mem
// holds them, from element Off of the storage on.
type Tensor struct {
	Shape []int
	Data  []float32
	Mem   *Storage
	Off   int
}

// New returns a zero tensor of the given shape.
func New(shape ...int) *Tensor {
	return &Tensor{Shape: append([]int(nil), shape...), Data: make([]float32, Volume(shape))}
}

// FromData wraps data in a tensor of the given shape. It fails when the
// lengths disagree.
func FromData(data []float32, shape ...int) (*Tensor, error) {
	if n := Volume(shape); n != len(data) {
		return nil, fmt.Errorf("tensor: %d values do not fill shape %s (%d)", len(data), FormatShape(shape), n)
	}
	return &Tensor{Shape: append([]int(nil), shape...), Data: data}, nil
}

// Volume is the number of elements of a shape.
func Volume(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Len is the number of elements.
func (t *Tensor) Len() int {
	if t.Mem != nil {
		return Volume(t.Shape)
	}
	return len(t.Data)
}

// Dims is the number of dimensions.
func (t *Tensor) Dims() int { return len(t.Shape) }

// Dim returns the size of dimension i.
func (t *Tensor) Dim(i int) int { return t.Shape[i] }

// SameShape reports whether t has exactly the given shape.
func (t *Tensor) SameShape(shape ...int) bool {
	if len(t.Shape) != len(shape) {
		return false
	}
	for i, d := range shape {
		if t.Shape[i] != d {
			return false
		}
	}
	return true
}

// String formats the shape, e.g. "[64 3 32 32]".
func (t *Tensor) String() string { return FormatShape(t.Shape) }

// FormatShape formats a shape as "[a b c]".
func FormatShape(shape []int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range shape {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprint(&b, d)
	}
	b.WriteByte(']')
	return b.String()
}

// Reuse returns a tensor of the given shape, recycling *t's storage when it
// is large enough (its contents are then unspecified) and allocating
// otherwise: on the device *t lives on, or on the host when *t is nil.
// Layers call it (through ReuseLike) on their output and gradient tensors
// every step.
func Reuse(t **Tensor, shape ...int) *Tensor {
	var dev Device
	if *t != nil {
		dev = (*t).Device()
	}
	return ReuseOn(dev, t, shape...)
}

// ReuseLike is Reuse placing a new tensor where like lives: a layer's
// output goes where its input is.
func ReuseLike(t **Tensor, like *Tensor, shape ...int) *Tensor {
	return ReuseOn(like.Device(), t, shape...)
}

// ReuseOn is Reuse on dev (the host when dev is nil). A tensor on another
// device, or on the host when dev is not, gets new storage.
func ReuseOn(dev Device, t **Tensor, shape ...int) *Tensor {
	n := Volume(shape)
	cur := *t
	if cur == nil {
		cur = &Tensor{}
		*t = cur
	}
	if dev == nil {
		if cur.Mem != nil {
			cur.Mem, cur.Off, cur.Data = nil, 0, nil
		}
		if cap(cur.Data) < n {
			cur.Data = make([]float32, n)
		}
		cur.Data = cur.Data[:n]
	} else if cur.Mem == nil || cur.Mem.Dev != dev || cur.Mem.Cap-cur.Off < n {
		cur.Data, cur.Mem, cur.Off = nil, Allocate(dev, n), 0
	}
	if !cur.SameShape(shape...) {
		cur.Shape = append(cur.Shape[:0], shape...)
	}
	return cur
}

// NewOn returns a zero tensor of the given shape on dev (the host when dev
// is nil).
func NewOn(dev Device, shape ...int) *Tensor {
	if dev == nil {
		return New(shape...)
	}
	return &Tensor{Shape: append([]int(nil), shape...), Mem: Allocate(dev, Volume(shape))}
}

// View returns a tensor sharing t's data with another shape of the same
// volume, reusing *v's header.
func View(v **Tensor, t *Tensor, shape ...int) (*Tensor, error) {
	if Volume(shape) != t.Len() {
		return nil, fmt.Errorf("tensor: cannot view %s (%d elements) as %s", t, t.Len(), FormatShape(shape))
	}
	cur := *v
	if cur == nil {
		cur = &Tensor{}
		*v = cur
	}
	cur.Data, cur.Mem, cur.Off = t.Data, t.Mem, t.Off
	if !cur.SameShape(shape...) {
		cur.Shape = append(cur.Shape[:0], shape...)
	}
	return cur, nil
}

// Clone returns a deep copy in host memory.
func (t *Tensor) Clone() *Tensor {
	return &Tensor{Shape: append([]int(nil), t.Shape...), Data: t.HostData()}
}

// RelDiff returns ‖got − want‖ / max(‖want‖, floor) in float64, the
// relative difference the tests compare against tolerances; floor keeps
// vectors that are zero in exact arithmetic (rounding noise on both sides)
// from dividing by nothing.
func RelDiff(got, want []float32, floor float64) float64 {
	var d, n float64
	for i, w := range want {
		e := float64(got[i]) - float64(w)
		d += e * e
		n += float64(w) * float64(w)
	}
	return math.Sqrt(d) / math.Max(math.Sqrt(n), floor)
}

// Overlaps reports whether a and b share any element of storage, on the
// host or on a device. A nil or empty tensor overlaps nothing.
func Overlaps(a, b *Tensor) bool {
	if a == nil || b == nil {
		return false
	}
	if a.Mem != nil || b.Mem != nil {
		return a.Mem == b.Mem && a.Off < b.Off+b.Len() && b.Off < a.Off+a.Len()
	}
	if len(a.Data) == 0 || len(b.Data) == 0 {
		return false
	}
	pa := uintptr(unsafe.Pointer(unsafe.SliceData(a.Data)))
	pb := uintptr(unsafe.Pointer(unsafe.SliceData(b.Data)))
	return pa < pb+uintptr(4*len(b.Data)) && pb < pa+uintptr(4*len(a.Data))
}
