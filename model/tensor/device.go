package tensor

import (
	"fmt"
	"runtime"
)

// Device is memory outside the Go heap where a backend keeps tensors: a
// GPU's. A tensor on a device has Data nil; backends for that device read
// and write its Storage, and host code moves data with HostData,
// SetHostData and MoveTo.
type Device interface {
	// Alloc returns the address of zeroed storage for n float32 elements.
	// On failure it returns 0 and the failure is reported by the device's
	// backend (its Err) before any result is used.
	Alloc(n int) uintptr
	// Free releases storage from Alloc.
	Free(ptr uintptr)
	// Upload copies src to the elements at ptr.
	Upload(ptr uintptr, src []float32)
	// Download copies len(dst) elements at ptr to dst, after the work
	// queued before it.
	Download(dst []float32, ptr uintptr)
	// String names the device ("cuda:0 NVIDIA H100 …").
	String() string
}

// Storage is an allocation on a Device; tensors and views share it. It is
// freed when no tensor refers to it any more.
type Storage struct {
	Dev Device
	Ptr uintptr
	Cap int // elements
}

// Allocate returns zeroed storage for n elements on dev.
func Allocate(dev Device, n int) *Storage {
	s := &Storage{Dev: dev, Ptr: dev.Alloc(max(n, 1)), Cap: n}
	if s.Ptr != 0 {
		runtime.AddCleanup(s, func(p uintptr) { dev.Free(p) }, s.Ptr)
	}
	return s
}

// Device returns the device t lives on, nil on the host.
func (t *Tensor) Device() Device {
	if t.Mem == nil {
		return nil
	}
	return t.Mem.Dev
}

// Ptr is the device address of t's first element (0 on the host or when
// the allocation failed).
func (t *Tensor) Ptr() uintptr {
	if t.Mem == nil || t.Mem.Ptr == 0 {
		return 0
	}
	return t.Mem.Ptr + uintptr(4*t.Off)
}

// Slice returns a tensor of the given shape over t's elements [off,
// off+Volume(shape)), sharing t's memory on the host or the device.
func (t *Tensor) Slice(off int, shape ...int) (*Tensor, error) {
	n := Volume(shape)
	if off < 0 || off+n > t.Len() {
		return nil, fmt.Errorf("tensor: elements [%d, %d) are outside %s", off, off+n, t)
	}
	s := &Tensor{Shape: append([]int(nil), shape...)}
	if t.Mem != nil {
		s.Mem, s.Off = t.Mem, t.Off+off
	} else {
		s.Data = t.Data[off : off+n : off+n]
	}
	return s, nil
}

// HostData returns t's elements in host memory: Data itself on the host,
// a fresh copy from a device.
func (t *Tensor) HostData() []float32 {
	if t.Mem == nil {
		return append([]float32(nil), t.Data...)
	}
	out := make([]float32, t.Len())
	if t.Mem.Ptr != 0 {
		t.Mem.Dev.Download(out, t.Ptr())
	}
	return out
}

// ReadInto copies t's elements to dst (len(dst) == Len()).
func (t *Tensor) ReadInto(dst []float32) {
	if t.Mem == nil {
		copy(dst, t.Data)
		return
	}
	if t.Mem.Ptr != 0 {
		t.Mem.Dev.Download(dst[:t.Len()], t.Ptr())
	}
}

// SetHostData copies src (Len() elements) into t, wherever t lives.
func (t *Tensor) SetHostData(src []float32) {
	if t.Mem == nil {
		copy(t.Data, src)
		return
	}
	if t.Mem.Ptr != 0 {
		t.Mem.Dev.Upload(t.Ptr(), src[:t.Len()])
	}
}

// MoveTo moves t's elements to dev (the host when dev is nil), in place:
// every holder of t sees it on dev afterwards.
func (t *Tensor) MoveTo(dev Device) {
	if t.Device() == dev {
		return
	}
	host := t.HostData()
	if dev == nil {
		t.Data, t.Mem, t.Off = host, nil, 0
		return
	}
	t.Data, t.Mem, t.Off = nil, Allocate(dev, len(host)), 0
	t.SetHostData(host)
}

// DeviceBackend is implemented by backends that keep tensors on a device.
type DeviceBackend interface {
	Backend
	// Device is where the backend wants tensors.
	Device() Device
	// Err reports the first failure of the backend's asynchronous work
	// (a failed allocation, a kernel fault); once set it stays set and the
	// backend does no more work.
	Err() error
	// Synchronize waits for the queued work and returns Err.
	Synchronize() error
}

// DeviceOf returns be's device, nil for host backends.
func DeviceOf(be Backend) Device {
	if d, ok := be.(DeviceBackend); ok {
		return d.Device()
	}
	return nil
}
