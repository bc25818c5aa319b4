package cuda

import (
	"errors"
	"fmt"
)

// ErrNoDriver is wrapped by Open's error when the CUDA driver library
// cannot be loaded.
var ErrNoDriver = errors.New("no CUDA driver (libcuda.so.1) found")

// ErrNoDevice is wrapped by Open's error when the driver sees no GPU.
var ErrNoDevice = errors.New("no CUDA device visible")

// Result is a CUresult or cublasStatus_t code.
type Result int32

// Driver result codes the package tells apart.
const (
	success     Result = 0
	errNoDevice Result = 100
)

// Error is a failed driver or cuBLAS call.
type Error struct {
	Call string // the function, e.g. "cuMemAlloc"
	Code Result
	Name string // the driver's name for the code, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Text string // the driver's description
}

func (e *Error) Error() string {
	switch {
	case e.Name != "" && e.Text != "":
		return fmt.Sprintf("cuda: %s: %s (%s, %d)", e.Call, e.Text, e.Name, e.Code)
	case e.Name != "":
		return fmt.Sprintf("cuda: %s: %s (%d)", e.Call, e.Name, e.Code)
	default:
		return fmt.Sprintf("cuda: %s failed with code %d", e.Call, e.Code)
	}
}

// Is makes errors.Is(err, ErrNoDevice) true for CUDA_ERROR_NO_DEVICE.
func (e *Error) Is(target error) bool {
	return target == ErrNoDevice && e.Code == errNoDevice
}
