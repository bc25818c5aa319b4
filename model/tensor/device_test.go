package tensor

import (
	"slices"
	"testing"
)

// fakeDevice keeps "device memory" in Go slices keyed by made-up
// addresses, counting what is live.
type fakeDevice struct {
	next  uintptr
	alloc map[uintptr][]float32
}

func newFake() *fakeDevice { return &fakeDevice{next: 0x1000, alloc: map[uintptr][]float32{}} }

func (d *fakeDevice) Alloc(n int) uintptr {
	p := d.next
	d.next += uintptr(4*n) + 0x1000
	d.alloc[p] = make([]float32, n)
	return p
}
func (d *fakeDevice) Free(p uintptr) { delete(d.alloc, p) }
func (d *fakeDevice) String() string { return "fake" }

// at resolves an address inside an allocation.
func (d *fakeDevice) at(p uintptr, n int) []float32 {
	for base, mem := range d.alloc {
		if p >= base && p+uintptr(4*n) <= base+uintptr(4*len(mem)) {
			off := int(p-base) / 4
			return mem[off : off+n]
		}
	}
	panic("address outside every allocation")
}
func (d *fakeDevice) Upload(p uintptr, src []float32)   { copy(d.at(p, len(src)), src) }
func (d *fakeDevice) Download(dst []float32, p uintptr) { copy(dst, d.at(p, len(dst))) }

func TestDeviceTensors(t *testing.T) {
	dev := newFake()
	x := New(2, 3)
	copy(x.Data, []float32{1, 2, 3, 4, 5, 6})
	x.MoveTo(dev)
	if x.Data != nil || x.Device() != Device(dev) || x.Len() != 6 {
		t.Fatalf("after MoveTo: Data %v, device %v, len %d", x.Data, x.Device(), x.Len())
	}
	if got := x.HostData(); !slices.Equal(got, []float32{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("HostData = %v", got)
	}
	// A slice shares the storage at an offset, as DDP's gradient views do.
	s, err := x.Slice(2, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	s.SetHostData([]float32{30, 40, 50, 60})
	if got := x.HostData(); !slices.Equal(got, []float32{1, 2, 30, 40, 50, 60}) {
		t.Fatalf("after writing the slice: %v", got)
	}
	if _, err := x.Slice(4, 3); err == nil {
		t.Error("a slice past the end was allowed")
	}
	// Outputs follow their inputs; storage is recycled while it fits.
	var y *Tensor
	ReuseLike(&y, x, 3, 2)
	ptr := y.Ptr()
	if y.Device() != Device(dev) || ptr == 0 {
		t.Fatalf("ReuseLike put the output on %v", y.Device())
	}
	ReuseLike(&y, x, 6)
	if y.Ptr() != ptr {
		t.Error("ReuseLike reallocated storage that was large enough")
	}
	ReuseLike(&y, x, 4, 4)
	if y.Ptr() == ptr || y.Len() != 16 {
		t.Error("ReuseLike kept storage that was too small")
	}
	// A view shares the device storage.
	var v *Tensor
	if _, err := View(&v, x, 6); err != nil || v.Ptr() != x.Ptr() {
		t.Fatalf("View: %v, pointer %#x vs %#x", err, v.Ptr(), x.Ptr())
	}
	// Back to the host.
	x.MoveTo(nil)
	if x.Mem != nil || !slices.Equal(x.Data, []float32{1, 2, 30, 40, 50, 60}) {
		t.Fatalf("after moving back: %v", x.Data)
	}
	if c := NewOn(dev, 3); !slices.Equal(c.HostData(), []float32{0, 0, 0}) {
		t.Error("NewOn did not give zeros")
	}
	h := NewOn(nil, 2)
	if h.Mem != nil || len(h.Data) != 2 {
		t.Error("NewOn(nil) is not a host tensor")
	}
}
