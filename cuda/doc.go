// Package cuda is the GPU binding model and comm share: the parts of the
// CUDA driver API, cuBLAS and cuDNN that the project needs, loaded at run
// time with purego (github.com/ebitengine/purego) instead of cgo. cuDNN is
// optional: OpenDNN fails where it is not installed and the caller uses
// its own convolutions.
//
// Nothing here needs CUDA's headers or libraries to compile: the same binary
// runs on machines with and without a GPU. Open loads libcuda.so.1; when it
// is missing, or no GPU is visible, Open returns an error wrapping
// ErrNoDriver or ErrNoDevice and the caller falls back to the CPU.
//
// The driver keeps the current context per OS thread, so every call that
// needs one locks the goroutine to its thread and makes the device's
// primary context current for the duration of the call.
//
// Cost: purego's reflective calls allocate (4 small objects per call,
// measured on purego v0.11.3 with a libc function); its lower-level
// SyscallN allocates one. The calls on a training step's hot path (making
// the context current, kernel launches, memset, SGEMM, cuDNN's
// convolutions) use SyscallN, so a
// launch allocates twice (model/gpu's TestLaunchAllocations: 2.0 on an
// H100); a training step is therefore not allocation-free.
package cuda
