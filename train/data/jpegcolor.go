package data

import "image"

// libjpeg's colour path, which Pillow's JPEG files go through: Go's
// decoder hands over the subsampled chroma planes; these upsample them as
// libjpeg's "fancy" upsampling does (a triangle filter, its rounding
// included) and convert to RGB with libjpeg's fixed-point tables, so that
// a JPEG decodes to within a level of Pillow's (the IDCTs differ by at
// most one).

// ycbcrToRGB converts m (4:4:4, 4:2:2 or 4:2:0; others by Go's own
// conversion) as libjpeg does.
func ycbcrToRGB(m *image.YCbCr) *RGB {
	w, h := m.Rect.Dx(), m.Rect.Dy()
	var cb, cr []byte // full-resolution planes, w×h
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio444:
		cb, cr = plane(m.Cb, m.CStride, w, h), plane(m.Cr, m.CStride, w, h)
	case image.YCbCrSubsampleRatio422:
		cb, cr = fancyH2V1(m.Cb, m.CStride, w, h), fancyH2V1(m.Cr, m.CStride, w, h)
	case image.YCbCrSubsampleRatio420:
		cb, cr = fancyH2V2(m.Cb, m.CStride, w, h), fancyH2V2(m.Cr, m.CStride, w, h)
	default:
		return nil
	}
	out := NewRGB(w, h)
	for y := range h {
		ycbcrRow(out.Pix[3*y*w:3*(y+1)*w], m.Y[y*m.YStride:y*m.YStride+w], cb[y*w:(y+1)*w], cr[y*w:(y+1)*w])
	}
	return out
}

// ycbcrRow converts one row of full-resolution samples to RGB with
// libjpeg's tables.
func ycbcrRow(out, ys, cb, cr []byte) {
	out, cb, cr = out[:3*len(ys)], cb[:len(ys)], cr[:len(ys)]
	for x, v := range ys {
		yy, b, r := int32(v), cb[x], cr[x]
		o := out[3*x : 3*x+3 : 3*x+3]
		o[0] = clamp8(yy + crR[r])
		o[1] = clamp8(yy + (cbG[b]+crG[r])>>scaleBits)
		o[2] = clamp8(yy + cbB[b])
	}
}

// plane copies a w×h plane out of a strided buffer.
func plane(p []byte, stride, w, h int) []byte {
	out := make([]byte, w*h)
	for y := range h {
		copy(out[y*w:(y+1)*w], p[y*stride:y*stride+w])
	}
	return out
}

// fancyRow upsamples one row of n column sums (each weighted 4 in all:
// the caller's rows) to 2n samples, libjpeg's h2v2/h2v1 horizontal step;
// shift and the two biases are libjpeg's for the case.
func fancyRow(sums []int32, out []byte, shift uint, bias0, bias1 int32, edge int32) {
	n := len(sums)
	if n == 1 {
		out[0] = byte((sums[0]*edge + bias0) >> shift)
		if len(out) > 1 {
			out[1] = byte((sums[0]*edge + bias1) >> shift)
		}
		return
	}
	// Sample 2i mixes column i with column i−1, sample 2i+1 with column
	// i+1; the outermost two take their own column alone (edge); out is
	// 2n samples long, or 2n−1 (an odd width).
	out[0] = byte((sums[0]*edge + bias0) >> shift)
	out[1] = byte((sums[0]*3 + sums[1] + bias1) >> shift)
	for i := 1; i < n-1; i++ {
		s3 := sums[i] * 3
		o := out[2*i : 2*i+2 : 2*i+2]
		o[0] = byte((s3 + sums[i-1] + bias0) >> shift)
		o[1] = byte((s3 + sums[i+1] + bias1) >> shift)
	}
	last := n - 1
	out[2*last] = byte((sums[last]*3 + sums[last-1] + bias0) >> shift)
	if 2*last+1 < len(out) {
		out[2*last+1] = byte((sums[last]*edge + bias1) >> shift)
	}
}

// fancyH2V1 is libjpeg's h2v1_fancy_upsample.
func fancyH2V1(p []byte, stride, w, h int) []byte {
	cw := (w + 1) / 2
	out := make([]byte, w*h)
	sums := make([]int32, cw)
	for y := range h {
		for i := range cw {
			sums[i] = int32(p[y*stride+i])
		}
		fancyRow(sums, out[y*w:(y+1)*w], 2, 1, 2, 4)
	}
	return out
}

// fancyH2V2 is libjpeg's h2v2_fancy_upsample: each output row mixes its
// nearer chroma row (×3) with the farther one (the edge rows repeated).
func fancyH2V2(p []byte, stride, w, h int) []byte {
	cw, ch := (w+1)/2, (h+1)/2
	out := make([]byte, w*h)
	sums := make([]int32, cw)
	for y := range h {
		near := y / 2
		far := near - 1
		if y%2 == 1 {
			far = near + 1
		}
		far = max(0, min(far, ch-1))
		for i := range cw {
			sums[i] = int32(p[near*stride+i])*3 + int32(p[far*stride+i])
		}
		fancyRow(sums, out[y*w:(y+1)*w], 4, 8, 7, 4)
	}
	return out
}

// libjpeg's YCbCr→RGB tables (jdcolor.c), 16-bit fixed point.
const scaleBits = 16

var crR, cbB, crG, cbG = yccTables()

func yccTables() (crR, cbB, crG, cbG [256]int32) {
	fix := func(x float64) int32 { return int32(x*(1<<scaleBits) + 0.5) }
	const half = 1 << (scaleBits - 1)
	for i := range 256 {
		x := int32(i - 128)
		crR[i] = (fix(1.40200)*x + half) >> scaleBits
		cbB[i] = (fix(1.77200)*x + half) >> scaleBits
		crG[i] = -fix(0.71414) * x
		cbG[i] = -fix(0.34414)*x + half
	}
	return
}
