// Package gpu is the CUDA backend of package model: tensor.Backend on a
// GPU, through package cuda. Matrix products run in cuBLAS; convolutions
// in cuDNN when its library is installed (each shape's algorithms timed
// once, as PyTorch's cudnn.benchmark), else as im2col and a cuBLAS SGEMM
// (Options.Convolutions chooses); everything else in the kernels of kernels/kernels.cu, shipped
// as PTX embedded in the binary and JIT-compiled by the driver for the GPU
// at hand. Tensors live in device memory (tensor.Storage); the only host
// transfers in a training step are the input batch, the targets and the
// loss value.
//
// Work is queued on one stream and runs asynchronously: a failure (an
// allocation, a launch) is kept as the backend's sticky error, later work
// is skipped, and Err or Synchronize reports it, as CUDA itself does.
package gpu

//go:generate nvcc -ptx -arch=compute_75 -O3 -o kernels/kernels.ptx kernels/kernels.cu

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/gorun/gorun/cuda"
	"github.com/gorun/gorun/model/tensor"
)

// PTX is the kernels' PTX text (kernels/kernels.ptx).
//
//go:embed kernels/kernels.ptx
var kernelsPTX []byte

// PTX returns the embedded kernels' PTX text.
func PTX() []byte { return kernelsPTX }

// Options configure a Backend.
type Options struct {
	// Ordinal is the GPU's number among the visible ones.
	Ordinal int
	// TF32 lets matrix products round their inputs to TF32 on the tensor
	// cores (torch.backends.cuda.matmul.allow_tf32); off by default.
	TF32 bool
	// Profile makes every operation wait for the GPU and adds up the time
	// per operation (Profile reports it): slow, for finding where a step's
	// time goes.
	Profile bool
	// Convolutions chooses how convolutions run: ConvAuto (cuDNN when its
	// library loads, else im2col), ConvCuDNN (cuDNN or an error), ConvIm2col.
	Convolutions string
	// Autocast, "bf16" or "fp16", runs matrix products and convolutions as
	// torch.autocast does in that format: operands rounded to 16 bits,
	// float32 accumulation on the tensor cores, results rounded to 16 bits
	// and stored as float32 (convolutions in cuDNN, channels-last). Empty:
	// float32 (TF32 as set).
	Autocast string
}

// The choices of Options.Convolutions.
const (
	ConvAuto   = "auto"
	ConvCuDNN  = "cudnn"
	ConvIm2col = "im2col"
)

// convWorkspaceLimit bounds the scratch one cuDNN convolution may use:
// faster algorithms needing more are passed over.
const convWorkspaceLimit = 1 << 30

// Backend is tensor.Backend on one GPU.
type Backend struct {
	dv   *cuda.Device
	s    *cuda.Stream
	blas *cuda.BLAS
	dnn  *cuda.DNN // nil: im2col convolutions
	// plans holds a planned cuDNN convolution per shape; convNote says
	// why convolutions run as im2col when they do.
	plans    map[cuda.ConvShape]*cuda.Conv
	convNote string
	// half is the autocast format (cuda.Float32: none).
	half cuda.ConvData
	mod  *cuda.Module
	k    kernels
	args *cuda.Args
	mem  *memory
	sms  int

	mu  sync.Mutex // guards err (allocations report from any goroutine)
	err error

	col, tmp, stats, small, sums scratch
	// The 16-bit operands of an autocast product: input, weights, output
	// (or output gradient), and a gradient.
	hx, hw, hy, hd scratch
	hostStats      []float64 // SyncBatchNorm's statistics on the host
	lossOut        []float32

	profile bool
	spent   map[string]time.Duration
	calls   map[string]int
	planned time.Duration // in cuDNN's planning, counted apart from the operations
}

// kernels are the functions of the embedded module.
type kernels struct {
	addBias, channelPartials, sumPartials, im2col, col2im, nfpToFnp, fnpToNfp *cuda.Function
	maxPool, maxPoolBackward, avgPool, avgPoolBackward                        *cuda.Function
	bnSumParts, bnSqdevParts, addParts, bnFinish, bnEvalStats, bnApply        *cuda.Function
	bnBackwardParts, bnBackwardFinish, bnBackwardDx                           *cuda.Function
	bnApplyPlanes, bnBackwardDxPlanes                                         *cuda.Function
	relu, reluBackward, dropout, mul, add, addReLU                            *cuda.Function
	logSoftmax, logSoftmaxBackward, nllLoss, nllLossBackward                  *cuda.Function
	sgd, adam, adadelta                                                       *cuda.Function
	toHalf, addRounded, toHalfNHWC, fromHalfNHWC                              *cuda.Function
}

func (k *kernels) table() map[string]**cuda.Function {
	return map[string]**cuda.Function{
		"add_bias": &k.addBias, "channel_partials": &k.channelPartials, "sum_partials": &k.sumPartials, "im2col": &k.im2col, "col2im": &k.col2im,
		"nfp_to_fnp": &k.nfpToFnp, "fnp_to_nfp": &k.fnpToNfp,
		"maxpool": &k.maxPool, "maxpool_backward": &k.maxPoolBackward, "avgpool": &k.avgPool, "avgpool_backward": &k.avgPoolBackward,
		"bn_sum_parts": &k.bnSumParts, "bn_sqdev_parts": &k.bnSqdevParts, "add_parts": &k.addParts, "bn_finish": &k.bnFinish,
		"bn_eval_stats": &k.bnEvalStats, "bn_apply": &k.bnApply,
		"bn_backward_parts": &k.bnBackwardParts, "bn_backward_finish": &k.bnBackwardFinish, "bn_backward_dx": &k.bnBackwardDx,
		"bn_apply_planes": &k.bnApplyPlanes, "bn_backward_dx_planes": &k.bnBackwardDxPlanes,
		"relu": &k.relu, "relu_backward": &k.reluBackward, "dropout": &k.dropout, "mul": &k.mul, "add": &k.add, "add_relu": &k.addReLU,
		"log_softmax": &k.logSoftmax, "log_softmax_backward": &k.logSoftmaxBackward, "nll_loss": &k.nllLoss, "nll_loss_backward": &k.nllLossBackward,
		"sgd_step": &k.sgd, "adam_step": &k.adam, "adadelta_step": &k.adadelta,
		"to_half": &k.toHalf, "add_rounded": &k.addRounded, "to_half_nhwc": &k.toHalfNHWC, "from_half_nhwc": &k.fromHalfNHWC,
	}
}

// New opens the GPU, loads the kernels and cuBLAS.
func New(o Options) (*Backend, error) {
	d, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	dv, err := d.Device(o.Ordinal)
	if err != nil {
		return nil, err
	}
	return NewOn(dv, o)
}

// NewOn is New on an opened device.
func NewOn(dv *cuda.Device, o Options) (*Backend, error) {
	switch o.Convolutions {
	case "", ConvAuto, ConvCuDNN, ConvIm2col:
	default:
		return nil, fmt.Errorf("gpu: convolutions %q (GORUN_CONV): want %s, %s or %s", o.Convolutions, ConvAuto, ConvCuDNN, ConvIm2col)
	}
	half := cuda.Float32
	switch o.Autocast {
	case "":
	case "bf16":
		half = cuda.BFloat16
	case "fp16":
		half = cuda.Half
	default:
		return nil, fmt.Errorf("gpu: autocast to %q: want bf16 or fp16", o.Autocast)
	}
	if half != cuda.Float32 && o.Convolutions == ConvIm2col {
		return nil, fmt.Errorf("gpu: autocast to %s runs its convolutions in cuDNN, not im2col", o.Autocast)
	}
	b := &Backend{dv: dv, args: cuda.NewArgs(), sms: dv.Multiprocessors, half: half}
	var err error
	if b.s, err = dv.NewStream(); err != nil {
		return nil, err
	}
	ptx := kernelsPTX
	if path := os.Getenv("GORUN_GPU_PTX"); path != "" { // kernels being developed
		if ptx, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("gpu: GORUN_GPU_PTX: %w", err)
		}
	}
	if b.mod, err = dv.LoadPTX(ptx); err != nil {
		return nil, fmt.Errorf("gpu: loading the kernels: %w", err)
	}
	for name, f := range b.k.table() {
		if *f, err = b.mod.Function(name); err != nil {
			return nil, fmt.Errorf("gpu: %w", err)
		}
	}
	if b.blas, err = b.s.OpenBLAS(); err != nil {
		return nil, err
	}
	if err := b.blas.SetTF32(o.TF32); err != nil {
		return nil, err
	}
	convs := o.Convolutions
	if b.half != cuda.Float32 {
		convs = ConvCuDNN // 16-bit convolutions are cuDNN's
	}
	if err := b.openDNN(convs); err != nil {
		return nil, err
	}
	b.mem = &memory{b: b}
	if o.Profile {
		b.profile, b.spent, b.calls = true, map[string]time.Duration{}, map[string]int{}
	}
	for _, s := range b.scratches() {
		s.b = b
	}
	return b, nil
}

// Close waits for the queued work and releases the backend's scratch
// memory, cuBLAS handle, kernels and stream, then the device's context;
// tensors still on the device must not be used afterwards. It returns the
// first failure, the sticky one included.
func (b *Backend) Close() error {
	err := b.Synchronize()
	for _, s := range b.scratches() {
		if s.p != 0 {
			err = errors.Join(err, b.dv.Free(s.p))
			s.p, s.bytes = 0, 0
		}
	}
	for _, c := range b.plans {
		err = errors.Join(err, c.Close())
	}
	if b.dnn != nil {
		err = errors.Join(err, b.dnn.Close())
	}
	err = errors.Join(err, b.blas.Close(), b.mod.Close(), b.s.Close(), b.dv.Close())
	b.fail(errors.New("the backend is closed"))
	return err
}

// scratches lists the backend's scratch buffers.
func (b *Backend) scratches() []*scratch {
	return []*scratch{&b.col, &b.tmp, &b.stats, &b.small, &b.sums, &b.hx, &b.hw, &b.hy, &b.hd}
}

// Name implements tensor.Backend.
func (b *Backend) Name() string {
	tf := ""
	if b.blas.TF32() {
		tf = ", TF32"
	}
	conv := "im2col convolutions (" + b.convNote + ")"
	if b.dnn != nil {
		conv = "cuDNN " + cudnnVersion(b.dnn.Version()) + " convolutions"
	}
	if b.half != cuda.Float32 {
		tf = ", products and convolutions in " + b.half.String() + " (autocast, channels-last)"
	}
	return fmt.Sprintf("cuda %s, driver %s, cuBLAS %d%s, %s", b.dv, b.dv.Driver().Version(), b.blas.Version(), tf, conv)
}

// cudnnVersion writes cuDNN's version number as major.minor.patch.
func cudnnVersion(v int) string {
	if v >= 90000 { // cuDNN 9: MMmmpp
		return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v/100%10, v%100) // cuDNN 8: Mmpp
}

// openDNN loads cuDNN for the convolutions as choice says (see
// Options.Convolutions).
func (b *Backend) openDNN(choice string) error {
	if choice == ConvIm2col {
		b.convNote = "chosen"
		return nil
	}
	d, err := b.s.OpenDNN()
	if err != nil {
		if choice == ConvCuDNN {
			return fmt.Errorf("gpu: convolutions in cuDNN: %w", err)
		}
		b.convNote = "no cuDNN"
		return nil
	}
	b.dnn, b.plans = d, map[cuda.ConvShape]*cuda.Conv{}
	return nil
}

// Device implements tensor.DeviceBackend.
func (b *Backend) Device() tensor.Device { return b.mem }

// CUDA returns the GPU and the stream the backend queues its work on.
func (b *Backend) CUDA() (*cuda.Device, *cuda.Stream) { return b.dv, b.s }

// Err implements tensor.DeviceBackend.
func (b *Backend) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// Synchronize implements tensor.DeviceBackend.
func (b *Backend) Synchronize() error {
	if err := b.Err(); err != nil {
		return err
	}
	b.fail(b.s.Synchronize())
	return b.Err()
}

// fail records the first error.
func (b *Backend) fail(err error) {
	if err == nil {
		return
	}
	b.mu.Lock()
	if b.err == nil {
		b.err = fmt.Errorf("gpu: %w", err)
	}
	b.mu.Unlock()
}

// failed reports whether work must be skipped.
func (b *Backend) failed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err != nil
}

// ptr returns t's device address, recording an error when t is not on
// this GPU.
func (b *Backend) ptr(t *tensor.Tensor) cuda.DevPtr {
	if t == nil {
		return 0
	}
	if t.Mem == nil || t.Mem.Dev != tensor.Device(b.mem) {
		where := "the host"
		if t.Mem != nil {
			where = t.Mem.Dev.String()
		}
		b.fail(fmt.Errorf("a %s tensor is on %s, not on %s (move models with nn.ToDevice)", t, where, b.dv))
		return 0
	}
	return cuda.DevPtr(t.Ptr())
}

// ptrs resolves tensors, reporting false when one is unusable.
func (b *Backend) ok(ts ...*tensor.Tensor) bool {
	if b.failed() {
		return false
	}
	for _, t := range ts {
		if t != nil && t.Len() >= maxElements {
			b.fail(fmt.Errorf("a %s tensor has %d elements; the kernels index at most %d", t, t.Len(), maxElements-1))
			return false
		}
		if t != nil && b.ptr(t) == 0 {
			b.fail(fmt.Errorf("a %s tensor has no device memory", t))
			return false
		}
	}
	return true
}

// op starts timing one operation when profiling: defer b.op(name)().
func (b *Backend) op(name string) func() {
	if !b.profile {
		return noop
	}
	t0, p0 := time.Now(), b.planned
	return func() {
		b.fail(b.s.Synchronize())
		b.spent[name] += time.Since(t0) - (b.planned - p0)
		b.calls[name]++
	}
}

func noop() {}

// Profile returns, when Options.Profile is set, a table of the time spent
// in each operation (launch and GPU time, as each waits for the GPU).
func (b *Backend) Profile() string {
	if !b.profile {
		return ""
	}
	names := make([]string, 0, len(b.spent))
	var total time.Duration
	for n, d := range b.spent {
		names = append(names, n)
		total += d
	}
	sort.Slice(names, func(i, j int) bool { return b.spent[names[i]] > b.spent[names[j]] })
	var w strings.Builder
	fmt.Fprintf(&w, "GPU operations, %.3f s in all:\n", total.Seconds())
	for _, n := range names {
		d := b.spent[n]
		fmt.Fprintf(&w, "  %-26s %8.3f s %5.1f%% %8d calls %8.1f µs/call\n", n, d.Seconds(), 100*d.Seconds()/total.Seconds(), b.calls[n], float64(d.Microseconds())/float64(b.calls[n]))
	}
	return w.String()
}

const threads = 256

// maxElements bounds a tensor's elements: the kernels index in 32 bits.
const maxElements = 1 << 31

// grid returns a grid-stride launch size for n elements.
func (b *Backend) grid(n int) cuda.Dim3 {
	return cuda.Dim3{X: max(1, min((n+threads-1)/threads, 32*b.sms))}
}

// launch queues kernel f over n elements with the packed arguments.
func (b *Backend) launch(f *cuda.Function, grid cuda.Dim3, block, shared int) {
	if err := b.args.Err(); err != nil {
		b.fail(err)
		return
	}
	b.fail(b.s.Launch(f, grid, cuda.Dim3{X: block}, shared, b.args))
}

// each launches f over n elements in a grid-stride loop.
func (b *Backend) each(f *cuda.Function, n int) {
	if n > 0 {
		b.launch(f, b.grid(n), threads, 0)
	}
}

// a starts a new argument list.
func (b *Backend) a() *cuda.Args { return b.args.Reset() }

// memory is the backend's tensor.Device.
type memory struct{ b *Backend }

func (m *memory) String() string { return m.b.dv.String() }

// Alloc implements tensor.Device: zeroed device memory.
func (m *memory) Alloc(n int) uintptr {
	p, err := m.b.dv.Alloc(4 * n)
	if err != nil {
		m.b.fail(err)
		return 0
	}
	m.b.fail(m.b.s.Fill32(p, 0, n))
	return uintptr(p)
}

// Free implements tensor.Device.
func (m *memory) Free(p uintptr) { m.b.fail(m.b.dv.Free(cuda.DevPtr(p))) }

// Upload implements tensor.Device.
func (m *memory) Upload(p uintptr, src []float32) {
	if !m.b.failed() {
		m.b.fail(m.b.s.Upload(cuda.DevPtr(p), src))
	}
}

// Download implements tensor.Device.
func (m *memory) Download(dst []float32, p uintptr) {
	if !m.b.failed() {
		m.b.fail(m.b.s.Download(dst, cuda.DevPtr(p)))
	}
}

// scratch is a grow-only device buffer for intermediate results.
type scratch struct {
	b     *Backend
	p     cuda.DevPtr
	bytes int
}

// get returns at least bytes of scratch memory (0 after a failure).
func (s *scratch) get(bytes int) cuda.DevPtr {
	if bytes <= s.bytes {
		return s.p
	}
	if s.p != 0 {
		s.b.fail(s.b.dv.Free(s.p))
	}
	p, err := s.b.dv.Alloc(bytes)
	if err != nil {
		s.b.fail(err)
		s.p, s.bytes = 0, 0
		return 0
	}
	s.p, s.bytes = p, bytes
	return p
}

// MatMul implements tensor.Backend with cuBLAS SGEMM.
func (b *Backend) MatMul(a *tensor.Tensor, transA bool, bm *tensor.Tensor, transB bool, c *tensor.Tensor, alpha, beta float32) {
	defer b.op("MatMul")()
	if !b.ok(a, bm, c) {
		return
	}
	if b.half != cuda.Float32 {
		b.matMulHalf(a, transA, bm, transB, c, alpha, beta)
		return
	}
	m, n, k := tensor.MatMulDims(a, transA, bm, transB)
	b.gemm(transA, transB, m, n, k, alpha, b.ptr(a), a.Shape[1], b.ptr(bm), bm.Shape[1], beta, b.ptr(c), c.Shape[1])
}

func (b *Backend) gemm(transA, transB bool, m, n, k int, alpha float32, a cuda.DevPtr, lda int, bm cuda.DevPtr, ldb int, beta float32, c cuda.DevPtr, ldc int) {
	if b.failed() || a == 0 || bm == 0 || c == 0 {
		return
	}
	if err := b.dv.Enter(); err != nil {
		b.fail(err)
		return
	}
	b.fail(b.blas.GEMM(transA, transB, m, n, k, alpha, a, lda, bm, ldb, beta, c, ldc))
	b.dv.Leave()
}

// AddBias implements tensor.Backend.
func (b *Backend) AddBias(x, bias *tensor.Tensor) {
	defer b.op("AddBias")()
	if !b.ok(x, bias) {
		return
	}
	b.addBias(x, bias)
}

// addBias queues x[i, j, ...] += bias[j].
func (b *Backend) addBias(x, bias *tensor.Tensor) {
	n, c, hw := tensor.Planes(x)
	b.a().Ptr(b.ptr(x)).Ptr(b.ptr(bias)).Int(n * c * hw).Int(c).Int(hw)
	b.each(b.k.addBias, n*c*hw)
}

// BiasGrad implements tensor.Backend: each channel's sum is cut into
// parts of about 8192 elements reduced by blocks of their own, and the
// parts are then added in order, so the result does not depend on how the
// GPU schedules them.
func (b *Backend) BiasGrad(dy, db *tensor.Tensor) {
	defer b.op("BiasGrad")()
	if !b.ok(dy, db) {
		return
	}
	b.biasGrad(dy, db, noRounding)
}

// biasGrad queues db += the sum of dy over each channel; unless kind is
// noRounding, dy's values and the sum are rounded to kind's 16 bits (a
// 16-bit product's gradient, as amp.Autocast computes it).
func (b *Backend) biasGrad(dy, db *tensor.Tensor, kind int) {
	n, c, hw := tensor.Planes(dy)
	parts := channelParts(n, hw)
	partial := b.sums.get(8 * c * parts)
	if partial == 0 {
		return
	}
	b.a().Ptr(b.ptr(dy)).Ptr(partial).Int(n).Int(c).Int(hw).Int(kind)
	b.launch(b.k.channelPartials, cuda.Dim3{X: c, Y: parts}, threads, threads*8)
	b.a().Ptr(partial).Ptr(b.ptr(db)).Int(c).Int(parts).Int(kind)
	b.launch(b.k.sumPartials, cuda.Dim3{X: (c + threads - 1) / threads}, threads, 0)
}

// convArgs appends the geometry every convolution kernel takes.
func (b *Backend) convArgs(a *cuda.Args, n, c, h, w int, p tensor.ConvParams, oh, ow int) {
	a.Int(n).Int(c).Int(h).Int(w).Int(p.KernelH).Int(p.KernelW).Int(p.StrideH).Int(p.StrideW).Int(p.PadH).Int(p.PadW).Int(oh).Int(ow)
}

// convGeometry is one convolution's sizes and its scratch: the batch's
// im2col matrix col [C·KH·KW, N·OH·OW] and tmp [F, N·OH·OW].
type convGeometry struct {
	n, c, h, w, f, oh, ow, ckk, np int
	col, tmp                       cuda.DevPtr
}

// conv sizes a convolution of x by w with output planes oh×ow and gets
// its scratch; false when it cannot run.
func (b *Backend) conv(x, w *tensor.Tensor, oh, ow int, p tensor.ConvParams) (convGeometry, bool) {
	g := convGeometry{n: x.Shape[0], c: x.Shape[1], h: x.Shape[2], w: x.Shape[3], f: w.Shape[0], oh: oh, ow: ow}
	g.ckk, g.np = g.c*p.KernelH*p.KernelW, g.n*oh*ow
	if g.ckk*g.np >= maxElements {
		b.fail(fmt.Errorf("convolution of %s: its im2col matrix has %d elements; the kernels index at most %d (use smaller batches)", x, g.ckk*g.np, maxElements-1))
		return g, false
	}
	g.col, g.tmp = b.col.get(4*g.ckk*g.np), b.tmp.get(4*g.f*g.np)
	return g, g.col != 0 && g.tmp != 0
}

// plan returns the cuDNN plan for convolving x by w into y (planning it
// the first time this shape comes) and its workspace; nil after a failure.
func (b *Backend) plan(x, w, y *tensor.Tensor, p tensor.ConvParams) (*cuda.Conv, cuda.DevPtr) {
	s := cuda.ConvShape{N: x.Shape[0], C: x.Shape[1], H: x.Shape[2], W: x.Shape[3], F: w.Shape[0], KH: p.KernelH, KW: p.KernelW,
		StrideH: p.StrideH, StrideW: p.StrideW, PadH: p.PadH, PadW: p.PadW, OH: y.Shape[2], OW: y.Shape[3], TF32: b.blas.TF32(), Data: b.half}
	c, ok := b.plans[s]
	if !ok {
		t0 := time.Now()
		var err error
		c, err = b.dnn.Plan(s, convWorkspaceLimit)
		if b.profile {
			d := time.Since(t0)
			b.planned += d
			b.spent["cuDNN planning"] += d
			b.calls["cuDNN planning"]++
		}
		if err != nil {
			b.fail(err)
			return nil, 0
		}
		b.plans[s] = c
	}
	var ws cuda.DevPtr
	if c.Workspace() > 0 {
		if ws = b.col.get(c.Workspace()); ws == 0 {
			return nil, 0
		}
	}
	return c, ws
}

// enter makes the device's context current for a run of library calls
// (false after a failure); the caller then calls b.dv.Leave.
func (b *Backend) enter() bool {
	if b.failed() {
		return false
	}
	if err := b.dv.Enter(); err != nil {
		b.fail(err)
		return false
	}
	return true
}

// im2col queues the im2col matrix of x into g.col.
func (b *Backend) im2col(x *tensor.Tensor, g convGeometry, p tensor.ConvParams) {
	b.convArgs(b.a().Ptr(b.ptr(x)).Ptr(g.col), g.n, g.c, g.h, g.w, p, g.oh, g.ow)
	b.each(b.k.im2col, g.ckk*g.np)
}

// Conv2d implements tensor.Backend: in cuDNN, then the bias added; or the
// batch's im2col matrix, one SGEMM with the weights into tmp
// [F, N·OH·OW], and a transpose to NCHW that adds the bias.
func (b *Backend) Conv2d(x, w, bias, y *tensor.Tensor, p tensor.ConvParams) {
	defer b.op("Conv2d")()
	if !b.ok(x, w, bias, y) {
		return
	}
	if b.half != cuda.Float32 {
		b.conv2dHalf(x, w, bias, y, p)
		return
	}
	if b.dnn != nil {
		c, ws := b.plan(x, w, y, p)
		if c != nil && b.enter() {
			b.fail(c.Forward(b.ptr(x), b.ptr(w), b.ptr(y), ws))
			b.dv.Leave()
		}
		if bias != nil {
			b.addBias(y, bias)
		}
		return
	}
	g, ok := b.conv(x, w, y.Shape[2], y.Shape[3], p)
	if !ok {
		return
	}
	b.im2col(x, g, p)
	b.gemm(false, false, g.f, g.np, g.ckk, 1, b.ptr(w), g.ckk, g.col, g.np, 0, g.tmp, g.np)
	b.a().Ptr(g.tmp).Ptr(b.ptr(y)).Ptr(b.ptr(bias)).Int(g.n).Int(g.f).Int(g.oh * g.ow)
	b.each(b.k.fnpToNfp, g.n*g.f*g.oh*g.ow)
}

// Conv2dBackward implements tensor.Backend: both gradients in cuDNN; or
// dy transposed to [F, N·OH·OW] in tmp, the weight gradient as one SGEMM
// with the im2col matrix, and the input gradient as the column gradient
// (in col) folded back by col2im.
func (b *Backend) Conv2dBackward(x, w, dy, dx, dw, db *tensor.Tensor, p tensor.ConvParams) {
	defer b.op("Conv2dBackward")()
	if !b.ok(x, w, dy, dx, dw, db) {
		return
	}
	if b.half != cuda.Float32 {
		b.conv2dBackwardHalf(x, w, dy, dx, dw, db, p)
		return
	}
	if b.dnn != nil {
		c, ws := b.plan(x, w, dy, p)
		if c != nil && b.enter() {
			if dw != nil {
				b.fail(c.BackwardFilter(b.ptr(x), b.ptr(dy), b.ptr(dw), ws, 1))
			}
			if dx != nil {
				b.fail(c.BackwardData(b.ptr(w), b.ptr(dy), b.ptr(dx), ws))
			}
			b.dv.Leave()
		}
		if db != nil {
			b.BiasGrad(dy, db)
		}
		return
	}
	g, ok := b.conv(x, w, dy.Shape[2], dy.Shape[3], p)
	if !ok {
		return
	}
	b.a().Ptr(b.ptr(dy)).Ptr(g.tmp).Int(g.n).Int(g.f).Int(g.oh * g.ow)
	b.each(b.k.nfpToFnp, g.n*g.f*g.oh*g.ow)
	if dw != nil {
		b.im2col(x, g, p)
		b.gemm(false, true, g.f, g.ckk, g.np, 1, g.tmp, g.np, g.col, g.np, 1, b.ptr(dw), g.ckk)
	}
	if db != nil {
		b.BiasGrad(dy, db)
	}
	if dx != nil {
		// The column gradient reuses col: the stream runs in order.
		b.gemm(true, false, g.ckk, g.np, g.f, 1, b.ptr(w), g.ckk, g.tmp, g.np, 0, g.col, g.np)
		b.convArgs(b.a().Ptr(g.col).Ptr(b.ptr(dx)), g.n, g.c, g.h, g.w, p, g.oh, g.ow)
		b.each(b.k.col2im, g.n*g.c*g.h*g.w)
	}
}

func (b *Backend) poolArgs(a *cuda.Args, x, y *tensor.Tensor) *cuda.Args {
	return a.Int(y.Len()).Int(x.Shape[2]).Int(x.Shape[3]).Int(y.Shape[2]).Int(y.Shape[3])
}

func windowArgs(a *cuda.Args, p tensor.PoolParams) {
	a.Int(p.KernelH).Int(p.KernelW).Int(p.StrideH).Int(p.StrideW).Int(p.PadH).Int(p.PadW)
}

// MaxPool2d implements tensor.Backend.
func (b *Backend) MaxPool2d(x, y *tensor.Tensor, p tensor.PoolParams) {
	defer b.op("MaxPool2d")()
	if !b.ok(x, y) {
		return
	}
	windowArgs(b.poolArgs(b.a().Ptr(b.ptr(x)).Ptr(b.ptr(y)), x, y), p)
	b.each(b.k.maxPool, y.Len())
}

// MaxPool2dBackward implements tensor.Backend.
func (b *Backend) MaxPool2dBackward(x, dy, dx *tensor.Tensor, p tensor.PoolParams) {
	defer b.op("MaxPool2dBackward")()
	if !b.ok(x, dy, dx) {
		return
	}
	b.Fill(dx, 0)
	windowArgs(b.poolArgs(b.a().Ptr(b.ptr(x)).Ptr(b.ptr(dy)).Ptr(b.ptr(dx)), x, dy), p)
	b.each(b.k.maxPoolBackward, dy.Len())
}

// AvgPool2d implements tensor.Backend.
func (b *Backend) AvgPool2d(x, y *tensor.Tensor, p tensor.PoolParams) {
	defer b.op("AvgPool2d")()
	if !b.ok(x, y) {
		return
	}
	windowArgs(b.poolArgs(b.a().Ptr(b.ptr(x)).Ptr(b.ptr(y)), x, y).Int(0), p)
	b.each(b.k.avgPool, y.Len())
}

// AvgPool2dBackward implements tensor.Backend.
func (b *Backend) AvgPool2dBackward(dy, dx *tensor.Tensor, p tensor.PoolParams) {
	defer b.op("AvgPool2dBackward")()
	if !b.ok(dy, dx) {
		return
	}
	b.Fill(dx, 0)
	windowArgs(b.poolArgs(b.a().Ptr(b.ptr(dy)).Ptr(b.ptr(dx)), dx, dy).Int(0), p)
	b.each(b.k.avgPoolBackward, dy.Len())
}

// AdaptiveAvgPool2d implements tensor.Backend.
func (b *Backend) AdaptiveAvgPool2d(x, y *tensor.Tensor) {
	defer b.op("AdaptiveAvgPool2d")()
	if !b.ok(x, y) {
		return
	}
	windowArgs(b.poolArgs(b.a().Ptr(b.ptr(x)).Ptr(b.ptr(y)), x, y).Int(1), tensor.PoolParams{})
	b.each(b.k.avgPool, y.Len())
}

// AdaptiveAvgPool2dBackward implements tensor.Backend.
func (b *Backend) AdaptiveAvgPool2dBackward(dy, dx *tensor.Tensor) {
	defer b.op("AdaptiveAvgPool2dBackward")()
	if !b.ok(dy, dx) {
		return
	}
	b.Fill(dx, 0)
	windowArgs(b.poolArgs(b.a().Ptr(b.ptr(dy)).Ptr(b.ptr(dx)), dx, dy).Int(1), tensor.PoolParams{})
	b.each(b.k.avgPoolBackward, dy.Len())
}

// sumAcross passes n device doubles at p through f on the host (the
// SyncBatchNorm exchange), with count appended, and returns the total
// count.
func (b *Backend) sumAcross(f func([]float64), p cuda.DevPtr, n int, count float64) float64 {
	if cap(b.hostStats) < n+1 {
		b.hostStats = make([]float64, n+1)
	}
	h := b.hostStats[:n+1]
	b.fail(b.s.CopyToHost(unsafe.Pointer(&h[0]), p, 8*n))
	b.fail(b.s.Synchronize())
	if b.failed() {
		return count
	}
	h[n] = count
	f(h)
	b.fail(b.s.CopyToDevice(p, unsafe.Pointer(&h[0]), 8*n))
	b.fail(b.s.Synchronize())
	return h[n]
}

// channelParts is how many blocks share each channel's reduction over
// n×hw elements: about 8192 elements each, at most 64.
func channelParts(n, hw int) int { return max(1, min(64, n*hw/8192)) }

// channelSums queues out[ch] = the sum over channel ch of what kernel f
// reduces (the first arguments already packed, n, c and hw appended
// here), through partial, which holds c×parts doubles.
func (b *Backend) channelSums(f *cuda.Function, a *cuda.Args, partial, out cuda.DevPtr, n, c, hw int) {
	parts := channelParts(n, hw)
	a.Ptr(partial).Int(n).Int(c).Int(hw)
	b.launch(f, cuda.Dim3{X: c, Y: parts}, threads, threads*8)
	b.a().Ptr(partial).Ptr(out).Int(c).Int(parts)
	b.launch(b.k.addParts, cuda.Dim3{X: (c + threads - 1) / threads}, threads, 0)
}

// BatchNorm implements tensor.Backend; statistics accumulate in float64,
// each channel's reduced by several blocks (channelParts).
func (b *Backend) BatchNorm(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	defer b.op("BatchNorm")()
	b.batchNorm(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd, p, false)
}

// BatchNormReLU implements tensor.BatchNormReLUBackend: the relu applied
// as each element is normalised.
func (b *Backend) BatchNormReLU(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	defer b.op("BatchNormReLU")()
	b.batchNorm(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd, p, true)
}

// batchNorm is BatchNorm, with the relu of y fused in when relu is set.
func (b *Backend) batchNorm(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams, relu bool) {
	if !b.ok(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd) {
		return
	}
	n, c, hw := tensor.Planes(x)
	switch {
	case p.Training && p.SavedStats:
		// The statistics as the earlier pass over x left them.
	case p.Training:
		st := b.stats.get(8 * 3 * c)
		partial := b.sums.get(8 * c * channelParts(n, hw))
		if st == 0 || partial == 0 {
			return
		}
		sums, sq := st, st.Add(8*c)
		b.channelSums(b.k.bnSumParts, b.a().Ptr(b.ptr(x)), partial, sums, n, c, hw)
		count := float64(n * hw)
		if p.SumAcross != nil {
			count = b.sumAcross(p.SumAcross, sums, c, count)
		}
		b.channelSums(b.k.bnSqdevParts, b.a().Ptr(b.ptr(x)).Ptr(sums).Float64(count), partial, sq, n, c, hw)
		if p.SumAcross != nil {
			b.sumAcross(func(v []float64) { p.SumAcross(v[:c]) }, sq, c, count)
		}
		b.a().Ptr(sums).Ptr(sq).Float64(count).Ptr(b.ptr(runMean)).Ptr(b.ptr(runVar)).Ptr(b.ptr(saveMean)).Ptr(b.ptr(saveInvStd)).Int(c).Float(p.Momentum).Float(p.Eps)
		b.launch(b.k.bnFinish, cuda.Dim3{X: (c + threads - 1) / threads}, threads, 0)
	default:
		b.a().Ptr(b.ptr(runMean)).Ptr(b.ptr(runVar)).Ptr(b.ptr(saveMean)).Ptr(b.ptr(saveInvStd)).Int(c).Float(p.Eps)
		b.launch(b.k.bnEvalStats, cuda.Dim3{X: (c + threads - 1) / threads}, threads, 0)
	}
	a := b.a().Ptr(b.ptr(x)).Ptr(b.ptr(y)).Ptr(b.ptr(gamma)).Ptr(b.ptr(beta)).Ptr(b.ptr(saveMean)).Ptr(b.ptr(saveInvStd)).Int(boolInt(relu))
	if g, ok := planeGrid(n*c, hw); ok {
		a.Int(c).Int(hw)
		b.launch(b.k.bnApplyPlanes, g, threads, 0)
		return
	}
	a.Int(n * c * hw).Int(c).Int(hw)
	b.each(b.k.bnApply, n*c*hw)
}

// planeGrid is the grid of the _planes kernels over planes of hw
// elements: one block per 1024 elements of a plane; false for planes too
// small for it (under 256 elements), where the grid-stride kernels run.
func planeGrid(planes, hw int) (cuda.Dim3, bool) {
	const segment, smallest = 1024, 256
	return cuda.Dim3{X: planes, Y: (hw + segment - 1) / segment}, hw >= smallest
}

// BatchNormBackward implements tensor.Backend.
func (b *Backend) BatchNormBackward(x, dy, dx, gamma, dgamma, dbeta, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	defer b.op("BatchNormBackward")()
	b.batchNormBackward(x, dy, dx, gamma, nil, dgamma, dbeta, saveMean, saveInvStd, p)
}

// BatchNormReLUBackward implements tensor.BatchNormReLUBackend: where the
// relu stopped the gradient is found again from x, gamma, beta and the
// saved statistics with the forward pass's arithmetic, as each element is
// read.
func (b *Backend) BatchNormReLUBackward(x, dy, dx, gamma, beta, dgamma, dbeta, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	defer b.op("BatchNormReLUBackward")()
	if beta == nil {
		b.fail(errors.New("BatchNormReLUBackward needs the batch norm's beta (the relu's mask is found again from it)"))
		return
	}
	b.batchNormBackward(x, dy, dx, gamma, beta, dgamma, dbeta, saveMean, saveInvStd, p)
}

// batchNormBackward is BatchNormBackward, with the relu fused in when
// reluBeta (the batch norm's beta) is set.
func (b *Backend) batchNormBackward(x, dy, dx, gamma, reluBeta, dgamma, dbeta, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	if !b.ok(x, dy, dx, gamma, reluBeta, dgamma, dbeta, saveMean, saveInvStd) {
		return
	}
	n, c, hw := tensor.Planes(x)
	parts := channelParts(n, hw)
	sums := b.stats.get(8 * 3 * c)
	partial := b.sums.get(8 * 2 * c * parts)
	if sums == 0 || partial == 0 {
		return
	}
	b.a().Ptr(b.ptr(x)).Ptr(b.ptr(dy)).Ptr(b.ptr(saveMean)).Ptr(b.ptr(saveInvStd)).Ptr(b.ptr(gamma)).Ptr(b.ptr(reluBeta)).Ptr(partial).Int(n).Int(c).Int(hw)
	b.launch(b.k.bnBackwardParts, cuda.Dim3{X: c, Y: parts}, threads, threads*8)
	b.a().Ptr(partial).Ptr(sums).Ptr(b.ptr(dgamma)).Ptr(b.ptr(dbeta)).Int(c).Int(parts)
	b.launch(b.k.bnBackwardFinish, cuda.Dim3{X: (c + threads - 1) / threads}, threads, 0)
	count := float64(n * hw)
	if p.Training && p.SumAcross != nil {
		count = b.sumAcross(p.SumAcross, sums, 2*c, count)
	}
	training := 0
	if p.Training {
		training = 1
	}
	a := b.a().Ptr(b.ptr(x)).Ptr(b.ptr(dy)).Ptr(b.ptr(dx)).Ptr(b.ptr(gamma)).Ptr(b.ptr(reluBeta)).Ptr(b.ptr(saveMean)).Ptr(b.ptr(saveInvStd)).Ptr(sums).Float64(count).Int(training)
	if g, ok := planeGrid(n*c, hw); ok {
		a.Int(c).Int(hw)
		b.launch(b.k.bnBackwardDxPlanes, g, threads, 0)
		return
	}
	a.Int(n * c * hw).Int(c).Int(hw)
	b.each(b.k.bnBackwardDx, n*c*hw)
}

// ReLU implements tensor.Backend.
func (b *Backend) ReLU(x, y *tensor.Tensor) {
	defer b.op("ReLU")()
	if b.ok(x, y) {
		b.a().Ptr(b.ptr(x)).Ptr(b.ptr(y)).Int(x.Len())
		b.each(b.k.relu, x.Len())
	}
}

// ReLUBackward implements tensor.Backend.
func (b *Backend) ReLUBackward(y, dy, dx *tensor.Tensor) {
	defer b.op("ReLUBackward")()
	if b.ok(y, dy, dx) {
		b.a().Ptr(b.ptr(y)).Ptr(b.ptr(dy)).Ptr(b.ptr(dx)).Int(y.Len())
		b.each(b.k.reluBackward, y.Len())
	}
}

// Dropout implements tensor.Backend with the CPU backend's generator, so
// both draw the same pattern for a seed.
func (b *Backend) Dropout(x, y, mask *tensor.Tensor, p float32, seed uint64) {
	defer b.op("Dropout")()
	if b.ok(x, y, mask) {
		b.a().Ptr(b.ptr(x)).Ptr(b.ptr(y)).Ptr(b.ptr(mask)).Int(x.Len()).Float(p).Int64(int64(seed))
		b.each(b.k.dropout, x.Len())
	}
}

// Mul implements tensor.Backend.
func (b *Backend) Mul(x, y, z *tensor.Tensor) {
	defer b.op("Mul")()
	if b.ok(x, y, z) {
		b.a().Ptr(b.ptr(x)).Ptr(b.ptr(y)).Ptr(b.ptr(z)).Int(x.Len())
		b.each(b.k.mul, x.Len())
	}
}

// AddReLU implements tensor.AddReLUBackend: z = relu(x + y) in one pass.
func (b *Backend) AddReLU(x, y, z *tensor.Tensor) {
	defer b.op("AddReLU")()
	if b.ok(x, y, z) {
		b.a().Ptr(b.ptr(x)).Ptr(b.ptr(y)).Ptr(b.ptr(z)).Int(x.Len())
		b.each(b.k.addReLU, x.Len())
	}
}

// Add implements tensor.Backend.
func (b *Backend) Add(x, y, z *tensor.Tensor) {
	defer b.op("Add")()
	if b.ok(x, y, z) {
		b.a().Ptr(b.ptr(x)).Ptr(b.ptr(y)).Ptr(b.ptr(z)).Int(x.Len())
		b.each(b.k.add, x.Len())
	}
}

// Copy implements tensor.Backend.
func (b *Backend) Copy(src, dst *tensor.Tensor) {
	defer b.op("Copy")()
	if b.ok(src, dst) {
		b.fail(b.s.CopyDevice(b.ptr(dst), b.ptr(src), 4*src.Len()))
	}
}

// Fill implements tensor.Backend.
func (b *Backend) Fill(t *tensor.Tensor, v float32) {
	defer b.op("Fill")()
	if b.ok(t) {
		b.fail(b.s.Fill32(b.ptr(t), math.Float32bits(v), t.Len()))
	}
}

// rows launches a warp-per-row kernel over n rows.
func (b *Backend) rows(f *cuda.Function, n int) {
	const perBlock = threads / 32
	b.launch(f, cuda.Dim3{X: (n + perBlock - 1) / perBlock}, threads, 0)
}

// LogSoftmax implements tensor.Backend.
func (b *Backend) LogSoftmax(x, y *tensor.Tensor) {
	defer b.op("LogSoftmax")()
	if b.ok(x, y) {
		b.a().Ptr(b.ptr(x)).Ptr(b.ptr(y)).Int(x.Shape[0]).Int(x.Shape[1])
		b.rows(b.k.logSoftmax, x.Shape[0])
	}
}

// LogSoftmaxBackward implements tensor.Backend.
func (b *Backend) LogSoftmaxBackward(y, dy, dx *tensor.Tensor) {
	defer b.op("LogSoftmaxBackward")()
	if b.ok(y, dy, dx) {
		b.a().Ptr(b.ptr(y)).Ptr(b.ptr(dy)).Ptr(b.ptr(dx)).Int(y.Shape[0]).Int(y.Shape[1])
		b.rows(b.k.logSoftmaxBackward, y.Shape[0])
	}
}

// targets uploads the class labels, returning their device address.
func (b *Backend) targets(target []int32) cuda.DevPtr {
	p := b.small.get(4*len(target) + 64)
	if p == 0 || len(target) == 0 {
		return 0
	}
	b.fail(b.s.CopyToDevice(p.Add(64), unsafe.Pointer(&target[0]), 4*len(target)))
	return p.Add(64)
}

// NLLLoss implements tensor.Backend; reading the value waits for the
// step's queued work, as loss.item() does in PyTorch.
func (b *Backend) NLLLoss(logp *tensor.Tensor, target []int32) float32 {
	defer b.op("NLLLoss")()
	if !b.ok(logp) {
		return float32(math.NaN())
	}
	t := b.targets(target)
	if t == 0 {
		return float32(math.NaN())
	}
	out := b.small.p // the first 64 bytes hold the result
	b.a().Ptr(b.ptr(logp)).Ptr(t).Ptr(out).Int(logp.Shape[0]).Int(logp.Shape[1])
	b.launch(b.k.nllLoss, cuda.Dim3{X: 1}, threads, threads*8)
	if cap(b.lossOut) < 1 {
		b.lossOut = make([]float32, 1)
	}
	b.fail(b.s.Download(b.lossOut[:1], out))
	if b.failed() {
		return float32(math.NaN())
	}
	return b.lossOut[0]
}

// NLLLossBackward implements tensor.Backend.
func (b *Backend) NLLLossBackward(target []int32, dlogp *tensor.Tensor, scale float32) {
	defer b.op("NLLLossBackward")()
	if !b.ok(dlogp) {
		return
	}
	b.Fill(dlogp, 0)
	t := b.targets(target)
	if t == 0 {
		return
	}
	n := dlogp.Shape[0]
	b.a().Ptr(t).Ptr(b.ptr(dlogp)).Int(n).Int(dlogp.Shape[1]).Float(scale)
	b.each(b.k.nllLossBackward, n)
}

// SGDStep implements tensor.Backend.
func (b *Backend) SGDStep(p, g, buf *tensor.Tensor, o tensor.SGDOptions, first bool) {
	defer b.op("SGDStep")()
	if o.Momentum == 0 {
		buf = nil
	}
	if b.ok(p, g, buf) {
		b.a().Ptr(b.ptr(p)).Ptr(b.ptr(g)).Ptr(b.ptr(buf)).Int(p.Len()).Float(o.LR).Float(o.Momentum).Float(o.Dampening).Float(o.WeightDecay).Int(boolInt(o.Nesterov)).Int(boolInt(first))
		b.each(b.k.sgd, p.Len())
	}
}

// AdamStep implements tensor.Backend.
func (b *Backend) AdamStep(p, g, m, v *tensor.Tensor, o tensor.AdamOptions, step int) {
	defer b.op("AdamStep")()
	if b.ok(p, g, m, v) {
		bc1 := 1 - math.Pow(float64(o.Beta1), float64(step))
		bc2 := 1 - math.Pow(float64(o.Beta2), float64(step))
		b.a().Ptr(b.ptr(p)).Ptr(b.ptr(g)).Ptr(b.ptr(m)).Ptr(b.ptr(v)).Int(p.Len()).Float(o.Beta1).Float(o.Beta2).Float(o.Eps).Float(o.WeightDecay).Float(float32(float64(o.LR) / bc1)).Float(float32(math.Sqrt(bc2)))
		b.each(b.k.adam, p.Len())
	}
}

// AdadeltaStep implements tensor.Backend.
func (b *Backend) AdadeltaStep(p, g, sqAvg, accDelta *tensor.Tensor, o tensor.AdadeltaOptions) {
	defer b.op("AdadeltaStep")()
	if b.ok(p, g, sqAvg, accDelta) {
		b.a().Ptr(b.ptr(p)).Ptr(b.ptr(g)).Ptr(b.ptr(sqAvg)).Ptr(b.ptr(accDelta)).Int(p.Len()).Float(o.LR).Float(o.Rho).Float(o.Eps).Float(o.WeightDecay)
		b.each(b.k.adadelta, p.Len())
	}
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

var _ tensor.DeviceBackend = (*Backend)(nil)
