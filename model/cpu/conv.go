package cpu

import (
	"math"

	"github.com/gorun/gorun/model/gemm"
	"github.com/gorun/gorun/model/tensor"
)

// Convolution is im2col + GEMM per image, or Winograd for 3×3 stride-1
// layers (winograd.go), one dense product over maps no larger than the
// kernel (dense.go), or, forward over small outputs, im2col's transpose
// with the channels innermost (rows.go). The images of a batch are split
// into one contiguous chunk per thread; each chunk has its own column buffer
// and its own weight-gradient partial sums, which are added in chunk order
// afterwards, so results do not depend on thread scheduling.

type convTask struct {
	b          *Backend
	backward   bool
	x, w, bias *tensor.Tensor
	y          *tensor.Tensor
	dy, dx     *tensor.Tensor
	p          tensor.ConvParams
	g          geometry
	n, per     int  // images, images per chunk
	biasGrad   bool // backward: the bias gradient is wanted (db not nil)
	weightGrad bool // backward: the weight gradient is wanted (dw not nil)
	serialGEMM bool
	winograd   bool      // Winograd instead of im2col (winograd.go)
	keptU      bool      // Winograd: U is a prepared layer's kept form (keepsForm), laid out for its products once
	tile       int       // Winograd's tiles: 2 (F(2×2, 3×3)) or 4 (F(4×4, 3×3), frozen layers' forward: winograd4.go)
	rows       bool      // forward: im2col's transpose, channels innermost (rows.go)
	norm       *convNorm // forward: a batch norm applied to each image's output (Conv2dBatchNorm)
	// prep, when set, holds the weights' forms across calls
	// (Conv2dPrepared); u and rowsW are the forms this call runs with.
	prep *prepared
	u    []float32 // Winograd's transformed weights (winograd.go)
	// uPacked: U's 16 matrices packed as the products' B operands, where
	// a prepared layer runs channels last (its first call packs them);
	// aPacked: the weights' form packed as the A operands (prepared.aPacked),
	// where a prepared layer multiplies it so.
	uPacked []gemm.PackedB
	aPacked []gemm.PackedA
	rowsW   []float32 // the kernel [F][KH][KW][C] (rows.go)
}

// convNorm is an evaluation-mode batch norm fused into a convolution: each
// output channel f becomes y·scale[f] + shift[f], through a relu when set;
// then, when residual is set (the whole batch's [N, F, OH, OW]: a
// residual block's shortcut), relu(that + residual).
type convNorm struct {
	scale, shift []float32
	relu         bool
	residual     []float32
}

// geometry of one convolution.
type geometry struct {
	c, h, wd, f, oh, ow, ckk, ohw int
}

func geom(x, w *tensor.Tensor, p tensor.ConvParams) geometry {
	g := geometry{c: x.Shape[1], h: x.Shape[2], wd: x.Shape[3], f: w.Shape[0]}
	g.oh, g.ow = p.OutSize(g.h, g.wd)
	g.ckk = g.c * p.KernelH * p.KernelW
	g.ohw = g.oh * g.ow
	return g
}

// pointwise reports a 1×1, stride-1, unpadded convolution, whose column
// matrix is the image itself.
func pointwise(p tensor.ConvParams) bool {
	return p.KernelH == 1 && p.KernelW == 1 && p.StrideH == 1 && p.StrideW == 1 && p.PadH == 0 && p.PadW == 0
}

// Conv2d implements tensor.Backend.
func (b *Backend) Conv2d(x, w, bias, y *tensor.Tensor, p tensor.ConvParams) {
	w, p, _ = b.liveKernel(x, w, p)
	b.runConv(false, x, w, bias, y, nil, nil, nil, nil, p, nil, nil)
}

// liveKernel returns the kernel and params to run the convolution of x by
// w with: those of its live taps when some meet only padding (taps.go),
// else w and p.
func (b *Backend) liveKernel(x, w *tensor.Tensor, p tensor.ConvParams) (*tensor.Tensor, tensor.ConvParams, *trimmedConv) {
	if b.useDense(geom(x, w, p), p) {
		return w, p, nil // its dense matrix holds the live taps alone (dense.go)
	}
	t, ok := trim(x, p)
	if !ok {
		return w, p, nil
	}
	b.trimmed = t
	return t.weights(b.pool, &b.taps, &b.liveW, w), t.p, &b.trimmed
}

// Conv2dBatchNorm implements tensor.ConvBatchNormBackend: each image's
// output planes go through the batch norm's evaluation-mode affine map
// (and relu) right after the image's product, with BatchNorm's scale,
// shift and row kernels, so the bits are those of the two layers.
func (b *Backend) Conv2dBatchNorm(x, w, bias, y, gamma, beta, runMean, runVar *tensor.Tensor, p tensor.ConvParams, bn tensor.BatchNormParams, relu bool) {
	norm := b.evalNorm(gamma, beta, runMean, runVar, bn, relu)
	w, p, _ = b.liveKernel(x, w, p)
	b.runConv(false, x, w, bias, y, nil, nil, nil, nil, p, norm, nil)
}

// evalNorm sets the backend's convNorm to the evaluation-mode batch norm's
// per-channel map and returns it.
func (b *Backend) evalNorm(gamma, beta, runMean, runVar *tensor.Tensor, bn tensor.BatchNormParams, relu bool) *convNorm {
	c := len(gamma.Data)
	norm := &b.convNorm
	norm.scale, norm.shift, norm.relu = grow(&norm.scale, c), grow(&norm.shift, c), relu
	norm.residual = nil
	for ch := range c {
		invStd := float32(1 / math.Sqrt(float64(runVar.Data[ch])+float64(bn.Eps)))
		norm.scale[ch], norm.shift[ch] = evalAffine(invStd, gamma.Data[ch], beta.Data[ch], runMean.Data[ch])
	}
	return norm
}

// normalise applies the task's fused batch norm, if any, to image img's
// output planes y, and the residual sum and relu after it when the norm
// has them.
func (t *convTask) normalise(y []float32, img int) {
	if t.norm == nil {
		return
	}
	hw := t.g.ohw
	res := t.norm.residualOf(img, len(y))
	if hw < minVectorRow {
		// The dense layers' rows of 4 or 1 values (ResNet-18's
		// evaluation: 6% of a two-thread pass, on one thread, a call a row).
		affineRows(y, y, hw, t.norm.scale, t.norm.shift, t.norm.relu)
		if res != nil {
			t.b.vec.addReLU(y, y, res)
		}
		return
	}
	for f := range t.norm.scale {
		row := y[f*hw : (f+1)*hw]
		t.normaliseRow(row, row, res, f)
	}
}

// normaliseRow sets row to channel f's batch norm of src (row itself, or
// the group's product), then, when res (the image's residual) is set, to
// relu(row + res's row f).
func (t *convTask) normaliseRow(row, src, res []float32, f int) {
	t.norm.apply(t.b.vec, row, src, t.norm.scale[f], t.norm.shift[f])
	if res != nil {
		t.b.vec.addReLU(row, row, res[f*len(row):(f+1)*len(row)])
	}
}

// residualOf returns image img's part of the residual, out values an
// image, or nil when the norm has no residual.
func (n *convNorm) residualOf(img, out int) []float32 {
	if n.residual == nil {
		return nil
	}
	return n.residual[img*out : (img+1)*out]
}

// apply sets y to x·scale + shift, through the relu when the norm has
// one: batch norm's normalising row kernels.
func (n *convNorm) apply(vec vecOps, y, x []float32, scale, shift float32) {
	if n.relu {
		vec.affineReLU(y, x, scale, shift)
		return
	}
	vec.affine(y, x, scale, shift)
}

// Conv2dBackward implements tensor.Backend.
func (b *Backend) Conv2dBackward(x, w, dy, dx, dw, db *tensor.Tensor, p tensor.ConvParams) {
	b.conv2dBackward(x, w, dy, dx, dw, db, p, nil)
}

// conv2dBackward is Conv2dBackward, reusing what its forward pass kept
// when kept is set (Conv2dBackwardKept).
func (b *Backend) conv2dBackward(x, w, dy, dx, dw, db *tensor.Tensor, p tensor.ConvParams, kept *prepared) {
	if dw == nil && dx == nil && db == nil {
		return
	}
	w, p, trimmed := b.liveKernel(x, w, p)
	chunks := b.runConv(true, x, w, nil, nil, dy, dx, dw, db, p, nil, kept)
	g := b.conv.g
	if dw != nil && trimmed == nil && chunks > 0 {
		// dw += each chunk's sum in turn, element by element: split over
		// the threads by element range, the chunks added in order.
		b.runElem(elemTask{op: opAddChunks, n: g.f * g.ckk, y: dw, parts: chunks}, elemGrain)
	}
	for i := 0; i < chunks; i++ {
		s := &b.chunks[i]
		if dw != nil && trimmed != nil {
			trimmed.addWeightGrad(dw, s.dw[:g.f*g.ckk])
		}
		if db != nil {
			for j, v := range s.db[:g.f] {
				db.Data[j] += v
			}
		}
	}
}

// runConv runs a convolution's forward pass or backward pass over the
// batch and returns the number of chunks whose weight and bias gradient
// sums the caller adds up (none when the gradients went to dw and db
// directly). A forward pass with prep set takes the weights' forms from
// it, or builds them there on its first call (Conv2dPrepared); one that
// keeps for the backward pass (Conv2dKeep) builds the dense matrix there,
// and the backward pass given it reads it (Conv2dBackwardKept).
func (b *Backend) runConv(backward bool, x, w, bias, y, dy, dx, dw, db *tensor.Tensor, p tensor.ConvParams, norm *convNorm, prep *prepared) int {
	n := x.Shape[0]
	threads := b.pool.Threads()
	t := &b.conv
	*t = convTask{b: b, backward: backward, x: x, w: w, bias: bias, y: y, dy: dy, dx: dx, p: p, g: geom(x, w, p), n: n, biasGrad: db != nil, weightGrad: dw != nil, norm: norm, prep: prep}
	if b.useDense(t.g, p) {
		t.runDense(dw, db)
		return 0
	}
	if t.winograd = b.useWinograd(t.g, p); t.winograd && (!backward || dx != nil) {
		// Forward: U [16][F][C], or [36][C][F] with 4×4 tiles; backward:
		// the data gradient's U [16][C][F].
		t.tile = 2
		if !backward && b.useWinograd4(t.g, prep) {
			t.tile = 4
		}
		var fill bool
		count := winoElems(t.tile)
		n := count * winoStride(t.g.f*t.g.c)
		if t.u, fill = t.weightsForm(&b.winoU, n); fill {
			b.transformWeights(t.u, w, t.g.f, t.g.c, t.tile, backward)
		}
		t.keptU = t.keepsForm(n)
		// A prepared U is also kept packed: as B where the layer runs
		// channels last (4×4 tiles always do) on maps at most
		// winoLastMaxTileCols tiles wide, whose short products paid most
		// for packing it again (on wider maps, ResNet-50's 28×28 and
		// 56×56, a packed 4×4-tile U raised inference's peak by 8 MiB for
		// no measured gain); as A up to maxPackedAElems.
		tiles := winoTiling(t.g.oh, t.g.ow)
		if t.tile == 4 {
			tiles = wino4Tiling(t.g.oh, t.g.ow)
		}
		switch {
		case !t.keptU:
		case t.tile == 4 || t.channelsLast(tiles):
			if tiles.tw <= winoLastMaxTileCols {
				t.uPacked = t.prep.packU(b.gemm, t.u, count, t.g.f, t.g.c, t.tile == 4, fill)
			}
		case t.packsA(n):
			t.aPacked = t.prep.packA(b.gemm, t.u, 16, winoStride(t.g.f*t.g.c), t.g.f, t.g.c, fill)
		}
	}
	if t.rows = !backward && !t.winograd && b.useRows(t.g, p); t.rows {
		var fill bool
		if t.rowsW, fill = t.weightsForm(&b.rowsW, t.g.f*t.g.ckk); fill {
			rowsWeights(t.rowsW, w.Data, t.g.f, t.g.c, p.KernelH*p.KernelW)
		}
		if t.packsA(t.g.f * t.g.ckk) {
			t.aPacked = t.prep.packA(b.gemm, t.rowsW, 1, 0, t.g.f, t.g.ckk, fill)
		}
	}
	if !backward && !t.winograd && !t.rows && t.packsA(t.g.f*t.g.ckk) {
		// im2col: the kernel itself, fixed while prepared.
		t.aPacked = t.prep.packA(b.gemm, w.Data, 1, 0, t.g.f, t.g.ckk, !t.prep.ready)
	}
	if n < threads {
		// Too few images to go round: one chunk, multi-threaded GEMMs.
		t.per = n
		t.Do(0, 0)
		return 1
	}
	t.serialGEMM = true
	t.per = ceilDiv(n, threads)
	chunks := ceilDiv(n, t.per)
	b.pool.Run(chunks, t)
	return chunks
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// transformWeights sets u to the Winograd transform of w's f×c 3×3
// kernels for tiles of tile×tile outputs (flipped: the data gradient's,
// 2×2 tiles), before the chunks run: blocks of kernels spread over the
// threads, each with its chunk's rows (with 2×2 tiles, where the vector
// kernels run); otherwise on the calling goroutine.
func (b *Backend) transformWeights(u []float32, w *tensor.Tensor, f, c, tile int, flipped bool) {
	blocks := ceilDiv(f*c, winoWeightBlock)
	b.weights = weightsTask{b: b, u: u, w: w.Data, f: f, c: c, tile: tile, flipped: flipped}
	if tile == 2 && !b.vec.vector || b.pool.Threads() == 1 || blocks == 1 {
		b.weights.Do(0, -1)
		return
	}
	b.pool.Run(blocks, &b.weights)
}

// weightsTask is transformWeights' work, one block of kernels an index
// (-1: all of them), kept in the backend so that handing it to the pool
// allocates nothing.
type weightsTask struct {
	b       *Backend
	u, w    []float32
	f, c    int
	tile    int
	flipped bool
}

func (t *weightsTask) Do(worker, i int) {
	first, last := i, i+1
	if i < 0 {
		first, last = 0, ceilDiv(t.f*t.c, winoWeightBlock)
	}
	work := &t.b.chunks[worker].wino
	switch {
	case t.tile == 4:
		winograd4Weights(t.b.vec, t.u, t.w, t.f, t.c, work, first, last)
	case i < 0:
		winogradWeights(t.b.vec, t.u, t.w, t.f, t.c, t.flipped, work)
	default:
		winogradWeightsBlocks(t.b.vec, t.u, t.w, t.f, t.c, t.flipped, work, first, last)
	}
}

func (t *convTask) gemm(worker, m, n, k int, a, bm gemm.Matrix, beta float32, c gemm.Matrix) {
	if t.serialGEMM {
		must(t.b.gemm.SgemmSerial(worker, m, n, k, 1, a, bm, beta, c))
		return
	}
	must(t.b.gemm.Sgemm(m, n, k, 1, a, bm, beta, c))
}

// gemmA is gemm with op(A) the prepared packing pa when there is one and
// the products run one to a worker.
func (t *convTask) gemmA(worker, m, n, k int, a gemm.Matrix, pa *gemm.PackedA, bm gemm.Matrix, beta float32, c gemm.Matrix) {
	if pa != nil && t.serialGEMM {
		must(t.b.gemm.SgemmSerialPackedA(worker, m, n, k, *pa, bm, beta, c))
		return
	}
	t.gemm(worker, m, n, k, a, bm, beta, c)
}

// packedW returns the prepared packing of the layer's kernel or rows
// kernel (one matrix), or nil.
func (t *convTask) packedW() *gemm.PackedA {
	if len(t.aPacked) != 1 {
		return nil
	}
	return &t.aPacked[0]
}

// gemmPacked is gemm with B packed (PackB).
func (t *convTask) gemmPacked(worker, m, n, k int, a gemm.Matrix, pb gemm.PackedB, beta float32, c gemm.Matrix) {
	if t.serialGEMM {
		must(t.b.gemm.SgemmSerialPackedB(worker, m, n, k, 1, a, pb, beta, c))
		return
	}
	must(t.b.gemm.SgemmPackedB(m, n, k, 1, a, pb, beta, c))
}

// finishGroup puts the forward products of the group of n images from
// first, y [F, n·OH·OW] (the images' own outputs when n is 1), in place,
// with the bias and the fused batch norm.
func (t *convTask) finishGroup(y gemm.Matrix, first, n int) {
	g, outLen, ld := t.g, t.g.f*t.g.ohw, n*t.g.ohw
	if n == 1 {
		t.addBias(y.Data, g.ohw)
		t.normalise(y.Data, first)
		return
	}
	for k := range n {
		yn := t.y.Data[(first+k)*outLen : (first+k+1)*outLen]
		if t.norm != nil && t.bias == nil {
			// The batch norm's pass is the copy.
			res := t.norm.residualOf(first+k, outLen)
			for f := range t.norm.scale {
				t.normaliseRow(yn[f*g.ohw:(f+1)*g.ohw], y.Data[f*ld+k*g.ohw:f*ld+(k+1)*g.ohw], res, f)
			}
			continue
		}
		for f := 0; f < g.f; f++ {
			copy(yn[f*g.ohw:(f+1)*g.ohw], y.Data[f*ld+k*g.ohw:])
		}
		t.addBias(yn, g.ohw)
		t.normalise(yn, first+k)
	}
}

// groupColumns is the number of output positions a GEMM should see at
// least: small feature maps (8×8 in CIFARNet's last layers) are batched
// several images to a GEMM, so the weights are packed once per group
// rather than once per image.
const groupColumns = 512

// blockBytes bounds a block of the column matrix: im2col writes a block
// and the GEMM packs it right after, while it is in the core's cache,
// where a whole column matrix (3.6 MB an image in ResNet-50's layer2
// strided convolution, 7.4 MB in its stem) went out to memory and came
// back.
const blockBytes = 1 << 20

// Do runs chunk i of the batch on worker: groups of images, each group's
// column matrix [C·KH·KW, images·OH·OW] built and multiplied a block at a
// time. Where the blocks split a product along its depth — the forward
// pass's rows, the weight gradient's columns — they are multiples of the
// GEMM's depth, so the products over blocks give the bits of one product
// over the whole matrix (gemm.Engine.Depth).
func (t *convTask) Do(worker, i int) {
	switch {
	case t.winograd:
		t.winogradChunk(worker, i)
		return
	case t.rows:
		t.rowsChunk(worker, i)
		return
	}
	g := t.g
	s := &t.b.chunks[i]
	lo, hi := i*t.per, min((i+1)*t.per, t.n)
	group := max(1, min(hi-lo, groupColumns/g.ohw))
	depth := t.b.gemm.Depth()
	// im2col reads each image laid out for its receptive fields (padded,
	// its columns split by stride, or subsampled: phased.go), or, unpadded
	// at stride 1, the image itself. The layouts' padding is cleared once
	// a chunk.
	cols := columnSource{g: g, lay: phasedLayout(g, t.p)}
	cols.window = cols.lay.window(grow(&s.window, t.p.KernelH*t.p.KernelW), t.p.KernelW)
	// The images serve the forward pass and the weight gradient. A 1×1
	// kernel's column matrix is its image's layout: with one image to a
	// GEMM, that is multiplied directly.
	images := !t.backward || t.weightGrad
	direct := group == 1 && (pointwise(t.p) || cols.lay.subH > 0)
	columns := images && !direct
	var col, dcol, ybuf []float32
	if images && !cols.lay.identity() {
		cols.img = grow(&s.img, group*cols.lay.size())
		clear(cols.img)
	}
	if group > 1 {
		ybuf = grow(&s.ybuf, g.f*group*g.ohw)
	}
	wm := gemm.Matrix{Data: t.w.Data, Stride: g.ckk}
	// A 1×1 kernel's weight gradient with several times more inputs than
	// outputs is summed transposed, dWᵀ += x · dyᵀ, so that the packing
	// transposes the output gradient rather than the wider image
	// (transposedWeightGrad); the transpose is the chunk's sum at its end.
	var dwT []float32
	if t.backward {
		clear(grow(&s.dw, g.f*g.ckk))
		clear(grow(&s.db, g.f))
		if t.weightGrad && transposedWeightGrad(g, t.p) {
			dwT = grow(&s.dwT, g.ckk*g.f)
			clear(dwT)
		}
	}
	inLen, outLen := g.c*g.h*g.wd, g.f*g.ohw
	for first := lo; first < hi; first += group {
		n := min(group, hi-first)
		ld := n * g.ohw // columns of the group's matrices
		if images {
			cols.images(t.b.vec, t.x.Data[first*inLen:(first+n)*inLen], n)
		}
		// Blocks of the column matrix: the forward pass's are frows (the
		// GEMM's depth) rows by width columns, the weight gradient's wrows
		// by width, the data gradient's drows by all ld columns (splits
		// along M and N, which keep the bits at any size).
		frows, width := depth, blockWidth(depth, g.ckk, ld)
		wrows, drows := blockRows(width), blockRows(ld)
		if !t.serialGEMM {
			// One chunk, its products split over the threads: whole
			// matrices, as blocks would be too small to split (a batch of
			// one image, as infer gets).
			frows, width, wrows, drows = g.ckk, ld, g.ckk, g.ckk
		}
		if columns {
			col = grow(&s.col, width*min(g.ckk, max(frows, wrows)))
		}
		if !direct && t.dx != nil {
			dcol = grow(&s.dcol, min(g.ckk, drows)*ld)
		}
		if !t.backward {
			y := gemm.Matrix{Data: ybuf, Stride: ld} // the group's output [F, ld]
			if n == 1 {
				y = gemm.Matrix{Data: t.y.Data[first*outLen : (first+1)*outLen], Stride: g.ohw}
			}
			if direct {
				t.gemmA(worker, g.f, g.ohw, g.ckk, wm, t.packedW(), gemm.Matrix{Data: cols.src, Stride: g.ohw}, 0, y)
			}
			for j0 := 0; columns && j0 < ld; j0 += width {
				j1 := min(ld, j0+width)
				for r0 := 0; r0 < g.ckk; r0 += frows {
					r1 := min(g.ckk, r0+frows)
					blk := col[:(r1-r0)*(j1-j0)]
					cols.block(blk, n, r0, r1, j0, j1)
					beta := float32(1)
					if r0 == 0 {
						beta = 0
					}
					var pa *gemm.PackedA
					if r1-r0 == g.ckk { // one block: the whole kernel
						pa = t.packedW()
					}
					t.gemmA(worker, g.f, j1-j0, r1-r0, wm.ColsFrom(r0), pa, gemm.Matrix{Data: blk, Stride: j1 - j0}, beta, y.ColsFrom(j0))
				}
			}
			t.finishGroup(y, first, n)
			continue
		}
		// The group's output gradient as one [F, ld] matrix.
		var dyM gemm.Matrix
		if n == 1 {
			dyM = gemm.Matrix{Data: t.dy.Data[first*outLen : (first+1)*outLen], Stride: g.ohw}
		} else {
			for k := range n {
				dyn := t.dy.Data[(first+k)*outLen : (first+k+1)*outLen]
				for f := 0; f < g.f; f++ {
					copy(ybuf[f*ld+k*g.ohw:f*ld+(k+1)*g.ohw], dyn[f*g.ohw:(f+1)*g.ohw])
				}
			}
			dyM = gemm.Matrix{Data: ybuf, Stride: ld}
		}
		dw := gemm.Matrix{Data: s.dw, Stride: g.ckk}
		if t.weightGrad && direct { // dW += dy · xᵀ
			t.weightGradBlock(worker, gemm.Matrix{Data: cols.src, Stride: ld}, 0, g.ckk, 0, ld, dyM, dw, dwT)
		}
		for r0 := 0; columns && r0 < g.ckk; r0 += wrows { // dW += dy · colᵀ
			r1 := min(g.ckk, r0+wrows)
			for j0 := 0; j0 < ld; j0 += width {
				j1 := min(ld, j0+width)
				blk := col[:(r1-r0)*(j1-j0)]
				cols.block(blk, n, r0, r1, j0, j1)
				t.weightGradBlock(worker, gemm.Matrix{Data: blk, Stride: j1 - j0}, r0, r1-r0, j0, j1-j0, dyM, dw, dwT)
			}
		}
		if t.biasGrad {
			addRowSums(s.db[:g.f], dyM.Data, ld, dyM.Stride)
		}
		if t.dx == nil {
			continue
		}
		wT := gemm.Matrix{Data: t.w.Data, Stride: g.ckk, Trans: true}
		dx := t.dx.Data[first*inLen : (first+n)*inLen]
		if direct && cols.lay.identity() {
			t.gemm(worker, g.ckk, g.ohw, g.f, wT, dyM, 0, gemm.Matrix{Data: dx, Stride: g.ohw})
			continue
		}
		if direct { // the subsampled image's gradient, scattered into dx
			sums := grow(&s.dimg, cols.lay.size())
			t.gemm(worker, g.ckk, g.ohw, g.f, wT, dyM, 0, gemm.Matrix{Data: sums, Stride: g.ohw})
			cols.lay.extract(t.b.vec, dx, sums)
			continue
		}
		// dcol = Wᵀ · dy a block of rows at a time, each folded back into
		// the images' gradients (laid out as their images were) as it is
		// made, in the order of its rows.
		sums := dx
		if !cols.lay.identity() {
			sums = grow(&s.dimg, n*cols.lay.size())
		}
		clear(sums)
		per := len(sums) / n // one image's
		for r0 := 0; r0 < g.ckk; r0 += drows {
			r1 := min(g.ckk, r0+drows)
			blk := dcol[:(r1-r0)*ld]
			t.gemm(worker, r1-r0, ld, g.f, wT.RowsFrom(r0), dyM, 0, gemm.Matrix{Data: blk, Stride: ld})
			for k := range n {
				col2im(t.b.vec, blk[k*g.ohw:], ld, sums[k*per:(k+1)*per], cols.lay, cols.window, g, r0, r1)
			}
		}
		if !cols.lay.identity() {
			for k := range n {
				cols.lay.extract(t.b.vec, dx[k*inLen:(k+1)*inLen], sums[k*per:(k+1)*per])
			}
		}
	}
	if dwT != nil {
		for c := range g.ckk {
			for f := range g.f {
				s.dw[f*g.ckk+c] = dwT[c*g.f+f]
			}
		}
	}
}

// weightGradBlock adds to the chunk's weight gradient the product of the
// group's output gradient dyM, its columns [j0, j0+cols), and x, rows
// [r0, r0+rows) of the group's column matrix over the same columns (the
// image itself for a 1×1 kernel): dW[:, r0:] += dy · xᵀ, or, with dwT
// set, dWᵀ[r0:] += x · dyᵀ (transposedWeightGrad), the same sums.
func (t *convTask) weightGradBlock(worker int, x gemm.Matrix, r0, rows, j0, cols int, dyM, dw gemm.Matrix, dwT []float32) {
	f := t.g.f
	if dwT != nil {
		dyT := dyM.ColsFrom(j0)
		dyT.Trans = true
		t.gemm(worker, rows, f, cols, x, dyT, 1, gemm.Matrix{Data: dwT[r0*f:], Stride: f})
		return
	}
	x.Trans = true
	t.gemm(worker, f, rows, cols, dyM.ColsFrom(j0), x, 1, dw.ColsFrom(r0))
}

// transposedWeightGrad reports whether a convolution's weight gradient is
// summed transposed: a 1×1 kernel, at least transposedMinRatio times as
// many inputs as outputs, so that the product's transposed operand,
// packed at every call, is the output gradient [F, ld] instead of the
// far larger image [C, ld], and at most transposedMaxOutputs outputs. Each sum is the
// same, bit for bit: the same products (a·b is b·a) in the same order.
func transposedWeightGrad(g geometry, p tensor.ConvParams) bool {
	return p.KernelH*p.KernelW == 1 && g.ckk >= transposedMinRatio*g.f && g.f <= transposedMaxOutputs
}

// transposedMinRatio and transposedMaxOutputs bound the 1×1 weight
// gradients summed transposed. Measured on one thread, Zen 3, alternated
// rounds of ResNet-50's 1×1 layers in training (HISTORY, 2026-12-03),
// training time by the median ratio: 256→64 over 56×56 maps 1.10×
// (ahead in 7 of 8 rounds; 1.11×, 6 of 6, in another run) and 512→128
// over 28×28 1.06× (6 of 6), four times as many inputs as outputs; with
// twice as many, 256→128 over 56×56 0.96× (2 of 8) and 512→256 over
// 28×28 1.01×; with 256 or 512 outputs on 14×14 and 7×7 maps (several
// images a product) 0.95–0.97×.
const (
	transposedMinRatio   = 4
	transposedMaxOutputs = 128
)

// blockWidth is the number of columns of a column matrix's blocks, for
// blocks of depth rows of a matrix [rows, ld]: all of them where the block
// keeps within blockBytes, else the largest multiple of depth that does
// (at least depth).
func blockWidth(depth, rows, ld int) int {
	rows = min(rows, depth)
	if rows*ld*4 <= blockBytes {
		return ld
	}
	return max(depth, blockBytes/4/rows/depth*depth)
}

// blockRows is the number of rows of a column matrix's blocks of width
// columns in the backward passes: as many as keep within blockBytes, a
// multiple of 96 (of the micro-kernels' tile rows and columns), at least
// 96.
func blockRows(width int) int {
	return max(96, blockBytes/4/width/96*96)
}

// columnSource makes blocks of a group of images' column matrix.
type columnSource struct {
	g      geometry
	lay    phased
	window []int     // each kernel position's offset in a channel of the layout (phased.window)
	img    []float32 // the group's images laid out, one after another; nil: the images themselves
	src    []float32 // the images im2col reads
}

// images takes the group's n images x (one after another), laying them
// out where the layout is not the image itself.
func (cs *columnSource) images(ops vecOps, x []float32, n int) {
	if cs.img == nil {
		cs.src = x
		return
	}
	size, in := cs.lay.size(), len(x)/n
	for k := range n {
		cs.lay.fill(ops, cs.img[k*size:(k+1)*size], x[k*in:(k+1)*in])
	}
	cs.src = cs.img[:n*size]
}

// block writes rows [r0, r1) and columns [j0, j1) of the group's column
// matrix (image k's columns are k·OH·OW onward) into blk, at row stride
// j1 − j0.
func (cs *columnSource) block(blk []float32, n, r0, r1, j0, j1 int) {
	ohw, per := cs.g.ohw, len(cs.src)/n
	for k := range n {
		c0, c1 := max(j0-k*ohw, 0), min(j1-k*ohw, ohw)
		if c0 >= c1 {
			continue
		}
		im2col(cs.src[k*per:(k+1)*per], cs.lay, cs.window, blk[k*ohw+c0-j0:], j1-j0, cs.g, r0, r1, c0, c1)
	}
}

// addBias adds the bias to each of the F rows (of length hw) of y, with
// the batch norm's row kernel: x·1 + v is x + v, bit for bit.
func (t *convTask) addBias(y []float32, hw int) {
	if t.bias == nil {
		return
	}
	for f, v := range t.bias.Data {
		row := y[f*hw : (f+1)*hw]
		t.b.vec.affine(row, row, 1, v)
	}
}

// addRowSums adds to sums[r] the sum of row r of m (rows of n values,
// stride apart), each row summed in order from its first value as a
// plain loop sums it — the same bits — but four rows at a time, so that
// four additions are in flight where one row's would each wait for the
// one before.
func addRowSums(sums, m []float32, n, stride int) {
	r := 0
	for ; r+4 <= len(sums); r += 4 {
		r0 := m[r*stride : r*stride+n]
		r1 := m[(r+1)*stride : (r+1)*stride+n]
		r2 := m[(r+2)*stride : (r+2)*stride+n]
		r3 := m[(r+3)*stride : (r+3)*stride+n]
		var s0, s1, s2, s3 float32
		for j, v := range r0 {
			s0 += v
			s1 += r1[j]
			s2 += r2[j]
			s3 += r3[j]
		}
		sums[r] += s0
		sums[r+1] += s1
		sums[r+2] += s2
		sums[r+3] += s3
	}
	for ; r < len(sums); r++ {
		var sum float32
		for _, v := range m[r*stride : r*stride+n] {
			sum += v
		}
		sums[r] += sum
	}
}

// im2col writes rows [r0, r1) and columns [c0, c1) of one image's column
// matrix [C·KH·KW, OH·OW] — its receptive fields, zero where they overhang
// the padding — into col, row r at (r − r0)·ld, column c at c − c0: img
// is the image in layout lay (phased.go), so each row is runs of up to OW
// values, one every StrideH padded rows, from the offset window gives its
// kernel position in the image's channel.
func im2col(img []float32, lay phased, window []int, col []float32, ld int, g geometry, r0, r1, c0, c1 int) {
	step, plane := lay.step(), lay.hp*lay.wp
	c, k := r0/len(window), r0%len(window)
	oh0, ow0 := c0/g.ow, c0%g.ow
	for r := r0; r < r1; r++ {
		src := img[c*plane+window[k]:]
		out := col[(r-r0)*ld : (r-r0)*ld+c1-c0]
		if k++; k == len(window) {
			c, k = c+1, 0
		}
		if step == g.ow { // the runs follow one another: a 1×1 kernel, unstrided or subsampled
			copy(out, src[c0:c1])
			continue
		}
		at, ow := oh0*step+ow0, ow0
		for j := 0; j < len(out); {
			run := min(len(out)-j, g.ow-ow)
			if run < 8 { // a copy's call costs more than so few values (ResNet-18's 2×2 maps)
				for i, v := range src[at : at+run] {
					out[j+i] = v
				}
			} else {
				copy(out[j:j+run], src[at:at+run])
			}
			j += run
			at += step - ow
			ow = 0
		}
	}
}

// col2im adds rows [r0, r1) of an image's column gradients (col, row
// stride ld, all OH·OW columns) into sums, an image in layout lay, at the
// positions im2col took them from: its adjoint. Over all rows, in order,
// the sums at the image's positions are its input gradient
// (phased.extract), added in the order the rows give.
func col2im(ops vecOps, col []float32, ld int, sums []float32, lay phased, window []int, g geometry, r0, r1 int) {
	step, plane := lay.step(), lay.hp*lay.wp
	c, k := r0/len(window), r0%len(window)
	for r := r0; r < r1; r++ {
		dst := sums[c*plane+window[k]:]
		in := col[(r-r0)*ld : (r-r0)*ld+g.ohw]
		if k++; k == len(window) {
			c, k = c+1, 0
		}
		if step == g.ow {
			d := dst[:g.ohw]
			ops.add(d, d, in)
			continue
		}
		for oh := range g.oh {
			d := dst[oh*step : oh*step+g.ow]
			ops.add(d, d, in[oh*g.ow:(oh+1)*g.ow])
		}
	}
}
