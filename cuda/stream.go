package cuda

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Stream is an ordered queue of device work.
type Stream struct {
	dv *Device
	h  uintptr
}

// NewStream creates a stream that does not synchronise with the legacy
// default stream.
func (dv *Device) NewStream() (*Stream, error) {
	const nonBlocking = 1
	s := &Stream{dv: dv}
	if err := dv.call("cuStreamCreate", func() Result { return dv.d.api.cuStreamCreate(&s.h, nonBlocking) }); err != nil {
		return nil, err
	}
	return s, nil
}

// Device is the stream's device.
func (s *Stream) Device() *Device { return s.dv }

// Close destroys the stream after its queued work.
func (s *Stream) Close() error {
	return s.dv.call("cuStreamDestroy", func() Result { return s.dv.d.api.cuStreamDestroy(s.h) })
}

// Synchronize waits until the stream's work is done and reports the first
// asynchronous error.
func (s *Stream) Synchronize() error {
	return s.dv.call("cuStreamSynchronize", func() Result { return s.dv.d.api.cuStreamSynchronize(s.h) })
}

// CopyToDevice queues a copy of bytes from host memory src to dst. From
// pinned memory the call returns at once; from pageable (Go) memory the
// driver stages it and returns once src may be reused.
func (s *Stream) CopyToDevice(dst DevPtr, src unsafe.Pointer, bytes int) error {
	if bytes == 0 {
		return nil
	}
	return s.dv.call("cuMemcpyHtoDAsync", func() Result { return s.dv.d.api.cuMemcpyHtoDAsync(dst, src, uint64(bytes), s.h) })
}

// CopyToHost queues a copy of bytes from src to host memory dst; dst must
// stay valid until the stream passes the copy (Synchronize, or an event).
func (s *Stream) CopyToHost(dst unsafe.Pointer, src DevPtr, bytes int) error {
	if bytes == 0 {
		return nil
	}
	return s.dv.call("cuMemcpyDtoHAsync", func() Result { return s.dv.d.api.cuMemcpyDtoHAsync(dst, src, uint64(bytes), s.h) })
}

// CopyDevice queues a device-to-device copy.
func (s *Stream) CopyDevice(dst, src DevPtr, bytes int) error {
	if bytes == 0 {
		return nil
	}
	return s.dv.call("cuMemcpyDtoDAsync", func() Result { return s.dv.d.api.cuMemcpyDtoDAsync(dst, src, uint64(bytes), s.h) })
}

// Fill32 queues setting n 32-bit words at dst to v.
func (s *Stream) Fill32(dst DevPtr, v uint32, n int) error {
	if n == 0 {
		return nil
	}
	return s.dv.call("cuMemsetD32Async", func() Result {
		r, _, _ := purego.SyscallN(s.dv.d.api.rawMemsetD32Async, uintptr(dst), uintptr(v), uintptr(n), s.h)
		return result(r)
	})
}

// Upload copies host float32s to dst and waits for the copy.
func (s *Stream) Upload(dst DevPtr, src []float32) error {
	if len(src) == 0 {
		return nil
	}
	if err := s.CopyToDevice(dst, unsafe.Pointer(&src[0]), 4*len(src)); err != nil {
		return err
	}
	return s.Synchronize()
}

// Download copies len(dst) float32s from src to dst, after the stream's
// earlier work, and waits for them.
func (s *Stream) Download(dst []float32, src DevPtr) error {
	if len(dst) == 0 {
		return nil
	}
	if err := s.CopyToHost(unsafe.Pointer(&dst[0]), src, 4*len(dst)); err != nil {
		return err
	}
	return s.Synchronize()
}

// Event marks a point in a stream.
type Event struct {
	dv *Device
	h  uintptr
}

// NewEvent creates an event without time stamps (cheaper to record and
// wait on).
func (dv *Device) NewEvent() (*Event, error) {
	const disableTiming = 2
	ev := &Event{dv: dv}
	if err := dv.call("cuEventCreate", func() Result { return dv.d.api.cuEventCreate(&ev.h, disableTiming) }); err != nil {
		return nil, err
	}
	return ev, nil
}

// Record marks the point in s the event stands for.
func (ev *Event) Record(s *Stream) error {
	return ev.dv.call("cuEventRecord", func() Result { return ev.dv.d.api.cuEventRecord(ev.h, s.h) })
}

// Synchronize waits until the work before the event is done.
func (ev *Event) Synchronize() error {
	return ev.dv.call("cuEventSynchronize", func() Result { return ev.dv.d.api.cuEventSynchronize(ev.h) })
}

// Close destroys the event.
func (ev *Event) Close() error {
	return ev.dv.call("cuEventDestroy", func() Result { return ev.dv.d.api.cuEventDestroy(ev.h) })
}

// Module is loaded device code.
type Module struct {
	dv *Device
	h  uintptr
}

// LoadPTX compiles PTX text for the device (the driver JIT-compiles it for
// the GPU's architecture) and loads it. The PTX's ISA version is checked
// against the driver first, so an old driver gets an error naming both.
func (dv *Device) LoadPTX(ptx []byte) (*Module, error) {
	need, err := PTXNeeds(ptx)
	if err != nil {
		return nil, err
	}
	if dv.d.version < need {
		return nil, fmt.Errorf("cuda: the kernels need a driver for CUDA %s or newer; this one supports %s", need, dv.d.version)
	}
	image := make([]byte, len(ptx)+1) // NUL-terminated
	copy(image, ptx)
	const (
		optErrorLogBuffer      = 5
		optErrorLogBufferBytes = 6
	)
	var errLog [4096]byte
	opts := []int32{optErrorLogBuffer, optErrorLogBufferBytes}
	vals := []uintptr{uintptr(unsafe.Pointer(&errLog[0])), uintptr(len(errLog))}
	m := &Module{dv: dv}
	err = dv.call("cuModuleLoadDataEx", func() Result {
		return dv.d.api.cuModuleLoadDataEx(&m.h, unsafe.Pointer(&image[0]), uint32(len(opts)), &opts[0], &vals[0])
	})
	if err != nil {
		if log := cString(&errLog[0]); log != "" {
			return nil, fmt.Errorf("%w: %s", err, log)
		}
		return nil, err
	}
	return m, nil
}

// Function returns the kernel called name.
func (m *Module) Function(name string) (*Function, error) {
	f := &Function{dv: m.dv, name: name}
	if err := m.dv.call("cuModuleGetFunction", func() Result { return m.dv.d.api.cuModuleGetFunction(&f.h, m.h, name) }); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", name, err)
	}
	return f, nil
}

// Close unloads the module.
func (m *Module) Close() error {
	return m.dv.call("cuModuleUnload", func() Result { return m.dv.d.api.cuModuleUnload(m.h) })
}

// Function is a kernel.
type Function struct {
	dv   *Device
	h    uintptr
	name string
}

// Dim3 is a grid or block size.
type Dim3 struct{ X, Y, Z int }

// Launch queues f on s with the arguments packed in args.
func (s *Stream) Launch(f *Function, grid, block Dim3, sharedBytes int, args *Args) error {
	grid, block = grid.orOne(), block.orOne()
	err := s.dv.call("cuLaunchKernel", func() Result {
		r, _, _ := purego.SyscallN(s.dv.d.api.rawLaunchKernel, f.h, uintptr(uint32(grid.X)), uintptr(uint32(grid.Y)), uintptr(uint32(grid.Z)),
			uintptr(uint32(block.X)), uintptr(uint32(block.Y)), uintptr(uint32(block.Z)), uintptr(uint32(sharedBytes)), s.h, uintptr(args.params()), 0)
		runtime.KeepAlive(args) // the driver reads the arguments during the call
		return result(r)
	})
	if err != nil {
		return fmt.Errorf("launching %s grid %v block %v: %w", f.name, grid, block, err)
	}
	return nil
}

func (d Dim3) orOne() Dim3 {
	return Dim3{max(d.X, 1), max(d.Y, 1), max(d.Z, 1)}
}
