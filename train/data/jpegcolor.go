package data

import "image"

// libjpeg's colour path, which Pillow's JPEG files go through: Go's
// decoder hands over the subsampled chroma planes; these upsample them as
// libjpeg's "fancy" upsampling does (a triangle filter, its rounding
// included) and convert to RGB with libjpeg's fixed-point tables, so that
// a JPEG decodes to within a level of Pillow's (the IDCTs differ by at
// most one).

// ycbcrToRGB converts m (4:4:4, 4:2:2 or 4:2:0; others by Go's own
// conversion: nil) as libjpeg does, into out's pixel buffer when it
// holds the image (fitRGB), a row at a time: each row's chroma upsampled
// into s's row buffers and converted, so nothing image-sized is made but
// the output.
func ycbcrToRGB(m *image.YCbCr, out *RGB, s *chromaRows) *RGB {
	w, h := m.Rect.Dx(), m.Rect.Dy()
	cw, ch := (w+1)/2, (h+1)/2
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio422, image.YCbCrSubsampleRatio420:
	default:
		return nil
	}
	out = fitRGB(out, w, h)
	s.cb, s.cr, s.sums = grown(s.cb, w), grown(s.cr, w), grown(s.sums, cw)
	cb, cr, sums := s.cb, s.cr, s.sums
	for y := range h {
		ys := m.Y[y*m.YStride : y*m.YStride+w]
		switch m.SubsampleRatio {
		case image.YCbCrSubsampleRatio444:
			cb, cr = m.Cb[y*m.CStride:y*m.CStride+w], m.Cr[y*m.CStride:y*m.CStride+w]
		case image.YCbCrSubsampleRatio422: // libjpeg's h2v1_fancy_upsample
			at := y * m.CStride
			rowSums(sums, m.Cb[at:at+cw])
			fancyRow(sums, cb, 2, 1, 2, 4)
			rowSums(sums, m.Cr[at:at+cw])
			fancyRow(sums, cr, 2, 1, 2, 4)
		case image.YCbCrSubsampleRatio420:
			// libjpeg's h2v2_fancy_upsample: each output row mixes its
			// nearer chroma row (×3) with the farther one (the edge rows
			// repeated).
			near := y / 2
			far := near - 1
			if y%2 == 1 {
				far = near + 1
			}
			far = max(0, min(far, ch-1))
			n, f := near*m.CStride, far*m.CStride
			columnSums(sums, m.Cb[n:n+cw], m.Cb[f:f+cw])
			fancyRow(sums, cb, 4, 8, 7, 4)
			columnSums(sums, m.Cr[n:n+cw], m.Cr[f:f+cw])
			fancyRow(sums, cr, 4, 8, 7, 4)
		}
		ycbcrRow(out.Pix[3*y*w:3*(y+1)*w], ys, cb, cr)
	}
	return out
}

// rowSums sets sums to a chroma row's samples, each weighted 4 by
// fancyRow's shift (h2v1).
func rowSums(sums []int32, row []byte) {
	sums = sums[:len(row)]
	for i, v := range row {
		sums[i] = int32(v)
	}
}

// columnSums sets sums to 3·near + far, column by column (h2v2's
// vertical step).
func columnSums(sums []int32, near, far []byte) {
	sums, far = sums[:len(near)], far[:len(near)]
	for i, v := range near {
		sums[i] = int32(v)*3 + int32(far[i])
	}
}

// chromaRows is ycbcrToRGB's scratch: a row of each chroma plane at full
// resolution, and a row of column sums; kept by an ImageReader from image
// to image.
type chromaRows struct {
	cb, cr []byte
	sums   []int32
}

// fitRGB returns m resized to w×h over its own pixel buffer when that
// holds w×h pixels, else a new image.
func fitRGB(m *RGB, w, h int) *RGB {
	if m == nil || cap(m.Pix) < 3*w*h {
		return NewRGB(w, h)
	}
	m.W, m.H, m.Pix = w, h, m.Pix[:3*w*h]
	return m
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
