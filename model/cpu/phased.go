package cpu

import "github.com/gorun/gorun/model/tensor"

// phased describes an image [C, H, W] laid out for a convolution's
// receptive fields: zero-padded by PadH rows above and below and PadW
// columns either side, and each padded row split into StrideW phases —
// the columns q with q mod StrideW = 0, then those with q mod StrideW =
// 1, and so on. Kernel column kw then reads, along an output row, one
// contiguous run (phase kw mod StrideW, from kw div StrideW on), and
// kernel row kh every StrideH-th padded row from kh on. So each row of
// im2col's column matrix is OH copies of OW values and col2im's are OH
// adds, with no edges to test and no strided loads: the image is split
// once where the strided im2col gathered it once per kernel column.
//
// A 1×1 kernel at a stride, unpadded, reads a quarter of the image at
// stride 2: its layout is the image subsampled, [C, OH, OW], which
// im2col then copies as it copies an image at stride 1.
type phased struct {
	c, h, w    int // the image
	padH, padW int
	phases     int // column phases: StrideW, 1 when subsampled
	rowStep    int // padded rows from one output row's to the next's: StrideH, 1 when subsampled
	subH, subW int // the strides of a subsampled layout, else 0
	hp, wp     int // padded rows; padded row length, all phases together
}

func phasedLayout(g geometry, p tensor.ConvParams) phased {
	if p.KernelH == 1 && p.KernelW == 1 && p.PadH == 0 && p.PadW == 0 && (p.StrideH > 1 || p.StrideW > 1) {
		return phased{c: g.c, h: g.h, w: g.wd, phases: 1, rowStep: 1, subH: p.StrideH, subW: p.StrideW, hp: g.oh, wp: g.ow}
	}
	return phased{c: g.c, h: g.h, w: g.wd, padH: p.PadH, padW: p.PadW, phases: p.StrideW, rowStep: p.StrideH, hp: g.h + 2*p.PadH, wp: g.wd + 2*p.PadW}
}

// identity reports whether the layout is the image itself (no padding,
// one phase), which im2col and col2im then use in place.
func (l phased) identity() bool {
	return l.padH == 0 && l.padW == 0 && l.phases == 1 && l.rowStep == 1 && l.subH == 0
}

// size is the number of values a laid-out image takes.
func (l phased) size() int { return l.c * l.hp * l.wp }

// phaseStart is the offset of phase r within a padded row: the widths
// ⌈(wp − r′)/phases⌉ of the phases r′ < r before it.
func (l phased) phaseStart(r int) int {
	at := 0
	for q := range r {
		at += ceilDiv(l.wp-q, l.phases)
	}
	return at
}

// column is the offset within a padded row of the run kernel column kw
// reads: output column ow reads it at column + ow.
func (l phased) column(kw int) int { return l.phaseStart(kw%l.phases) + kw/l.phases }

// window sets offsets[kh·kw + kw′], for a kernel kw columns wide, to the
// offset within a laid-out channel of the first value kernel position
// (kh, kw′) reads, and returns offsets.
func (l phased) window(offsets []int, kw int) []int {
	for k := range offsets {
		offsets[k] = k/kw*l.wp + l.column(k%kw)
	}
	return offsets
}

// at is the offset within a padded row of the image's column iw.
func (l phased) at(iw int) int {
	q := iw + l.padW
	return l.phaseStart(q%l.phases) + q/l.phases
}

// step is the distance in the layout from one output row's run to the
// next's.
func (l phased) step() int { return l.rowStep * l.wp }

// fill lays image x out in dst, writing only the positions that hold the
// image's values: dst's padding must already be zero, and stays so (a
// buffer cleared once serves every image of a layer).
func (l phased) fill(ops vecOps, dst, x []float32) {
	if l.subH > 0 {
		l.subsample(ops, dst, x)
		return
	}
	plane, even, odd := l.h*l.w, 0, 0
	if l.phases == 2 {
		even, odd = l.evenOdd()
	}
	for c := range l.c {
		in := x[c*plane : (c+1)*plane]
		out := dst[c*l.hp*l.wp+l.padH*l.wp:]
		switch l.phases {
		case 1:
			for ih := range l.h {
				copy(out[ih*l.wp+l.padW:ih*l.wp+l.padW+l.w], in[ih*l.w:])
			}
		case 2:
			// Column iw sits at padded column q = iw + padW: the even
			// columns of the image go to phase padW mod 2 from padW div 2
			// on, the odd ones to the other phase from (padW+1) div 2 on.
			ops.deinterleave(out[even:], out[odd:], l.wp, in, l.w, l.w/2, l.h)
			if l.w%2 == 1 {
				for ih := range l.h {
					out[ih*l.wp+l.at(l.w-1)] = in[ih*l.w+l.w-1]
				}
			}
		default:
			for ih := range l.h {
				row := out[ih*l.wp : (ih+1)*l.wp]
				for iw, v := range in[ih*l.w : (ih+1)*l.w] {
					row[l.at(iw)] = v
				}
			}
		}
	}
}

// extract is fill's inverse for gradients: it sets dx [C, H, W] to the
// values of the laid-out src at the image's positions, dropping the
// padding (whose sums belong to no pixel).
func (l phased) extract(ops vecOps, dx, src []float32) {
	if l.subH > 0 {
		l.scatter(dx, src)
		return
	}
	plane, even, odd := l.h*l.w, 0, 0
	if l.phases == 2 {
		even, odd = l.evenOdd()
	}
	for c := range l.c {
		out := dx[c*plane : (c+1)*plane]
		in := src[c*l.hp*l.wp+l.padH*l.wp:]
		switch l.phases {
		case 1:
			for ih := range l.h {
				copy(out[ih*l.w:(ih+1)*l.w], in[ih*l.wp+l.padW:])
			}
		case 2:
			// Adding zero keeps every value's bits: the sums began at +0,
			// so none is −0.
			ops.interleave(out, l.w, in[even:], in[odd:], l.wp, 0, l.w/2, l.h)
			if l.w%2 == 1 {
				for ih := range l.h {
					out[ih*l.w+l.w-1] = in[ih*l.wp+l.at(l.w-1)]
				}
			}
		default:
			for ih := range l.h {
				row := in[ih*l.wp : (ih+1)*l.wp]
				for iw := range out[ih*l.w : (ih+1)*l.w] {
					out[ih*l.w+iw] = row[l.at(iw)]
				}
			}
		}
	}
}

// evenOdd returns, for two phases, the offsets within a padded row of
// the image's column 0 (and every even one after it, one apart) and of
// its column 1 (and every odd one).
func (l phased) evenOdd() (even, odd int) {
	return l.phaseStart(l.padW%2) + l.padW/2, l.phaseStart(1-l.padW%2) + (l.padW+1)/2
}

// subsample sets dst [C, OH, OW] to every subH-th row's every subW-th
// value of x.
func (l phased) subsample(ops vecOps, dst, x []float32) {
	for c := range l.c {
		in := x[c*l.h*l.w : (c+1)*l.h*l.w]
		out := dst[c*l.hp*l.wp : (c+1)*l.hp*l.wp]
		for oh := range l.hp {
			row, src := out[oh*l.wp:(oh+1)*l.wp], in[oh*l.subH*l.w:]
			if l.subW == 2 {
				ops.gather2(row, src)
				continue
			}
			for ow := range row {
				row[ow] = src[ow*l.subW]
			}
		}
	}
}

// scatter is subsample's adjoint: dx [C, H, W] takes src's values where
// subsample took them and zero elsewhere.
func (l phased) scatter(dx, src []float32) {
	clear(dx)
	for c := range l.c {
		out := dx[c*l.h*l.w : (c+1)*l.h*l.w]
		in := src[c*l.hp*l.wp : (c+1)*l.hp*l.wp]
		for oh := range l.hp {
			row := out[oh*l.subH*l.w:]
			for ow, v := range in[oh*l.wp : (oh+1)*l.wp] {
				row[ow*l.subW] = v
			}
		}
	}
}
