package cpu

import (
	"github.com/gorun/gorun/model/gemm"
	"github.com/gorun/gorun/model/tensor"
)

// The forward pass of a convolution over a small output with many
// channels (ResNet-18's strided 3×3 layers on CIFAR-10's 8×8 and 4×4
// maps) builds the transpose of im2col's column matrix with the channels
// innermost: a row per output position, [KH][KW][C] long, each kernel
// position's C values one copy from the image laid out [H][W][C]. im2col
// writes its rows in runs of OW values, four or two there, a loop's
// overhead each (40% of the 8×8 layer's forward time in a profile). The
// kernel is permuted to [F][KH][KW][C] to match, once a call, and the
// product is the same Y = W·col, in another order of its sums.

const (
	// rowsMaxWidth is the widest output built by rows: ResNet-50's
	// strided layers onto 7×7 and 14×14 outputs ran no faster by rows
	// (bench/results/current/rows-width-2026-11-28-zen4.txt).
	rowsMaxWidth = 4
	// rowsMinChannels is the fewest input channels: a copy a kernel
	// position must carry enough values to beat im2col's runs.
	rowsMinChannels = 16
)

// useRows reports whether the forward pass builds its column matrix by
// rows (rows.go): a kernel larger than 1×1 (whose column matrices are
// the images themselves, or subsampled), an output at most rowsMaxWidth
// wide and at least rowsMinChannels input channels, with the vector
// kernels (as the choice was measured).
func (b *Backend) useRows(g geometry, p tensor.ConvParams) bool {
	return b.vec.vector && b.convAlgo == ConvAuto && p.KernelH*p.KernelW > 1 && g.ow <= rowsMaxWidth && g.c >= rowsMinChannels
}

// rowsWeights permutes the kernel w [F][C][KK] into dst [F][KK][C].
func rowsWeights(dst, w []float32, f, c, kk int) {
	for o := range f {
		src, out := w[o*c*kk:(o+1)*c*kk], dst[o*c*kk:(o+1)*c*kk]
		for ch := range c {
			for t, v := range src[ch*kk : (ch+1)*kk] {
				out[t*c+ch] = v
			}
		}
	}
}

// rowsChunk runs chunk i of the batch's forward pass, in groups of
// images of groupColumns output positions at least, each group one
// product with the group's rows.
func (t *convTask) rowsChunk(worker, i int) {
	g, p := t.g, t.p
	s := &t.b.chunks[i]
	lo, hi := i*t.per, min((i+1)*t.per, t.n)
	group := max(1, min(hi-lo, groupColumns/g.ohw))
	k := g.ckk // a row's length
	hp, wp := g.h+2*p.PadH, g.wd+2*p.PadW
	plane := grow(&s.img, hp*wp*g.c) // an image, padded, channels innermost
	clear(plane)
	rows := grow(&s.col, group*g.ohw*k)
	ybuf := grow(&s.ybuf, g.f*group*g.ohw)
	inLen, outLen := g.c*g.h*g.wd, g.f*g.ohw
	w := gemm.Matrix{Data: t.rowsW[:g.f*k], Stride: k}
	for first := lo; first < hi; first += group {
		n := min(group, hi-first)
		for img := range n {
			x := t.x.Data[(first+img)*inLen : (first+img+1)*inLen]
			for iy := range g.h {
				channelsInnermost(t.b.vec, plane[((iy+p.PadH)*wp+p.PadW)*g.c:], x[iy*g.wd:], g.h*g.wd, g.c, g.wd)
			}
			for oy := range g.oh {
				for ox := range g.ow {
					row := rows[(img*g.ohw+oy*g.ow+ox)*k:][:k]
					for kh := range p.KernelH {
						at := ((oy*p.StrideH+kh)*wp + ox*p.StrideW) * g.c
						copy(row[kh*p.KernelW*g.c:(kh+1)*p.KernelW*g.c], plane[at:at+p.KernelW*g.c])
					}
				}
			}
		}
		ld := n * g.ohw
		y := gemm.Matrix{Data: ybuf, Stride: ld}
		if n == 1 {
			y = gemm.Matrix{Data: t.y.Data[first*outLen : (first+1)*outLen], Stride: g.ohw}
		}
		t.gemmA(worker, g.f, ld, k, w, t.packedW(), gemm.Matrix{Data: rows[:ld*k], Stride: k, Trans: true}, 0, y)
		t.finishGroup(y, first, n)
	}
}
