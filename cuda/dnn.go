package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// dnnAPI holds the cuDNN entry points: its legacy convolution API, which
// cuDNN 8 and 9 both export.
type dnnAPI struct {
	create         func(h *uintptr) Result
	destroy        func(h uintptr) Result
	version        func() uintptr
	errorString    func(r Result) string
	setStream      func(h uintptr, s uintptr) Result
	createTensor   func(d *uintptr) Result
	setTensor4d    func(d uintptr, format, dtype int32, n, c, h, w int32) Result
	destroyTensor  func(d uintptr) Result
	createFilter   func(d *uintptr) Result
	setFilter4d    func(d uintptr, dtype, format int32, k, c, h, w int32) Result
	destroyFilter  func(d uintptr) Result
	createConv     func(d *uintptr) Result
	setConv2d      func(d uintptr, padH, padW, strideH, strideW, dilH, dilW int32, mode, dtype int32) Result
	setConvMath    func(d uintptr, math int32) Result
	destroyConv    func(d uintptr) Result
	findForward    func(h, x, w, conv, y uintptr, want int32, got *int32, perf *algoPerf) Result
	findBackData   func(h, w, dy, conv, dx uintptr, want int32, got *int32, perf *algoPerf) Result
	findBackFilter func(h, x, dy, conv, dw uintptr, want int32, got *int32, perf *algoPerf) Result

	// The three convolution calls of a training step, as raw addresses
	// for purego.SyscallN (one allocation per call instead of four).
	rawForward, rawBackData, rawBackFilter uintptr
}

// algoPerf is cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: the
// three share this layout.
type algoPerf struct {
	algo   int32
	status Result
	_      float32 // time
	memory uint64
	_      int32    // determinism
	_      int32    // mathType
	_      [3]int32 // reserved
}

// cuDNN's enumerations, as its header numbers them.
const (
	dnnFloat            = 0 // CUDNN_DATA_FLOAT
	dnnHalf             = 2 // CUDNN_DATA_HALF
	dnnBFloat16         = 9 // CUDNN_DATA_BFLOAT16
	dnnNCHW             = 0 // CUDNN_TENSOR_NCHW
	dnnNHWC             = 1 // CUDNN_TENSOR_NHWC (for filters: KRSC)
	dnnCrossCorrelation = 1 // CUDNN_CROSS_CORRELATION, what deep-learning frameworks call convolution
	dnnDefaultMath      = 0 // CUDNN_DEFAULT_MATH: TF32 tensor cores allowed for float data
	dnnTensorOpMath     = 1 // CUDNN_TENSOR_OP_MATH: tensor cores for 16-bit data
	dnnFMAMath          = 3 // CUDNN_FMA_MATH: float data in float arithmetic only
)

// ConvData is the element type of a convolution's tensors.
type ConvData int

// The convolutions' element types.
const (
	// Float32 tensors in NCHW layout (filters KCRS).
	Float32 ConvData = iota
	// BFloat16 and Half tensors in NHWC layout (filters KRSC) with float32
	// accumulation, on the tensor cores: torch.autocast's convolutions in
	// PyTorch's channels-last layout.
	BFloat16
	Half
)

func (d ConvData) String() string {
	return [...]string{"float32", "bf16", "fp16"}[d]
}

// dnnType returns cuDNN's data type and tensor format for d.
func (d ConvData) dnnType() (dtype, format int32) {
	switch d {
	case BFloat16:
		return dnnBFloat16, dnnNHWC
	case Half:
		return dnnHalf, dnnNHWC
	}
	return dnnFloat, dnnNCHW
}

// dnnLibraries are the names tried for cuDNN, newest first: the library
// (in cuDNN 9 a shim that loads the rest) and the parts that hold the
// convolutions when the shim does not export them.
func dnnLibraries() [][]string {
	return [][]string{
		{"libcudnn.so.9", "libcudnn_cnn.so.9", "libcudnn_ops.so.9", "libcudnn_graph.so.9"},
		{"libcudnn.so.8", "libcudnn_cnn_infer.so.8", "libcudnn_cnn_train.so.8", "libcudnn_ops_infer.so.8"},
	}
}

// DNN is a cuDNN handle bound to one stream. Its convolutions read and
// write float32 tensors in NCHW layout, or 16-bit ones in NHWC (ConvData).
type DNN struct {
	api             dnnAPI
	dv              *Device
	h               uintptr
	version         int
	one, zero, beta float32 // host scalars the calls point at
}

// OpenDNN loads cuDNN and creates a handle whose work goes to s. The
// library is found in the loader's search path, then in CUDA_HOME/lib64
// (or /usr/local/cuda); GORUN_CUDNN, when set, is its path.
func (s *Stream) OpenDNN() (*DNN, error) {
	libs, name, err := loadDNN()
	if err != nil {
		return nil, err
	}
	d := &DNN{dv: s.dv, one: 1}
	if err := bindAny(libs, name, []symbol{
		{&d.api.create, "cudnnCreate"},
		{&d.api.destroy, "cudnnDestroy"},
		{&d.api.version, "cudnnGetVersion"},
		{&d.api.errorString, "cudnnGetErrorString"},
		{&d.api.setStream, "cudnnSetStream"},
		{&d.api.createTensor, "cudnnCreateTensorDescriptor"},
		{&d.api.setTensor4d, "cudnnSetTensor4dDescriptor"},
		{&d.api.destroyTensor, "cudnnDestroyTensorDescriptor"},
		{&d.api.createFilter, "cudnnCreateFilterDescriptor"},
		{&d.api.setFilter4d, "cudnnSetFilter4dDescriptor"},
		{&d.api.destroyFilter, "cudnnDestroyFilterDescriptor"},
		{&d.api.createConv, "cudnnCreateConvolutionDescriptor"},
		{&d.api.setConv2d, "cudnnSetConvolution2dDescriptor"},
		{&d.api.setConvMath, "cudnnSetConvolutionMathType"},
		{&d.api.destroyConv, "cudnnDestroyConvolutionDescriptor"},
		{&d.api.findForward, "cudnnFindConvolutionForwardAlgorithm"},
		{&d.api.findBackData, "cudnnFindConvolutionBackwardDataAlgorithm"},
		{&d.api.findBackFilter, "cudnnFindConvolutionBackwardFilterAlgorithm"},
	}); err != nil {
		return nil, err
	}
	for _, r := range []struct {
		dst  *uintptr
		name string
	}{{&d.api.rawForward, "cudnnConvolutionForward"}, {&d.api.rawBackData, "cudnnConvolutionBackwardData"}, {&d.api.rawBackFilter, "cudnnConvolutionBackwardFilter"}} {
		if *r.dst = lookup(libs, r.name); *r.dst == 0 {
			return nil, fmt.Errorf("cuda: %s has no %s (too old?)", name, r.name)
		}
	}
	d.version = int(d.api.version())
	if err := s.dv.Enter(); err != nil {
		return nil, err
	}
	defer s.dv.Leave()
	if r := d.api.create(&d.h); r != success {
		return nil, d.fail("cudnnCreate", r)
	}
	if r := d.api.setStream(d.h, s.h); r != success {
		d.api.destroy(d.h)
		return nil, d.fail("cudnnSetStream", r)
	}
	return d, nil
}

// loadDNN opens cuDNN's libraries: the first of dnnLibraries' sets whose
// main library loads, with whichever of its parts load beside it.
func loadDNN() ([]uintptr, string, error) {
	sets := dnnLibraries()
	dirs := []string{""}
	if p := os.Getenv("GORUN_CUDNN"); p != "" {
		sets = [][]string{append([]string{filepath.Base(p)}, sets[0][1:]...)}
		dirs = []string{filepath.Dir(p)}
	} else {
		dirs = append(dirs, cudaLib64())
	}
	var tried []string
	for _, set := range sets {
		for _, dir := range dirs {
			main := filepath.Join(dir, set[0])
			lib, err := purego.Dlopen(main, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err != nil {
				tried = append(tried, main)
				continue
			}
			libs := []uintptr{lib}
			for _, part := range set[1:] {
				if l, err := purego.Dlopen(filepath.Join(dir, part), purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
					libs = append(libs, l)
				}
			}
			return libs, main, nil
		}
	}
	return nil, "", fmt.Errorf("cuda: no cuDNN library found (tried %v; set GORUN_CUDNN to its path)", tried)
}

// lookup returns the address of name in the first library that has it.
func lookup(libs []uintptr, name string) uintptr {
	for _, l := range libs {
		if addr, err := purego.Dlsym(l, name); err == nil && addr != 0 {
			return addr
		}
	}
	return 0
}

// bindAny is bind over several libraries: each symbol from the first that
// has it.
func bindAny(libs []uintptr, libName string, syms []symbol) error {
	for _, s := range syms {
		addr := lookup(libs, s.name)
		if addr == 0 {
			return fmt.Errorf("cuda: %s has no %s (too old?)", libName, s.name)
		}
		purego.RegisterFunc(s.fptr, addr)
	}
	return nil
}

// fail is a failed cuDNN call as an Error with cuDNN's name for the code.
func (d *DNN) fail(call string, r Result) error {
	return &Error{Call: call, Code: r, Name: d.api.errorString(r)}
}

// Version is cuDNN's version number (e.g. 91400 for 9.14.0).
func (d *DNN) Version() int { return d.version }

// Close destroys the handle.
func (d *DNN) Close() error {
	if r := d.api.destroy(d.h); r != success {
		return d.fail("cudnnDestroy", r)
	}
	return nil
}

// ConvShape is one 2-D convolution's geometry: input N×C×H×W, F filters
// of C×KH×KW, output N×F×OH×OW; whether TF32 tensor cores may be used
// (float32 data); and the tensors' element type.
type ConvShape struct {
	N, C, H, W, F, KH, KW, StrideH, StrideW, PadH, PadW, OH, OW int
	TF32                                                        bool
	Data                                                        ConvData
}

func (c ConvShape) String() string {
	s := fmt.Sprintf("%dx%dx%dx%d * %dx%dx%dx%d stride %dx%d pad %dx%d", c.N, c.C, c.H, c.W, c.F, c.C, c.KH, c.KW, c.StrideH, c.StrideW, c.PadH, c.PadW)
	if c.Data != Float32 {
		s += " in " + c.Data.String()
	}
	return s
}

// Conv is a planned convolution: its descriptors and the fastest
// algorithm cuDNN measured for each direction within the workspace limit.
type Conv struct {
	d                       *DNN
	shape                   ConvShape
	x, y, w, conv           uintptr
	fwd, bwdData, bwdFilter int32
	workspace               int
}

// Plan describes a convolution to cuDNN and times its algorithms for the
// forward pass and both gradients (cuDNN's Find, as PyTorch's
// cudnn.benchmark), choosing for each the fastest that needs at most
// maxWorkspace bytes of scratch. Planning runs the convolutions on
// scratch buffers of its own: do it once per shape and keep the Conv.
func (d *DNN) Plan(s ConvShape, maxWorkspace int) (*Conv, error) {
	if err := d.dv.Enter(); err != nil {
		return nil, err
	}
	defer d.dv.Leave()
	c := &Conv{d: d, shape: s}
	ok := false
	defer func() {
		if !ok {
			c.destroy()
		}
	}()
	check := func(call string, r Result) error {
		if r != success {
			return fmt.Errorf("planning the convolution %s: %w", s, d.fail(call, r))
		}
		return nil
	}
	math := int32(dnnFMAMath)
	switch {
	case s.Data != Float32:
		math = dnnTensorOpMath
	case s.TF32:
		math = dnnDefaultMath
	}
	dtype, format := s.Data.dnnType()
	for _, step := range []struct {
		call string
		f    func() Result
	}{
		{"cudnnCreateTensorDescriptor", func() Result { return d.api.createTensor(&c.x) }},
		{"cudnnCreateTensorDescriptor", func() Result { return d.api.createTensor(&c.y) }},
		{"cudnnCreateFilterDescriptor", func() Result { return d.api.createFilter(&c.w) }},
		{"cudnnCreateConvolutionDescriptor", func() Result { return d.api.createConv(&c.conv) }},
		{"cudnnSetTensor4dDescriptor", func() Result {
			return d.api.setTensor4d(c.x, format, dtype, int32(s.N), int32(s.C), int32(s.H), int32(s.W))
		}},
		{"cudnnSetTensor4dDescriptor", func() Result {
			return d.api.setTensor4d(c.y, format, dtype, int32(s.N), int32(s.F), int32(s.OH), int32(s.OW))
		}},
		{"cudnnSetFilter4dDescriptor", func() Result {
			return d.api.setFilter4d(c.w, dtype, format, int32(s.F), int32(s.C), int32(s.KH), int32(s.KW))
		}},
		{"cudnnSetConvolution2dDescriptor", func() Result {
			return d.api.setConv2d(c.conv, int32(s.PadH), int32(s.PadW), int32(s.StrideH), int32(s.StrideW), 1, 1, dnnCrossCorrelation, dnnFloat)
		}},
		{"cudnnSetConvolutionMathType", func() Result { return d.api.setConvMath(c.conv, math) }},
	} {
		if err := check(step.call, step.f()); err != nil {
			return nil, err
		}
	}
	var perf [8]algoPerf
	var n int32
	for _, dir := range []struct {
		call string
		find func() Result
		algo *int32
	}{
		{"cudnnFindConvolutionForwardAlgorithm", func() Result {
			return d.api.findForward(d.h, c.x, c.w, c.conv, c.y, int32(len(perf)), &n, &perf[0])
		}, &c.fwd},
		{"cudnnFindConvolutionBackwardDataAlgorithm", func() Result {
			return d.api.findBackData(d.h, c.w, c.y, c.conv, c.x, int32(len(perf)), &n, &perf[0])
		}, &c.bwdData},
		{"cudnnFindConvolutionBackwardFilterAlgorithm", func() Result {
			return d.api.findBackFilter(d.h, c.x, c.y, c.conv, c.w, int32(len(perf)), &n, &perf[0])
		}, &c.bwdFilter},
	} {
		n = 0
		if err := check(dir.call, dir.find()); err != nil {
			return nil, err
		}
		i, err := fastest(perf[:n], maxWorkspace)
		if err != nil {
			return nil, fmt.Errorf("planning the convolution %s: %s: %w", s, dir.call, err)
		}
		*dir.algo = perf[i].algo
		c.workspace = max(c.workspace, int(perf[i].memory))
	}
	ok = true
	return c, nil
}

// fastest picks among Find's results, which come fastest first, the
// first that ran and needs at most maxWorkspace bytes.
func fastest(perf []algoPerf, maxWorkspace int) (int, error) {
	for i, p := range perf {
		if p.status == success && p.memory <= uint64(maxWorkspace) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("none of %d algorithms ran within %d bytes of workspace", len(perf), maxWorkspace)
}

// Workspace is the scratch the convolution's calls need, in bytes.
func (c *Conv) Workspace() int { return c.workspace }

// Forward queues y = x * w. The caller holds Enter; ws has Workspace()
// bytes.
func (c *Conv) Forward(x, w, y, ws DevPtr) error {
	return c.run("cudnnConvolutionForward", c.d.api.rawForward, c.x, x, c.w, w, c.fwd, ws, &c.d.zero, c.y, y)
}

// BackwardData queues dx = the gradient of the input from dy (dx is
// overwritten). The caller holds Enter.
func (c *Conv) BackwardData(w, dy, dx, ws DevPtr) error {
	return c.run("cudnnConvolutionBackwardData", c.d.api.rawBackData, c.w, w, c.y, dy, c.bwdData, ws, &c.d.zero, c.x, dx)
}

// BackwardFilter queues dw = beta·dw + the gradient of the weights from x
// and dy (beta 1 accumulates, as the layers' gradients do). The caller
// holds Enter.
func (c *Conv) BackwardFilter(x, dy, dw, ws DevPtr, beta float32) error {
	c.d.beta = beta
	return c.run("cudnnConvolutionBackwardFilter", c.d.api.rawBackFilter, c.x, x, c.y, dy, c.bwdFilter, ws, &c.d.beta, c.w, dw)
}

// run makes one of the three convolution calls, which share a signature:
// the handle, α (1), two inputs with their descriptors, the convolution,
// the algorithm and its workspace, β, and the output with its descriptor.
// A raw call (see dnnAPI): c.d is on the heap, so its scalars stay put.
func (c *Conv) run(call string, fn, descA uintptr, a DevPtr, descB uintptr, b DevPtr, algo int32, ws DevPtr, beta *float32, descOut uintptr, out DevPtr) error {
	d := c.d
	r, _, _ := purego.SyscallN(fn, d.h, uintptr(unsafe.Pointer(&d.one)), descA, uintptr(a), descB, uintptr(b), c.conv,
		uintptr(uint32(algo)), uintptr(ws), uintptr(c.workspace), uintptr(unsafe.Pointer(beta)), descOut, uintptr(out))
	runtime.KeepAlive(d)
	if res := result(r); res != success {
		return fmt.Errorf("convolution %s: %w", c.shape, d.fail(call, res))
	}
	return nil
}

// Close releases the descriptors.
func (c *Conv) Close() error {
	if err := c.d.dv.Enter(); err != nil {
		return err
	}
	defer c.d.dv.Leave()
	return c.destroy()
}

func (c *Conv) destroy() error {
	var err error
	for _, f := range []struct {
		call string
		h    uintptr
		free func(uintptr) Result
	}{
		{"cudnnDestroyTensorDescriptor", c.x, c.d.api.destroyTensor},
		{"cudnnDestroyTensorDescriptor", c.y, c.d.api.destroyTensor},
		{"cudnnDestroyFilterDescriptor", c.w, c.d.api.destroyFilter},
		{"cudnnDestroyConvolutionDescriptor", c.conv, c.d.api.destroyConv},
	} {
		if f.h != 0 {
			if r := f.free(f.h); r != success && err == nil {
				err = c.d.fail(f.call, r)
			}
		}
	}
	c.x, c.y, c.w, c.conv = 0, 0, 0, 0
	return err
}
