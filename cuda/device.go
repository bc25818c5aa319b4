package cuda

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// DevPtr is an address in a GPU's memory.
type DevPtr uintptr

// Add returns p advanced by bytes.
func (p DevPtr) Add(bytes int) DevPtr { return p + DevPtr(bytes) }

// Device attribute numbers (CUdevice_attribute).
const (
	attrMultiprocessors = 16
	attrCCMajor         = 75
	attrCCMinor         = 76
	attrAsyncEngines    = 40
)

// Device is one GPU with its primary context retained.
type Device struct {
	d       *Driver
	ordinal int
	dev     int32
	ctx     uintptr

	// Name is the product name, e.g. "NVIDIA H100 80GB HBM3".
	Name string
	// Multiprocessors is the number of SMs.
	Multiprocessors int
	// Major and Minor are the compute capability.
	Major, Minor int
	// Memory is the device memory in bytes.
	Memory uint64
}

// Device opens GPU number ordinal (among the visible ones) and retains its
// primary context, the one the runtime API and other libraries share.
func (d *Driver) Device(ordinal int) (*Device, error) {
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: device %d does not exist (%d visible)", ordinal, n)
	}
	dv := &Device{d: d, ordinal: ordinal}
	if err := d.check("cuDeviceGet", d.api.cuDeviceGet(&dv.dev, int32(ordinal))); err != nil {
		return nil, err
	}
	var name [256]byte
	if err := d.check("cuDeviceGetName", d.api.cuDeviceGetName(&name[0], int32(len(name)), dv.dev)); err != nil {
		return nil, err
	}
	dv.Name = cString(&name[0])
	for _, a := range []struct {
		attr int32
		dst  *int
	}{{attrMultiprocessors, &dv.Multiprocessors}, {attrCCMajor, &dv.Major}, {attrCCMinor, &dv.Minor}} {
		var v int32
		if err := d.check("cuDeviceGetAttribute", d.api.cuDeviceGetAttribute(&v, a.attr, dv.dev)); err != nil {
			return nil, err
		}
		*a.dst = int(v)
	}
	if err := d.check("cuDeviceTotalMem", d.api.cuDeviceTotalMem(&dv.Memory, dv.dev)); err != nil {
		return nil, err
	}
	if err := d.check("cuDevicePrimaryCtxRetain", d.api.cuDevicePrimaryCtxRetain(&dv.ctx, dv.dev)); err != nil {
		return nil, err
	}
	return dv, nil
}

// Driver returns the driver the device belongs to.
func (dv *Device) Driver() *Driver { return dv.d }

func (dv *Device) String() string {
	return fmt.Sprintf("cuda:%d %s (sm_%d%d, %d SMs, %.0f GiB)", dv.ordinal, dv.Name, dv.Major, dv.Minor, dv.Multiprocessors, float64(dv.Memory)/(1<<30))
}

// Enter locks the calling goroutine to its OS thread and makes the
// device's context current there; Leave undoes the lock. Every method of
// Device, Stream, Event, Module and BLAS does this itself; callers making
// many calls in a row may bracket them with Enter and Leave to pay for it
// once (the calls nest).
func (dv *Device) Enter() error {
	runtime.LockOSThread()
	r, _, _ := purego.SyscallN(dv.d.api.rawCtxSetCurrent, dv.ctx)
	if err := dv.d.check("cuCtxSetCurrent", result(r)); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	return nil
}

// Leave releases the thread lock taken by Enter.
func (dv *Device) Leave() { runtime.UnlockOSThread() }

// call runs one driver call with the context current.
func (dv *Device) call(name string, f func() Result) error {
	if err := dv.Enter(); err != nil {
		return err
	}
	defer dv.Leave()
	return dv.d.check(name, f())
}

// Close releases the primary context. Memory, streams and modules made on
// the device must be freed first.
func (dv *Device) Close() error {
	return dv.d.check("cuDevicePrimaryCtxRelease", dv.d.api.cuDevicePrimaryCtxRelease(dv.dev))
}

// MemInfo returns the free and total device memory in bytes.
func (dv *Device) MemInfo() (free, total uint64, err error) {
	err = dv.call("cuMemGetInfo", func() Result { return dv.d.api.cuMemGetInfo(&free, &total) })
	return free, total, err
}

// Alloc allocates bytes of device memory.
func (dv *Device) Alloc(bytes int) (DevPtr, error) {
	if bytes <= 0 {
		return 0, fmt.Errorf("cuda: allocation of %d bytes", bytes)
	}
	var p DevPtr
	err := dv.call("cuMemAlloc", func() Result { return dv.d.api.cuMemAlloc(&p, uint64(bytes)) })
	if err != nil {
		return 0, fmt.Errorf("allocating %d bytes on %s: %w", bytes, dv, err)
	}
	return p, nil
}

// Free releases memory from Alloc.
func (dv *Device) Free(p DevPtr) error {
	return dv.call("cuMemFree", func() Result { return dv.d.api.cuMemFree(p) })
}

// Synchronize waits for all work on the device's context.
func (dv *Device) Synchronize() error {
	return dv.call("cuCtxSynchronize", dv.d.api.cuCtxSynchronize)
}

// HostBuffer is page-locked (pinned) host memory the copy engines reach
// directly, the staging area for asynchronous copies.
type HostBuffer struct {
	dv    *Device
	p     unsafe.Pointer
	bytes int
}

// AllocHost allocates bytes of pinned host memory (cuMemHostAlloc,
// portable across contexts).
func (dv *Device) AllocHost(bytes int) (*HostBuffer, error) {
	if bytes <= 0 {
		return nil, fmt.Errorf("cuda: pinned allocation of %d bytes", bytes)
	}
	const portable = 1
	var p unsafe.Pointer
	if err := dv.call("cuMemHostAlloc", func() Result { return dv.d.api.cuMemHostAlloc(&p, uint64(bytes), portable) }); err != nil {
		return nil, fmt.Errorf("pinning %d bytes of host memory: %w", bytes, err)
	}
	return &HostBuffer{dv: dv, p: p, bytes: bytes}, nil
}

// Bytes is the buffer as bytes.
func (h *HostBuffer) Bytes() []byte { return unsafe.Slice((*byte)(h.p), h.bytes) }

// Float32s is the buffer as float32s.
func (h *HostBuffer) Float32s() []float32 { return unsafe.Slice((*float32)(h.p), h.bytes/4) }

// Free releases the buffer; it must not be used afterwards.
func (h *HostBuffer) Free() error {
	if h.p == nil {
		return nil
	}
	err := h.dv.call("cuMemFreeHost", func() Result { return h.dv.d.api.cuMemFreeHost(h.p) })
	h.p = nil
	return err
}
