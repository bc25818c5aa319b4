package cuda

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// driverAPI holds the driver entry points, bound at Open.
type driverAPI struct {
	cuInit                    func(flags uint32) Result
	cuDriverGetVersion        func(v *int32) Result
	cuGetErrorName            func(r Result, s **byte) Result
	cuGetErrorString          func(r Result, s **byte) Result
	cuDeviceGetCount          func(n *int32) Result
	cuDeviceGet               func(d *int32, ordinal int32) Result
	cuDeviceGetName           func(name *byte, n int32, d int32) Result
	cuDeviceGetAttribute      func(v *int32, attr int32, d int32) Result
	cuDeviceTotalMem          func(bytes *uint64, d int32) Result
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, d int32) Result
	cuDevicePrimaryCtxRelease func(d int32) Result
	cuCtxSynchronize          func() Result
	cuMemGetInfo              func(free, total *uint64) Result
	cuMemAlloc                func(p *DevPtr, bytes uint64) Result
	cuMemFree                 func(p DevPtr) Result
	cuMemHostAlloc            func(p *unsafe.Pointer, bytes uint64, flags uint32) Result
	cuMemFreeHost             func(p unsafe.Pointer) Result
	cuMemcpyHtoDAsync         func(dst DevPtr, src unsafe.Pointer, bytes uint64, s uintptr) Result
	cuMemcpyDtoHAsync         func(dst unsafe.Pointer, src DevPtr, bytes uint64, s uintptr) Result
	cuMemcpyDtoDAsync         func(dst, src DevPtr, bytes uint64, s uintptr) Result
	cuStreamCreate            func(s *uintptr, flags uint32) Result
	cuStreamDestroy           func(s uintptr) Result
	cuStreamSynchronize       func(s uintptr) Result
	cuEventCreate             func(ev *uintptr, flags uint32) Result
	cuEventDestroy            func(ev uintptr) Result
	cuEventRecord             func(ev, s uintptr) Result
	cuEventSynchronize        func(ev uintptr) Result
	cuModuleLoadDataEx        func(m *uintptr, image unsafe.Pointer, n uint32, opts *int32, vals *uintptr) Result
	cuModuleUnload            func(m uintptr) Result
	cuModuleGetFunction       func(f *uintptr, m uintptr, name string) Result

	// The calls every kernel launch makes, as raw addresses for
	// purego.SyscallN: one allocation per call instead of a reflective
	// call's four.
	rawCtxSetCurrent, rawLaunchKernel, rawMemsetD32Async uintptr
}

// raw resolves the raw addresses of the hot calls.
func (api *driverAPI) raw(lib uintptr) error {
	for _, r := range []struct {
		dst  *uintptr
		name string
	}{{&api.rawCtxSetCurrent, "cuCtxSetCurrent"}, {&api.rawLaunchKernel, "cuLaunchKernel"}, {&api.rawMemsetD32Async, "cuMemsetD32Async"}} {
		addr, err := purego.Dlsym(lib, r.name)
		if err != nil || addr == 0 {
			return fmt.Errorf("cuda: libcuda.so.1 has no %s: %v", r.name, err)
		}
		*r.dst = addr
	}
	return nil
}

// result is a raw call's CUresult (the low 32 bits of the return register).
func result(r uintptr) Result { return Result(int32(uint32(r))) }

// symbols maps each entry point to the exported name it binds (the _v2
// names where the driver versioned the call).
func (api *driverAPI) symbols() []symbol {
	return []symbol{
		{&api.cuInit, "cuInit"},
		{&api.cuDriverGetVersion, "cuDriverGetVersion"},
		{&api.cuGetErrorName, "cuGetErrorName"},
		{&api.cuGetErrorString, "cuGetErrorString"},
		{&api.cuDeviceGetCount, "cuDeviceGetCount"},
		{&api.cuDeviceGet, "cuDeviceGet"},
		{&api.cuDeviceGetName, "cuDeviceGetName"},
		{&api.cuDeviceGetAttribute, "cuDeviceGetAttribute"},
		{&api.cuDeviceTotalMem, "cuDeviceTotalMem_v2"},
		{&api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
		{&api.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
		{&api.cuCtxSynchronize, "cuCtxSynchronize"},
		{&api.cuMemGetInfo, "cuMemGetInfo_v2"},
		{&api.cuMemAlloc, "cuMemAlloc_v2"},
		{&api.cuMemFree, "cuMemFree_v2"},
		{&api.cuMemHostAlloc, "cuMemHostAlloc"},
		{&api.cuMemFreeHost, "cuMemFreeHost"},
		{&api.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
		{&api.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
		{&api.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"},
		{&api.cuStreamCreate, "cuStreamCreate"},
		{&api.cuStreamDestroy, "cuStreamDestroy_v2"},
		{&api.cuStreamSynchronize, "cuStreamSynchronize"},
		{&api.cuEventCreate, "cuEventCreate"},
		{&api.cuEventDestroy, "cuEventDestroy_v2"},
		{&api.cuEventRecord, "cuEventRecord"},
		{&api.cuEventSynchronize, "cuEventSynchronize"},
		{&api.cuModuleLoadDataEx, "cuModuleLoadDataEx"},
		{&api.cuModuleUnload, "cuModuleUnload"},
		{&api.cuModuleGetFunction, "cuModuleGetFunction"},
	}
}

// symbol is one entry point to bind: a pointer to a func field and the
// library's name for it.
type symbol struct {
	fptr any
	name string
}

// bind resolves every symbol in lib, naming the first one missing.
func bind(lib uintptr, libName string, syms []symbol) error {
	return bindAny([]uintptr{lib}, libName, syms)
}

// MinDriver is the oldest driver API version Open accepts (12.0): the
// first with every entry point bound above in its _v2 form.
const MinDriver Version = 12000

// Driver is the loaded CUDA driver.
type Driver struct {
	api     driverAPI
	version Version
}

// Open loads the driver library (libcuda.so.1 from the loader's search
// path), initialises it and checks its version. The error wraps
// ErrNoDriver when the library is missing and ErrNoDevice when there is no
// GPU.
func Open() (*Driver, error) {
	// The loader's error message (dlerror) is kept per thread: purego
	// reads it after dlopen or dlsym fails, which must be on the same one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const name = "libcuda.so.1"
	lib, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		if strings.Contains(err.Error(), "No such file or directory") {
			return nil, ErrNoDriver // (the loader's words would repeat ErrNoDriver's)
		}
		return nil, fmt.Errorf("%w: %v", ErrNoDriver, err)
	}
	d := &Driver{}
	if err := bind(lib, name, d.api.symbols()); err != nil {
		return nil, err
	}
	if err := d.api.raw(lib); err != nil {
		return nil, err
	}
	if err := d.check("cuInit", d.api.cuInit(0)); err != nil {
		return nil, err
	}
	var v int32
	if err := d.check("cuDriverGetVersion", d.api.cuDriverGetVersion(&v)); err != nil {
		return nil, err
	}
	d.version = Version(v)
	if d.version < MinDriver {
		return nil, fmt.Errorf("cuda: the driver supports CUDA %s; gorun needs %s or newer", d.version, MinDriver)
	}
	var n int32
	if err := d.check("cuDeviceGetCount", d.api.cuDeviceGetCount(&n)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, ErrNoDevice
	}
	return d, nil
}

// Version is the CUDA version the driver supports, as 1000·major + 10·minor.
func (d *Driver) Version() Version { return d.version }

// DeviceCount is the number of visible GPUs (after CUDA_VISIBLE_DEVICES).
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	if err := d.check("cuDeviceGetCount", d.api.cuDeviceGetCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// check turns a non-zero result into an *Error with the driver's names.
func (d *Driver) check(call string, r Result) error {
	if r == success {
		return nil
	}
	e := &Error{Call: call, Code: r}
	var s *byte
	if d.api.cuGetErrorName != nil && d.api.cuGetErrorName(r, &s) == success {
		e.Name = cString(s)
	}
	if d.api.cuGetErrorString != nil && d.api.cuGetErrorString(r, &s) == success {
		e.Text = cString(s)
	}
	if r == errNoDevice {
		return fmt.Errorf("%w: %w", ErrNoDevice, e)
	}
	return e
}

// cString copies a NUL-terminated C string.
func cString(p *byte) string {
	if p == nil {
		return ""
	}
	var b []byte
	for q := unsafe.Pointer(p); *(*byte)(q) != 0 && len(b) < 4096; q = unsafe.Add(q, 1) {
		b = append(b, *(*byte)(q))
	}
	return string(b)
}
