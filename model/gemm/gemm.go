package gemm

import (
	"fmt"
	"strings"

	"github.com/gorun/gorun/model/parallel"
)

// kernel describes one micro-kernel and the blocking that suits it.
type kernel struct {
	name string
	mr   int // rows of C per tile
	nr   int // columns of C per tile
	mc   int // rows of A per block (multiple of mr)
	kc   int // depth per block
	nc   int // columns of B per block (multiple of nr)
	// tile adds the product of an mr×kc packed panel of A and a kc×nr packed
	// panel of B into the mr×nr tile of c at stride ldc, or with add false
	// stores it there without reading c (a product with beta = 0 writes C
	// in its first pass over K instead of clearing it first).
	tile func(kc int, a, b, c []float32, ldc int, add bool)
	// interleave is interleave4 or a vector kernel giving the same bits:
	// the transposing step of the packings.
	interleave func(dst []float32, width int, src []float32, base, stride, kc int, alpha float32)
	// interleave2 is interleave2 or a vector kernel giving the same bits:
	// the two rows a six-row panel has past its four-row group.
	interleave2 func(dst []float32, width int, src []float32, base, stride, kc int, alpha float32)
	// copyRows is copyRows or a vector kernel doing the same: the
	// untransposed packing of B's full-width panels, and of a transposed
	// A's full panels when alpha is 1.
	copyRows func(dst, src []float32, stride, kc, width int)
	// tileRows, where the kernel has one, is tile reading its mr rows of
	// A unpacked, row i at a[i·lda:][:kc]: the products too narrow to
	// repay packing A (directA).
	tileRows func(kc int, a []float32, lda int, b, c []float32, ldc int, add bool)
	// tileColsB, where the kernel has one, is tile reading its kc×nr
	// block of B unpacked, row l at b[l·ldb:][:nr]: the products too
	// short to repay packing B (directB).
	tileColsB func(kc int, a, b []float32, ldb int, c []float32, ldc int, add bool)
	// short, where the kernel has them, are its tiles for a ragged last
	// panel's first rows only, fewest rows first (shortFor).
	short []shortTile
}

// shortTile is a kernel's tile and tileColsB for the first rows rows of
// a packed panel (mr values a step of depth, as the full tile reads it),
// writing only those rows of C, with the full tile's sums in its order:
// the same bits. A 64-row product with 12-row tiles is five full panels
// and one of 4 rows, which the full tile computes as 12.
type shortTile struct {
	rows      int
	tile      func(kc int, a, b, c []float32, ldc int, add bool)
	tileColsB func(kc int, a, b []float32, ldb int, c []float32, ldc int, add bool)
}

// shortFor returns the tile for a panel with mr ≤ k.mr live rows: the
// shortest of k.short with at least mr rows, else the full tile (its rows
// k.mr). macro and macroColsB run full panels of full width before asking.
func (k kernel) shortFor(mr int) shortTile {
	for _, s := range k.short {
		if mr <= s.rows {
			return s
		}
	}
	return shortTile{rows: k.mr, tile: k.tile, tileColsB: k.tileColsB}
}

// Engine multiplies matrices with a fixed number of threads, reusing its
// packing buffers, so that steady-state calls allocate nothing.
type Engine struct {
	k    kernel
	pool *parallel.Pool
	own  bool // pool created by New and closed by Close
	ws   []workspace
	task gemmTask
}

// workspace is one thread's packing buffers.
type workspace struct {
	a, b []float32
	edge []float32 // an mr×nr tile for the ragged edges of C
}

// New returns an engine using threads threads (< 1 means 1) and the fastest
// micro-kernel this CPU supports.
func New(threads int) *Engine {
	return newEngine(parallel.New(threads), true, bestKernel())
}

// NewWithPool returns an engine that runs on an existing pool, so a compute
// backend can share one set of threads between GEMM and its other loops.
// Close does not close the pool.
func NewWithPool(p *parallel.Pool) *Engine {
	return newEngine(p, false, bestKernel())
}

// NewPureGo returns an engine using the portable Go micro-kernel, whatever the
// CPU supports. Tests compare it with the assembly one.
func NewPureGo(threads int) *Engine {
	return newEngine(parallel.New(threads), true, goKernel)
}

// NewPureGoWithPool is NewPureGo on an existing pool.
func NewPureGoWithPool(p *parallel.Pool) *Engine {
	return newEngine(p, false, goKernel)
}

// Kernels names the micro-kernels this CPU can run, best first, by the
// first word of their names ("avx512", "avx2-fma", "go").
func Kernels() []string {
	var names []string
	for _, k := range availableKernels() {
		names = append(names, k.id())
	}
	return names
}

// NewKernelWithPool is NewWithPool with the micro-kernel named (by the
// first word of its name, or whole), for a user's override; a kernel this
// CPU cannot run is an error naming the ones it can.
func NewKernelWithPool(p *parallel.Pool, name string) (*Engine, error) {
	k, err := kernelNamed(name)
	if err != nil {
		return nil, err
	}
	return newEngine(p, false, k), nil
}

// kernelNamed is the micro-kernel name names (by the first word of its
// name, or whole) among those this CPU runs.
func kernelNamed(name string) (kernel, error) {
	for _, k := range availableKernels() {
		if name == k.id() || name == k.name {
			return k, nil
		}
	}
	return kernel{}, fmt.Errorf("GEMM micro-kernel %q: this CPU runs %s", name, strings.Join(Kernels(), ", "))
}

// id is the first word of the kernel's name.
func (k kernel) id() string {
	id, _, _ := strings.Cut(k.name, " ")
	return id
}

func newEngine(p *parallel.Pool, own bool, k kernel) *Engine {
	e := &Engine{k: k, pool: p, own: own, ws: make([]workspace, p.Threads())}
	for i := range e.ws {
		e.ws[i] = workspace{
			a:    make([]float32, k.mc*k.kc),
			b:    make([]float32, k.kc*k.nc),
			edge: make([]float32, k.mr*k.nr),
		}
	}
	e.task.e = e
	return e
}

// Kernel names the micro-kernel in use ("avx2-fma 6x16", "go 4x8", ...).
func (e *Engine) Kernel() string { return e.k.name }

// Depth is the depth of the blocks the engine multiplies in: it adds
// op(A)·op(B) into C a block of Depth columns of op(A) (rows of op(B)) at
// a time, so a product split along K at multiples of Depth, its parts
// added into C in order (beta 1 after the first), gives the same bits as
// the whole.
func (e *Engine) Depth() int { return e.k.kc }

// Threads returns the number of threads the engine uses.
func (e *Engine) Threads() int { return e.pool.Threads() }

// Close stops the engine's threads if it owns them.
func (e *Engine) Close() {
	if e.own {
		e.pool.Close()
	}
}

// Matrix is a row-major matrix view: element (i, j) is Data[i*Stride+j], or
// of the transpose when Trans is set (so op(M)(i, j) = Data[j*Stride+i]).
type Matrix struct {
	Data   []float32
	Stride int
	Trans  bool
}

// check reports whether a view holds an r×c op-matrix.
func (m Matrix) check(name string, r, c int) error {
	rows, cols := r, c
	if m.Trans {
		rows, cols = c, r
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	if m.Stride < cols {
		return fmt.Errorf("gemm: %s stride %d < %d columns", name, m.Stride, cols)
	}
	if need := (rows-1)*m.Stride + cols; len(m.Data) < need {
		return fmt.Errorf("gemm: %s holds %d elements, needs %d for %d×%d at stride %d", name, len(m.Data), need, rows, cols, m.Stride)
	}
	return nil
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C where op(A) is m×k, op(B) is
// k×n and C is m×n (C.Trans must be false). With beta = 0, C is overwritten
// and its old contents (NaNs included) are ignored, as in BLAS. The work is
// spread over the engine's threads.
func (e *Engine) Sgemm(m, n, k int, alpha float32, a, b Matrix, beta float32, c Matrix) error {
	if err := e.validate(m, n, k, a, b, c); err != nil {
		return err
	}
	e.run(m, n, k, alpha, a, b, nil, beta, c, e.pool.Threads())
	return nil
}

// PackedB is op(B) of k×n packed once for many products (PackB): the
// engine's panels of nr columns, each over all k rows, so that a product
// reads them where Sgemm would pack them on every call.
type PackedB struct {
	k, n, nr int
	data     []float32
}

// PackB packs the k×n op(b) for SgemmPackedB into dst's storage (grown
// when short) and returns it.
func (e *Engine) PackB(dst []float32, k, n int, b Matrix) (PackedB, error) {
	if k < 0 || n < 0 {
		return PackedB{}, fmt.Errorf("gemm: negative size k=%d n=%d", k, n)
	}
	if err := b.check("B", k, n); err != nil {
		return PackedB{}, err
	}
	nr := e.k.nr
	size := ceilDiv(n, nr) * k * nr
	if cap(dst) < size {
		dst = make([]float32, size)
	}
	dst = dst[:size]
	for jr := 0; jr < n; jr += nr {
		e.k.packB(dst[jr*k:jr*k+k*nr], b, 0, jr, k, min(nr, n-jr))
	}
	return PackedB{k: k, n: n, nr: nr, data: dst}, nil
}

// Size is the number of values the packing holds (its memory, in
// float32s).
func (b PackedB) Size() int { return len(b.data) }

// colsFrom returns the view of b starting at column c, a multiple of nr.
func (b PackedB) colsFrom(c int) PackedB {
	b.n -= c
	b.data = b.data[c*b.k:]
	return b
}

// SgemmPackedB is Sgemm with op(B) packed by PackB, to the bit.
func (e *Engine) SgemmPackedB(m, n, k int, alpha float32, a Matrix, b PackedB, beta float32, c Matrix) error {
	if err := e.validatePacked(m, n, k, a, b, c); err != nil {
		return err
	}
	e.run(m, n, k, alpha, a, Matrix{}, &b, beta, c, e.pool.Threads())
	return nil
}

// SgemmSerialPackedB is SgemmSerial with op(B) packed by PackB, to the
// bit: a prepared operand for products run one to a worker.
func (e *Engine) SgemmSerialPackedB(worker, m, n, k int, alpha float32, a Matrix, b PackedB, beta float32, c Matrix) error {
	if err := e.validatePacked(m, n, k, a, b, c); err != nil {
		return err
	}
	ws, err := e.workspace(worker)
	if err != nil {
		return err
	}
	e.serial(ws, m, n, k, alpha, a, Matrix{}, &b, beta, c)
	return nil
}

// PackedA is op(A) of m×k packed once for many products (PackA), as
// each product would pack it: for each block of kc columns (the engine's
// depth), its rows in panels of mr.
type PackedA struct {
	m, k, mr, kc int
	data         []float32
}

// PackA packs the m×k op(a) for SgemmSerialPackedA into dst's storage
// (grown when short to roundUp(m, mr)·k values) and returns it.
func (e *Engine) PackA(dst []float32, m, k int, a Matrix) (PackedA, error) {
	if m < 0 || k < 0 {
		return PackedA{}, fmt.Errorf("gemm: negative size m=%d k=%d", m, k)
	}
	if err := a.check("A", m, k); err != nil {
		return PackedA{}, err
	}
	size := roundUp(m, e.k.mr) * k
	if cap(dst) < size {
		dst = make([]float32, size)
	}
	pa := PackedA{m: m, k: k, mr: e.k.mr, kc: e.k.kc, data: dst[:size]}
	for pc := 0; pc < k; pc += pa.kc {
		kc := min(pa.kc, k-pc)
		e.k.packA(pa.block(pc, kc), a, 0, pc, m, kc, 1)
	}
	return pa, nil
}

// block returns the packing of columns [pc, pc+kc), pc a multiple of the
// depth.
func (a *PackedA) block(pc, kc int) []float32 {
	rows := roundUp(a.m, a.mr)
	return a.data[rows*pc : rows*(pc+kc)]
}

// SgemmSerialPackedA is SgemmSerial with op(A) packed by PackA and alpha
// 1, to the bit.
func (e *Engine) SgemmSerialPackedA(worker, m, n, k int, a PackedA, b Matrix, beta float32, c Matrix) error {
	if err := checkC(m, n, k, c); err != nil {
		return err
	}
	if a.m != m || a.k != k || a.mr != e.k.mr || a.kc != e.k.kc {
		return fmt.Errorf("gemm: A packed as %d×%d in panels of %d, blocks of %d; product wants %d×%d in panels of %d, blocks of %d", a.m, a.k, a.mr, a.kc, m, k, e.k.mr, e.k.kc)
	}
	if err := b.check("B", k, n); err != nil {
		return err
	}
	ws, err := e.workspace(worker)
	if err != nil {
		return err
	}
	e.serialPacked(ws, m, n, k, 1, Matrix{}, &a, b, nil, beta, c)
	return nil
}

func (e *Engine) validatePacked(m, n, k int, a Matrix, b PackedB, c Matrix) error {
	if err := checkC(m, n, k, c); err != nil {
		return err
	}
	if b.k != k || b.n != n || b.nr != e.k.nr {
		return fmt.Errorf("gemm: B packed as %d×%d in panels of %d, product wants %d×%d in panels of %d", b.k, b.n, b.nr, k, n, e.k.nr)
	}
	return a.check("A", m, k)
}

// SgemmSerial is Sgemm on the calling goroutine only, using worker's
// buffers; callers that already run one GEMM per worker (a convolution over
// the images of a batch) use it from inside their own parallel loop.
func (e *Engine) SgemmSerial(worker, m, n, k int, alpha float32, a, b Matrix, beta float32, c Matrix) error {
	if err := e.validate(m, n, k, a, b, c); err != nil {
		return err
	}
	ws, err := e.workspace(worker)
	if err != nil {
		return err
	}
	e.serial(ws, m, n, k, alpha, a, b, nil, beta, c)
	return nil
}

// workspace returns worker's buffers.
func (e *Engine) workspace(worker int) (*workspace, error) {
	if worker < 0 || worker >= len(e.ws) {
		return nil, fmt.Errorf("gemm: worker %d out of range [0, %d)", worker, len(e.ws))
	}
	return &e.ws[worker], nil
}

func (e *Engine) validate(m, n, k int, a, b, c Matrix) error {
	if err := checkC(m, n, k, c); err != nil {
		return err
	}
	if err := a.check("A", m, k); err != nil {
		return err
	}
	return b.check("B", k, n)
}

// checkC checks what every product's call shares: the sizes and C.
func checkC(m, n, k int, c Matrix) error {
	if m < 0 || n < 0 || k < 0 {
		return fmt.Errorf("gemm: negative size m=%d n=%d k=%d", m, n, k)
	}
	if c.Trans {
		return fmt.Errorf("gemm: C cannot be transposed")
	}
	return c.check("C", m, n)
}

// minParallelFlops is the work below which splitting a product over threads
// costs more in hand-off than it saves: about 10 µs on one core. (It was
// 2²⁵ while the pool's workers slept between products and took 150–180 µs
// to wake; with them polling, 128³ products on two threads went from 78 to
// 126–140 GFLOP/s, OpenBLAS's 94–117, and 2²² would have left CIFARNet's
// first layer, 3.5 Mflop, on one: bench/results/current/
// gemm-parallel-threshold-2026-11-27-zen3.txt.)
const minParallelFlops = 1 << 20

// run splits C into one strip per thread along its longer side; each thread
// packs its own operands (B unless packed: pb) and runs the serial
// algorithm on its strip.
func (e *Engine) run(m, n, k int, alpha float32, a, b Matrix, pb *PackedB, beta float32, c Matrix, threads int) {
	if threads <= 1 || 2*m*n*k < minParallelFlops {
		e.serial(&e.ws[0], m, n, k, alpha, a, b, pb, beta, c)
		return
	}
	t := &e.task
	*t = gemmTask{e: e, m: m, n: n, k: k, alpha: alpha, a: a, b: b, beta: beta, c: c}
	if pb != nil {
		t.packed, t.pb = true, *pb
	}
	if m >= n {
		t.byRows = true
		t.step = roundUp(ceilDiv(m, threads), e.k.mr)
		t.parts = ceilDiv(m, t.step)
	} else {
		t.step = roundUp(ceilDiv(n, threads), e.k.nr)
		t.parts = ceilDiv(n, t.step)
	}
	e.pool.Run(t.parts, t)
}

// gemmTask is one multi-threaded product, kept in the engine so that handing
// it to the pool allocates nothing.
type gemmTask struct {
	e           *Engine
	m, n, k     int
	alpha, beta float32
	a, b, c     Matrix
	packed      bool    // B is pb
	pb          PackedB // B packed (SgemmPackedB)
	byRows      bool
	step, parts int
}

func (t *gemmTask) Do(worker, i int) {
	lo := i * t.step
	var pb *PackedB
	if t.byRows {
		if t.packed {
			pb = &t.pb
		}
		rows := min(t.step, t.m-lo)
		t.e.serial(&t.e.ws[worker], rows, t.n, t.k, t.alpha, t.a.RowsFrom(lo), t.b, pb, t.beta, t.c.RowsFrom(lo))
		return
	}
	b := t.b
	if t.packed {
		strip := t.pb.colsFrom(lo) // lo is a multiple of nr
		pb = &strip
	} else {
		b = b.ColsFrom(lo)
	}
	cols := min(t.step, t.n-lo)
	t.e.serial(&t.e.ws[worker], t.m, cols, t.k, t.alpha, t.a, b, pb, t.beta, t.c.ColsFrom(lo))
}

// RowsFrom returns the view of op(M) starting at row r.
func (m Matrix) RowsFrom(r int) Matrix {
	if m.Trans {
		m.Data = m.Data[r:]
	} else {
		m.Data = m.Data[r*m.Stride:]
	}
	return m
}

// ColsFrom returns the view of op(M) starting at column c.
func (m Matrix) ColsFrom(c int) Matrix {
	if m.Trans {
		m.Data = m.Data[c*m.Stride:]
	} else {
		m.Data = m.Data[c:]
	}
	return m
}

// scale multiplies the m×n matrix C by beta (beta = 0 clears it).
func scale(m, n int, beta float32, c Matrix) {
	for i := 0; i < m; i++ {
		row := c.Data[i*c.Stride : i*c.Stride+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// serial is the blocked algorithm on one thread; with pb set, B's panels
// are read from it instead of packed.
func (e *Engine) serial(ws *workspace, m, n, k int, alpha float32, a, b Matrix, pb *PackedB, beta float32, c Matrix) {
	e.serialPacked(ws, m, n, k, alpha, a, nil, b, pb, beta, c)
}

// serialPacked is serial with op(A) packed by PackA when pa is set.
func (e *Engine) serialPacked(ws *workspace, m, n, k int, alpha float32, a Matrix, pa *PackedA, b Matrix, pb *PackedB, beta float32, c Matrix) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		if beta != 1 {
			scale(m, n, beta, c)
		}
		return
	}
	if beta != 0 && beta != 1 {
		scale(m, n, beta, c)
	}
	kr := e.k
	direct := pa == nil && kr.directA(a, n, alpha)
	directB := pb == nil && !direct && kr.directB(b, m, n, k)
	for jc := 0; jc < n; jc += kr.nc {
		nc := min(kr.nc, n-jc)
		for pc := 0; pc < k; pc += kr.kc {
			kc := min(kr.kc, k-pc)
			add := beta != 0 || pc > 0 // beta = 0: the first pass over K stores
			// Panel jr/nr of the block: bs.packed[jr/nr·panel:][:kc·nr].
			bs := bSource{packed: ws.b, panel: kc * kr.nr}
			switch {
			case pb != nil:
				bs.packed, bs.panel = pb.data[jc*k+pc*kr.nr:], k*kr.nr
			case directB:
				// Only a ragged last panel is packed, where the
				// block's packing would have put it.
				bs.cols = Matrix{Data: b.Data[pc*b.Stride+jc:], Stride: b.Stride}
				if full := nc / kr.nr * kr.nr; full < nc {
					kr.packB(ws.b[full*kc:], b, pc, jc+full, kc, nc-full)
				}
			default:
				kr.packB(ws.b, b, pc, jc, kc, nc)
			}
			for ic := 0; ic < m; ic += kr.mc {
				mc := min(kr.mc, m-ic)
				ap := ws.a
				var rows Matrix
				switch {
				case pa != nil:
					ap = pa.block(pc, kc)[ic*kc:]
				case direct:
					// Only a ragged last panel is packed, where the
					// block's packing would have put it.
					rows = Matrix{Data: a.Data[ic*a.Stride+pc:], Stride: a.Stride}
					if full := mc / kr.mr * kr.mr; full < mc {
						kr.packA(ws.a[full*kc:], a, ic+full, pc, mc-full, kc, 1)
					}
				default:
					kr.packA(ws.a, a, ic, pc, mc, kc, alpha)
				}
				e.macro(ws, ap, rows, bs, mc, nc, kc, c.Data[ic*c.Stride+jc:], c.Stride, add)
			}
		}
	}
}

// bSource is where macro reads a kc×nc block of B: panels of nr columns
// packed at packed[p·panel:][:kc·nr], except, when cols is set, the full
// panels read where they lie in it (tileColsB), whose ragged last panel
// alone is packed.
type bSource struct {
	packed []float32
	panel  int
	cols   Matrix
}

// macro multiplies a packed mc×kc block of A (its panels of mr rows at
// a[p·mr·kc:]) by a kc×nc block of B read from bs into C (adding to it,
// or with add false replacing it), one mr×nr tile at a time. With rows
// set, A's full panels are read unpacked from it instead (tileRows) and
// only a ragged last one from a.
func (e *Engine) macro(ws *workspace, a []float32, rows Matrix, bs bSource, mc, nc, kc int, c []float32, ldc int, add bool) {
	kr := e.k
	for jr := 0; jr < nc; jr += kr.nr {
		nr := min(kr.nr, nc-jr)
		if nr == kr.nr && bs.cols.Data != nil {
			e.macroColsB(ws, a, bs, jr, mc, kc, c[jr:], ldc, add)
			continue
		}
		bp := bs.packed[jr/kr.nr*bs.panel:][:kc*kr.nr]
		for ir := 0; ir < mc; ir += kr.mr {
			mr := min(kr.mr, mc-ir)
			off := ir*ldc + jr
			if rows.Data != nil && mr == kr.mr {
				ar := rows.Data[ir*rows.Stride:]
				if nr == kr.nr {
					kr.tileRows(kc, ar, rows.Stride, bp, c[off:], ldc, add)
					continue
				}
				kr.tileRows(kc, ar, rows.Stride, bp, ws.edge, kr.nr, false)
				addEdge(c[off:], ldc, ws.edge, kr.nr, mr, nr, add)
				continue
			}
			ap := a[ir*kc : ir*kc+kc*kr.mr]
			if mr == kr.mr && nr == kr.nr {
				kr.tile(kc, ap, bp, c[off:], ldc, add)
				continue
			}
			s := kr.shortFor(mr)
			if s.rows == mr && nr == kr.nr {
				s.tile(kc, ap, bp, c[off:], ldc, add)
				continue
			}
			s.tile(kc, ap, bp, ws.edge, kr.nr, false)
			addEdge(c[off:], ldc, ws.edge, kr.nr, mr, nr, add)
		}
	}
}

// macroColsB is macro's column of tiles for the full panel of B from
// column jr read where it lies in bs.cols, against A's packed panels.
func (e *Engine) macroColsB(ws *workspace, a []float32, bs bSource, jr, mc, kc int, c []float32, ldc int, add bool) {
	kr := e.k
	b := bs.cols.Data[jr:]
	for ir := 0; ir < mc; ir += kr.mr {
		mr := min(kr.mr, mc-ir)
		ap := a[ir*kc : ir*kc+kc*kr.mr]
		if mr == kr.mr {
			kr.tileColsB(kc, ap, b, bs.cols.Stride, c[ir*ldc:], ldc, add)
			continue
		}
		s := kr.shortFor(mr)
		if s.rows == mr {
			s.tileColsB(kc, ap, b, bs.cols.Stride, c[ir*ldc:], ldc, add)
			continue
		}
		s.tileColsB(kc, ap, b, bs.cols.Stride, ws.edge, kr.nr, false)
		addEdge(c[ir*ldc:], ldc, ws.edge, kr.nr, mr, kr.nr, add)
	}
}

// directBMaxRows is the tallest product whose B is read unpacked where
// the kernel can (tileColsB): a packed panel of B would serve at most
// this many rows of A, too few to repay its packing. Both kernels share
// it: with the AVX-512 kernel on a Zen 5 core, products of 32 to 128
// rows ran 1.02–1.17× faster unpacked (BenchmarkUnpackedB; BENCHMARKS.md,
// Compute kernels, Zen 5), 192- to 512-row ones 0.91–1.06× (a check by
// hand, HISTORY).
const directBMaxRows = 128

// directBStrideBlock: B is read unpacked only if its row stride is not a
// multiple of this many elements (512 bytes). A panel's kc rows, read
// unpacked, then lie in at least 16 of a 32 KiB L1 cache's 64 sets of
// 64-byte lines; at a stride of 4 KiB (32×32 maps) they would all fall in
// one set and be read from L2 or further for every tile.
const directBStrideBlock = 128

// directBMinDepth is the shallowest product whose B is read unpacked: a
// shallower panel is read from L1 once packed, and unpacked its few rows
// do not repay the kernel's prefetches past their end.
const directBMinDepth = 64

// directBMinCols is the narrowest product whose B is read unpacked:
// 64×196×1024 ran 0.80× unpacked on a Zen 3 core, where 32×338×64 and
// 128×392×128 to 64×3136×256 ran 1.01–1.13× (BenchmarkUnpackedB;
// BENCHMARKS.md, Compute kernels, Zen 3; 64×208×1024 also read slower in
// a check by hand, HISTORY).
const directBMinCols = 256

// directB reports whether an m×n product of depth k reads op(B) = b
// unpacked: the kernel has tileColsB, B is untransposed (its rows are the
// panels' rows), the product short, wide and deep enough, and B's row
// stride not one that crowds a panel's rows into a few cache sets.
func (k kernel) directB(b Matrix, m, n, depth int) bool {
	return k.tileColsB != nil && !b.Trans && m <= directBMaxRows && n >= directBMinCols && depth >= directBMinDepth && b.Stride%directBStrideBlock != 0
}

// directAMaxCols is the widest product whose A is read unpacked where the
// kernel can (tileRows): A's panels then serve at most eight tiles each
// with the AVX-512 kernel, sixteen with the AVX2 one. Packing A was 13.5%
// of a 256×64×1152 product's time on a Zen 5 core; read unpacked,
// products 32 to 128 columns wide ran 1.04–1.30× faster there, 192 and
// 256 wide 1.01–1.05× (BenchmarkUnpackedA; BENCHMARKS.md, Compute
// kernels, Zen 5). With the AVX2 kernel on a Zen 4 core, medians of
// three: 32 columns 1.30×, 64 to 256 1.00–1.10×, ResNet-50's 49-column
// products 1.13× and 1.18×, 384 columns 1.04×
// (bench/results/current/unpacked-a-avx2-2026-12-02-zen4.txt).
const directAMaxCols = 256

// directA reports whether a product of n columns reads op(A) = a, scaled
// by alpha, unpacked: the kernel has tileRows, A is untransposed (its
// rows are the kernel's rows), alpha is 1 (packing is where alpha is
// applied) and the product narrow.
func (k kernel) directA(a Matrix, n int, alpha float32) bool {
	return k.tileRows != nil && !a.Trans && alpha == 1 && n <= directAMaxCols
}

// addEdge stores the mr×nr corner of the tile edge (row stride w) into c
// (row stride ldc), or adds it there when add is set.
func addEdge(c []float32, ldc int, edge []float32, w, mr, nr int, add bool) {
	for i := 0; i < mr; i++ {
		row := c[i*ldc : i*ldc+nr]
		src := edge[i*w : i*w+nr]
		if !add {
			copy(row, src)
			continue
		}
		for j := range row {
			row[j] += src[j]
		}
	}
}

// packA copies the mc×kc block of alpha·op(A) at (ic, pc) into panels of mr
// rows: panel p holds, for each l in [0, kc), the mr values of column l.
// Rows past the edge are zero.
func (k kernel) packA(dst []float32, a Matrix, ic, pc, mc, kc int, alpha float32) {
	mr := k.mr
	for ir := 0; ir < mc; ir += mr {
		rows := min(mr, mc-ir)
		panel := dst[ir*kc : ir*kc+kc*mr]
		if a.Trans {
			// op(A)(i, l) = Data[(pc+l)*Stride + ic+ir+i]: rows are contiguous.
			if alpha == 1 && rows == mr {
				k.copyRows(panel, a.Data[pc*a.Stride+ic+ir:], a.Stride, kc, mr)
				continue
			}
			for l := 0; l < kc; l++ {
				src := a.Data[(pc+l)*a.Stride+ic+ir:]
				out := panel[l*mr : l*mr+mr]
				for i := 0; i < rows; i++ {
					out[i] = alpha * src[i]
				}
				clear(out[rows:])
			}
			continue
		}
		k.transposeRows(panel, mr, a.Data, (ic+ir)*a.Stride+pc, a.Stride, kc, rows, alpha)
	}
}

// packB copies the kc×nc block of op(B) at (pc, jc) into panels of nr
// columns: panel p holds, for each l in [0, kc), the nr values of row l.
// Columns past the edge are zero.
func (k kernel) packB(dst []float32, b Matrix, pc, jc, kc, nc int) {
	nr := k.nr
	for jr := 0; jr < nc; jr += nr {
		cols := min(nr, nc-jr)
		panel := dst[jr*kc : jr*kc+kc*nr]
		if !b.Trans && cols == nr {
			k.copyRows(panel, b.Data[pc*b.Stride+jc+jr:], b.Stride, kc, nr)
			continue
		}
		if !b.Trans {
			for l := 0; l < kc; l++ {
				src := b.Data[(pc+l)*b.Stride+jc+jr:]
				out := panel[l*nr : l*nr+nr]
				copy(out[:cols], src[:cols])
				clear(out[cols:])
			}
			continue
		}
		// op(B)(l, j) = Data[(jc+jr+j)*Stride + pc+l]: columns are contiguous.
		k.transposeRows(panel, nr, b.Data, (jc+jr)*b.Stride+pc, b.Stride, kc, cols, 1)
	}
}

// copyRows copies kc rows of width floats, src[l·stride:][:width], into
// dst[l·width:][:width].
func copyRows(dst, src []float32, stride, kc, width int) {
	for l := range kc {
		copy(dst[l*width:(l+1)*width], src[l*stride:l*stride+width])
	}
}

// transposeRows writes rows r < n of kc values, src[base+r·stride+l],
// scaled by alpha, into a panel of width w as dst[l·w+r], and zeros in
// the panel's columns n ≤ r < w: the transposing step of both packings,
// four rows at a time (the kernel's interleave), then what is left one
// row at a time.
func (k kernel) transposeRows(dst []float32, w int, src []float32, base, stride, kc, n int, alpha float32) {
	r := 0
	for ; r+4 <= n; r += 4 {
		k.interleave(dst[r:], w, src, base+r*stride, stride, kc, alpha)
	}
	if r+2 <= n {
		k.interleave2(dst[r:], w, src, base+r*stride, stride, kc, alpha)
		r += 2
	}
	for ; r < n; r++ {
		for l, v := range src[base+r*stride : base+r*stride+kc] {
			dst[l*w+r] = alpha * v
		}
	}
	if n < w {
		for l := range kc {
			clear(dst[l*w+n : l*w+w])
		}
	}
}

// interleave4 transposes four rows of kc values, src[base+r·stride+l] for
// r < 4, into dst[l·width+r], scaled by alpha: the transposing step of both
// packings. Four rows at a time keep the stores of one l in one 16-byte
// run and read four sequential streams, where a row at a time strided
// every store.
func interleave4(dst []float32, width int, src []float32, base, stride, kc int, alpha float32) {
	r0 := src[base : base+kc]
	r1 := src[base+stride : base+stride+kc]
	r2 := src[base+2*stride : base+2*stride+kc]
	r3 := src[base+3*stride : base+3*stride+kc]
	if kc == 0 {
		return
	}
	_ = dst[(kc-1)*width+3]
	for l := range r0 {
		o := dst[l*width : l*width+4 : l*width+4]
		o[0] = alpha * r0[l]
		o[1] = alpha * r1[l]
		o[2] = alpha * r2[l]
		o[3] = alpha * r3[l]
	}
}

// interleave2 is interleave4 for two rows: src[base+r·stride+l] for
// r < 2 into dst[l·width+r], scaled by alpha — a six-row panel's last two
// rows, which a row at a time stored every width floats twice over.
func interleave2(dst []float32, width int, src []float32, base, stride, kc int, alpha float32) {
	r0 := src[base : base+kc]
	r1 := src[base+stride : base+stride+kc]
	if kc == 0 {
		return
	}
	_ = dst[(kc-1)*width+1]
	for l := range r0 {
		o := dst[l*width : l*width+2 : l*width+2]
		o[0] = alpha * r0[l]
		o[1] = alpha * r1[l]
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
func roundUp(a, b int) int { return ceilDiv(a, b) * b }
