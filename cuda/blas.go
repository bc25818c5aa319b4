package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// blasAPI holds the cuBLAS entry points.
type blasAPI struct {
	create      func(h *uintptr) Result
	destroy     func(h uintptr) Result
	version     func(h uintptr, v *int32) Result
	setStream   func(h uintptr, s uintptr) Result
	setMathMode func(h uintptr, mode int32) Result
	sgemmBatch  func(h uintptr, ta, tb int32, m, n, k int32, alpha *float32, a DevPtr, lda int32, sa int64, b DevPtr, ldb int32, sb int64, beta *float32, c DevPtr, ldc int32, sc int64, count int32) Result
}

// blasLibraries are the names tried for cuBLAS, newest first, each in the
// loader's search path and then in CUDA_HOME/lib64 (or /usr/local/cuda).
func blasLibraries() []string { return []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so"} }

// BLAS is a cuBLAS handle bound to one stream.
type BLAS struct {
	api         blasAPI
	dv          *Device
	h           uintptr
	alpha, beta float32 // host scalars the calls point at
	version     int
	tf32        bool
	rawSgemm    uintptr // cublasSgemm_v2 for purego.SyscallN
	rawGemmEx   uintptr // cublasGemmEx, likewise
}

// OpenBLAS loads cuBLAS and creates a handle whose work goes to s.
// GORUN_CUBLAS, when set, is the library's path.
func (s *Stream) OpenBLAS() (*BLAS, error) {
	lib, name, err := loadBLAS()
	if err != nil {
		return nil, err
	}
	b := &BLAS{dv: s.dv}
	if err := bind(lib, name, []symbol{
		{&b.api.create, "cublasCreate_v2"},
		{&b.api.destroy, "cublasDestroy_v2"},
		{&b.api.version, "cublasGetVersion_v2"},
		{&b.api.setStream, "cublasSetStream_v2"},
		{&b.api.setMathMode, "cublasSetMathMode"},
		{&b.api.sgemmBatch, "cublasSgemmStridedBatched"},
	}); err != nil {
		return nil, err
	}
	if b.rawSgemm, err = purego.Dlsym(lib, "cublasSgemm_v2"); err != nil {
		return nil, fmt.Errorf("cuda: %s: %w", name, err)
	}
	if b.rawGemmEx, err = purego.Dlsym(lib, "cublasGemmEx"); err != nil {
		return nil, fmt.Errorf("cuda: %s: %w", name, err)
	}
	if err := s.dv.Enter(); err != nil {
		return nil, err
	}
	defer s.dv.Leave()
	if r := b.api.create(&b.h); r != success {
		return nil, &Error{Call: "cublasCreate", Code: r}
	}
	var v int32
	if r := b.api.version(b.h, &v); r == success {
		b.version = int(v)
	}
	if r := b.api.setStream(b.h, s.h); r != success {
		return nil, &Error{Call: "cublasSetStream", Code: r}
	}
	return b, nil
}

// cudaLib64 is the CUDA toolkit's library folder: CUDA_HOME/lib64, or
// /usr/local/cuda/lib64 without CUDA_HOME; libraries are looked for there
// after the loader's search path.
func cudaLib64() string {
	home := os.Getenv("CUDA_HOME")
	if home == "" {
		home = "/usr/local/cuda"
	}
	return filepath.Join(home, "lib64")
}

func loadBLAS() (uintptr, string, error) {
	names := blasLibraries()
	if p := os.Getenv("GORUN_CUBLAS"); p != "" {
		names = []string{p}
	}
	var tried []string
	for _, n := range names {
		for _, p := range []string{n, filepath.Join(cudaLib64(), n)} {
			lib, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err == nil {
				return lib, p, nil
			}
			tried = append(tried, p)
		}
	}
	return 0, "", fmt.Errorf("cuda: no cuBLAS library found (tried %v; set GORUN_CUBLAS to its path)", tried)
}

// Version is cuBLAS's version number (e.g. 130100).
func (b *BLAS) Version() int { return b.version }

// SetTF32 lets SGEMM use the tensor cores' TF32 inputs (about 10 bits of
// mantissa, as torch.backends.cuda.matmul.allow_tf32) or forbids it.
func (b *BLAS) SetTF32(on bool) error {
	const defaultMath, tf32Math = 0, 3
	mode := int32(defaultMath)
	if on {
		mode = tf32Math
	}
	if err := b.dv.Enter(); err != nil {
		return err
	}
	defer b.dv.Leave()
	if r := b.api.setMathMode(b.h, mode); r != success {
		return &Error{Call: "cublasSetMathMode", Code: r}
	}
	b.tf32 = on
	return nil
}

// TF32 reports whether TF32 is on.
func (b *BLAS) TF32() bool { return b.tf32 }

// Close destroys the handle.
func (b *BLAS) Close() error {
	if r := b.api.destroy(b.h); r != success {
		return &Error{Call: "cublasDestroy", Code: r}
	}
	return nil
}

func op(trans bool) int32 {
	if trans {
		return 1
	}
	return 0
}

// GEMM computes, for row-major matrices, c[m×n] = alpha·op(a)·op(b) +
// beta·c with op(a) m×k and op(b) k×n; lda, ldb, ldc are row strides. (It
// calls column-major SGEMM on the transposed problem.) The caller holds
// Enter.
func (b *BLAS) GEMM(transA, transB bool, m, n, k int, alpha float32, a DevPtr, lda int, bm DevPtr, ldb int, beta float32, c DevPtr, ldc int) error {
	b.alpha, b.beta = alpha, beta
	// Raw call (see driverAPI): b is on the heap, so &b.alpha stays put.
	ret, _, _ := purego.SyscallN(b.rawSgemm, b.h, uintptr(op(transB)), uintptr(op(transA)), uintptr(uint32(n)), uintptr(uint32(m)), uintptr(uint32(k)),
		uintptr(unsafe.Pointer(&b.alpha)), uintptr(bm), uintptr(uint32(ldb)), uintptr(a), uintptr(uint32(lda)),
		uintptr(unsafe.Pointer(&b.beta)), uintptr(c), uintptr(uint32(ldc)))
	runtime.KeepAlive(b)
	if r := result(ret); r != success {
		return &Error{Call: fmt.Sprintf("cublasSgemm m=%d n=%d k=%d", m, n, k), Code: r}
	}
	return nil
}

// CUDA's data types and cuBLAS's compute type and algorithm choice, as
// their headers number them.
const (
	cudaR32F        = 0          // CUDA_R_32F
	cudaR16F        = 2          // CUDA_R_16F
	cudaR16BF       = 14         // CUDA_R_16BF
	blasCompute32F  = 68         // CUBLAS_COMPUTE_32F
	blasGemmDefault = 0xFFFFFFFF // CUBLAS_GEMM_DEFAULT, −1 as a C int
)

// GEMMHalf is GEMM with 16-bit operands a and b (BFloat16 or Half codes)
// and a float32 c, accumulated in float32 on the tensor cores
// (cublasGemmEx): autocast's matrix product. The caller holds Enter.
func (b *BLAS) GEMMHalf(data ConvData, transA, transB bool, m, n, k int, alpha float32, a DevPtr, lda int, bm DevPtr, ldb int, beta float32, c DevPtr, ldc int) error {
	in := cudaR16BF
	switch data {
	case Half:
		in = cudaR16F
	case BFloat16:
	default:
		return fmt.Errorf("cuda: GEMMHalf of %s operands: want bf16 or fp16", data)
	}
	b.alpha, b.beta = alpha, beta
	ret, _, _ := purego.SyscallN(b.rawGemmEx, b.h, uintptr(op(transB)), uintptr(op(transA)), uintptr(uint32(n)), uintptr(uint32(m)), uintptr(uint32(k)),
		uintptr(unsafe.Pointer(&b.alpha)), uintptr(bm), uintptr(in), uintptr(uint32(ldb)), uintptr(a), uintptr(in), uintptr(uint32(lda)),
		uintptr(unsafe.Pointer(&b.beta)), uintptr(c), cudaR32F, uintptr(uint32(ldc)), blasCompute32F, blasGemmDefault)
	runtime.KeepAlive(b)
	if r := result(ret); r != success {
		return &Error{Call: fmt.Sprintf("cublasGemmEx %s m=%d n=%d k=%d", data, m, n, k), Code: r}
	}
	return nil
}

// GEMMBatched is GEMM over count problems whose matrices lie strideA,
// strideB and strideC elements apart (a stride of 0 reuses one matrix).
// The caller holds Enter.
func (b *BLAS) GEMMBatched(transA, transB bool, m, n, k int, alpha float32, a DevPtr, lda, strideA int, bm DevPtr, ldb, strideB int, beta float32, c DevPtr, ldc, strideC, count int) error {
	b.alpha, b.beta = alpha, beta
	if r := b.api.sgemmBatch(b.h, op(transB), op(transA), int32(n), int32(m), int32(k), &b.alpha, bm, int32(ldb), int64(strideB), a, int32(lda), int64(strideA), &b.beta, c, int32(ldc), int64(strideC), int32(count)); r != success {
		return &Error{Call: fmt.Sprintf("cublasSgemmStridedBatched m=%d n=%d k=%d count=%d", m, n, k, count), Code: r}
	}
	return nil
}
