package cpu

import (
	"fmt"
	"os"
	"strings"

	"github.com/gorun/gorun/model/gemm"
	"github.com/gorun/gorun/model/parallel"
	"github.com/gorun/gorun/model/tensor"
)

// Backend implements tensor.Backend on the CPU. It is not safe for
// concurrent use: one backend serves one model's forward and backward passes.
type Backend struct {
	pool   *parallel.Pool
	gemm   *gemm.Engine
	chunks []scratch // per-chunk buffers of the parallel convolution loops
	conv   convTask
	// convNorm is Conv2dBatchNorm's per-channel map, kept for reuse.
	convNorm convNorm
	elem     elemTask
	bn       bnTask
	stats    []float64 // batch norm's per-channel sums
	shift    []float32 // batch norm's per-channel K (norm.go)
	// bnPerPlane has planes shorter than a vector go to the vector
	// kernels one at a time as longer ones do: the reference the short
	// planes' loops are held to (norm_short.go; tests set it).
	bnPerPlane bool
	bnCoefs    []bnCoefs // short planes' per-channel coefficients (norm_short.go)
	bnScale    []float32 // short planes' normalising scale and shift
	bnShift    []float32
	// convAlgo is the convolution algorithm chosen (SetConvAlgorithm);
	// winoU holds the layer's transformed weights while it runs as
	// Winograd (winograd.go) unprepared, winoLayout the layout of its transforms
	// (winolast.go; tests and benchmarks set it).
	convAlgo   ConvAlgorithm
	winoU      []float32
	weights    weightsTask // transformWeights' work for the pool
	winoLayout winoLayout
	// winoTile forces Winograd's forward tiles to 2×2 or 4×4 outputs (0:
	// useWinograd4 decides; tests and benchmarks set it).
	winoTile int
	vec      vecOps // the transforms' row operations (vecops.go)
	// rowsW is the running convolution's kernel [F][KH][KW][C] when it
	// runs channels innermost (rows.go), unprepared.
	rowsW []float32
	// trimmed and liveW are the running convolution's live taps and
	// their weights, when some of its taps meet only padding (taps.go).
	trimmed trimmedConv
	liveW   *tensor.Tensor
	taps    tapsTask
	// dense, denseV and denseTab run a convolution over maps no larger
	// than its kernel as one dense matrix (dense.go).
	dense    denseTask
	denseV   []float32
	denseTab []int32
}

// scratch is one chunk's working memory, grown on demand and then reused.
type scratch struct {
	col, dcol []float32
	img, dimg []float32 // an image and its gradient laid out for im2col (phased.go)
	window    []int     // the kernel positions' offsets in a laid-out channel
	ybuf      []float32 // a group's output (gradient) as one matrix
	dw, db    []float32
	dwT       []float32 // a 1×1 kernel's weight gradient summed transposed (transposedWeightGrad)
	wino      winoRows  // Winograd's transforms' rows
	// Max pooling's row picks (pool.go): values and columns of a
	// plane's rows, and an output row's best values and positions.
	poolRows, poolBest []float32
	poolCols, poolAt   []int32
	pool3              planePicks3 // 3×3, stride-2 max pooling a plane at a time
}

var (
	_ tensor.Backend              = (*Backend)(nil)
	_ tensor.BatchNormReLUBackend = (*Backend)(nil)
	_ tensor.ConvBatchNormBackend = (*Backend)(nil)
	_ tensor.ResidualConvBackend  = (*Backend)(nil)
)

// New returns a CPU backend using threads threads (< 1 means 1). Several
// ranks sharing a machine should divide its cores between them.
func New(threads int) *Backend {
	p := parallel.New(threads)
	b := &Backend{pool: p, chunks: make([]scratch, p.Threads())}
	b.useGEMM(gemm.NewWithPool(p))
	b.conv.b = b
	return b
}

// NewWithKernel is New with the GEMM micro-kernel named (gemm.Kernels:
// "avx512", "avx2-fma", "go"), the user's override of the choice New makes
// for this CPU. An empty name is New's choice.
func NewWithKernel(threads int, name string) (*Backend, error) {
	b := New(threads)
	if name == "" {
		return b, nil
	}
	g, err := gemm.NewKernelWithPool(b.pool, name)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.useGEMM(g)
	return b, nil
}

// NewFromEnv is NewWithKernel with the micro-kernel the environment
// variable GORUN_CPU_KERNEL names (New's choice when it is unset or
// empty): the trainer's and the benchmarks' override. A kernel this CPU
// cannot run is an error naming the variable and the kernels it can.
func NewFromEnv(threads int) (*Backend, error) {
	b, err := NewWithKernel(threads, os.Getenv("GORUN_CPU_KERNEL"))
	if err != nil {
		return nil, fmt.Errorf("GORUN_CPU_KERNEL: %w", err)
	}
	return b, nil
}

// useGEMM sets the backend's GEMM engine and the element-wise kernels
// that go with its micro-kernel: the AVX-512 ones with the AVX-512 kernel
// only (where gemm prefers the AVX2 kernel on an AVX-512 CPU, its
// measurements ran both that way), and none with the Go kernel.
func (b *Backend) useGEMM(g *gemm.Engine) {
	b.gemm = g
	b.vec = vecOps{}
	if k := g.Kernel(); !strings.HasPrefix(k, "go ") {
		b.vec = vecOps{vector: hasVectorOps(), wide: hasWideOps() && strings.HasPrefix(k, "avx512")}
	}
}

// NewPureGo is New with the portable GEMM micro-kernel and Winograd
// transforms, for comparisons.
func NewPureGo(threads int) *Backend {
	b := New(threads)
	b.gemm = gemm.NewPureGoWithPool(b.pool)
	b.vec = vecOps{}
	return b
}

// Close stops the backend's threads.
func (b *Backend) Close() { b.pool.Close() }

// Threads returns the number of threads.
func (b *Backend) Threads() int { return b.pool.Threads() }

// Name describes the backend: the GEMM micro-kernel, the convolution
// algorithm, the element-wise kernels and the thread count.
func (b *Backend) Name() string {
	wino := "Winograd F(2×2, 3×3)"
	if b.useWinograd4(geometry{}, &prepared{}) {
		wino += " (frozen layers F(4×4, 3×3))"
	}
	conv := map[ConvAlgorithm]string{
		ConvAuto:     fmt.Sprintf("%s for 3×3 layers of %d+ channels and %d+ tiles, dense products for maps within a kernel", wino, b.winoMinChannels(), winoMinTiles),
		ConvIm2col:   "im2col convolutions",
		ConvWinograd: wino + " for every 3×3 layer",
	}[b.convAlgo]
	threads := "1 thread"
	if b.pool.Threads() > 1 {
		threads = fmt.Sprintf("%d threads", b.pool.Threads())
	}
	return fmt.Sprintf("cpu %s, %s, element-wise %s, %s", b.gemm.Kernel(), conv, b.vec.name(), threads)
}

func must(err error) {
	if err != nil {
		// The layers check shapes before calling the backend; a failure
		// here is a bug in gorun, not bad input.
		panic(fmt.Sprintf("cpu backend: %v", err))
	}
}

// grow returns (*buf)[:n], reallocating only when it is too short.
func grow[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
	}
	*buf = (*buf)[:n]
	return *buf
}

// MatMul implements tensor.Backend.
func (b *Backend) MatMul(a *tensor.Tensor, transA bool, bm *tensor.Tensor, transB bool, c *tensor.Tensor, alpha, beta float32) {
	m, n, k := tensor.MatMulDims(a, transA, bm, transB)
	must(b.gemm.Sgemm(m, n, k, alpha,
		gemm.Matrix{Data: a.Data, Stride: a.Shape[1], Trans: transA},
		gemm.Matrix{Data: bm.Data, Stride: bm.Shape[1], Trans: transB},
		beta, gemm.Matrix{Data: c.Data, Stride: c.Shape[1]}))
}

// AddBias implements tensor.Backend.
func (b *Backend) AddBias(x, bias *tensor.Tensor) {
	n, c, hw := tensor.Planes(x)
	for i := 0; i < n; i++ {
		for j := 0; j < c; j++ {
			v := bias.Data[j]
			row := x.Data[(i*c+j)*hw : (i*c+j+1)*hw]
			for s := range row {
				row[s] += v
			}
		}
	}
}

// BiasGrad implements tensor.Backend.
func (b *Backend) BiasGrad(dy, db *tensor.Tensor) {
	n, c, hw := tensor.Planes(dy)
	for j := 0; j < c; j++ {
		var s float32
		for i := 0; i < n; i++ {
			for _, v := range dy.Data[(i*c+j)*hw : (i*c+j+1)*hw] {
				s += v
			}
		}
		db.Data[j] += s
	}
}

// ReLU implements tensor.Backend.
func (b *Backend) ReLU(x, y *tensor.Tensor) {
	b.runElem(elemTask{op: opReLU, n: len(x.Data), x: x, y: y}, elemGrain)
}

// ReLUBackward implements tensor.Backend.
func (b *Backend) ReLUBackward(y, dy, dx *tensor.Tensor) {
	b.runElem(elemTask{op: opReLUBackward, n: len(y.Data), x: y, y: dy, z: dx}, elemGrain)
}

// Dropout implements tensor.Backend.
func (b *Backend) Dropout(x, y, mask *tensor.Tensor, p float32, seed uint64) {
	b.runElem(elemTask{op: opDropout, n: len(x.Data), x: x, y: y, z: mask, f: p, seed: seed}, elemGrain)
}

// uniform is a counter-based generator: a splitmix64 hash of (seed, i)
// mapped to [0, 1) with 24 bits, the same whatever order elements are drawn.
func uniform(seed, i uint64) float32 {
	z := seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float32(z>>40) * (1.0 / (1 << 24))
}

// Mul implements tensor.Backend.
func (b *Backend) Mul(x, y, z *tensor.Tensor) {
	b.runElem(elemTask{op: opMul, n: len(x.Data), x: x, y: y, z: z}, elemGrain)
}

// Add implements tensor.Backend.
func (b *Backend) Add(x, y, z *tensor.Tensor) {
	b.runElem(elemTask{op: opAdd, n: len(x.Data), x: x, y: y, z: z}, elemGrain)
}

// AddReLU implements tensor.AddReLUBackend: z = max(x + y, 0) in one pass.
func (b *Backend) AddReLU(x, y, z *tensor.Tensor) {
	b.runElem(elemTask{op: opAddReLU, n: len(x.Data), x: x, y: y, z: z}, elemGrain)
}

// Copy implements tensor.Backend.
func (b *Backend) Copy(src, dst *tensor.Tensor) { copy(dst.Data, src.Data) }

// Fill implements tensor.Backend.
func (b *Backend) Fill(t *tensor.Tensor, v float32) {
	if v == 0 {
		clear(t.Data)
		return
	}
	for i := range t.Data {
		t.Data[i] = v
	}
}
