package data

import "math"

// RGB is an 8-bit image with interleaved red, green and blue samples, row
// by row: Pix[3·(y·W+x)+c].
type RGB struct {
	W, H int
	Pix  []byte
}

// NewRGB returns a black w×h image.
func NewRGB(w, h int) *RGB { return &RGB{W: w, H: h, Pix: make([]byte, 3*w*h)} }

// Crop returns the w×h part of m whose top left corner is (x, y), which
// must lie inside m.
func (m *RGB) Crop(x, y, w, h int) *RGB {
	out := NewRGB(w, h)
	for r := range h {
		copy(out.Pix[3*r*w:3*(r+1)*w], m.Pix[3*((y+r)*m.W+x):3*((y+r)*m.W+x+w)])
	}
	return out
}

// Resize scales m to w×h as Pillow's Image.resize with BILINEAR does (and
// so torchvision's Resize on PIL images): a triangle filter whose support
// widens with the reduction (antialiasing), applied horizontally, then
// vertically, in 8-bit fixed point with Pillow's rounding, so that the
// result is Pillow's to the byte.
func (m *RGB) Resize(w, h int) *RGB {
	out := NewRGB(w, h)
	var s resizeScratch
	s.resizeInto(out, m, 0, 0, m.W, m.H)
	return out
}

// resizeScratch holds the buffers of resizeInto, reused between calls.
type resizeScratch struct {
	between []byte  // the horizontal pass's result
	acc     []int32 // the vertical pass's sums for one row
	h, v    filter  // the passes' weights
	// loops makes the passes run their Go loops even where the vector
	// kernels (resize_amd64.s) would run, the same bytes: for tests.
	loops bool
}

// kernels reports whether the passes run the vector kernels.
func (s *resizeScratch) kernels() bool { return hasResizeKernels() && !s.loops }

// resizeInto scales the cw×ch part of m whose top left corner is (left,
// top) to dst's size, as m.Crop(left, top, cw, ch).Resize(dst.W, dst.H)
// would, without the copies.
func (s *resizeScratch) resizeInto(dst, m *RGB, left, top, cw, ch int) {
	src := view{pix: m.Pix[3*(top*m.W+left):], stride: 3 * m.W, w: cw, h: ch}
	if dst.W != cw {
		n := 3 * dst.W * ch
		s.between = grown(s.between, n)
		mid := view{pix: s.between, stride: 3 * dst.W, w: dst.W, h: ch}
		if dst.H == ch {
			mid.pix = dst.Pix
		}
		s.horizontalPass(mid, src)
		src = mid
	}
	if dst.H != ch {
		s.verticalPass(view{pix: dst.Pix, stride: 3 * dst.W, w: dst.W, h: dst.H}, src)
	} else if dst.W == cw {
		for y := range ch {
			copy(dst.Pix[3*y*dst.W:3*(y+1)*dst.W], src.pix[y*src.stride:y*src.stride+3*cw])
		}
	}
}

// view is a w×h view of RGB pixels, rows stride bytes apart.
type view struct {
	pix    []byte
	stride int
	w, h   int
}

// precisionBits is Pillow's fixed-point precision for 8-bit resampling;
// sums fit in 32 bits, as Pillow's do.
const precisionBits = 32 - 8 - 2

// horizontalPass scales src's rows to dst's width; with the kernels, each
// row's pixels by horizontalPixels (AVX2) up to the first whose taps reach
// the row's last input pixel (the kernel reads a byte past a pixel's last
// tap), the rest by the loop. Resampling was half of the image pipeline's
// time on Zen 3 (bench data, one worker) before the kernels.
func (s *resizeScratch) horizontalPass(dst, src view) {
	bounds, coeffs, ksize := s.h.weights(src.w, dst.w)
	const half = int32(1) << (precisionBits - 1)
	fast := 0 // pixels [0, fast) of each row go to the kernel
	for s.kernels() && fast < dst.w && bounds[2*fast+1] > 0 && bounds[2*fast]+bounds[2*fast+1] < src.w {
		fast++
	}
	for y := range src.h {
		row := src.pix[y*src.stride : y*src.stride+3*src.w]
		out := dst.pix[y*dst.stride : y*dst.stride+3*dst.w]
		if fast > 0 {
			horizontalPixels(&out[0], &row[0], &bounds[0], &coeffs[0], ksize, fast)
		}
		for o := fast; o < dst.w; o++ {
			lo, cnt := bounds[2*o], bounds[2*o+1]
			k := coeffs[o*ksize : o*ksize+cnt]
			p := row[3*lo : 3*(lo+cnt)]
			s0, s1, s2 := half, half, half
			for i, kk := range k {
				q := p[3*i : 3*i+3]
				s0 += int32(q[0]) * kk
				s1 += int32(q[1]) * kk
				s2 += int32(q[2]) * kk
			}
			o3 := out[3*o : 3*o+3]
			o3[0], o3[1], o3[2] = clip8(s0), clip8(s1), clip8(s2)
		}
	}
}

// verticalPass scales src's columns to dst's height, a row at a time;
// with the kernels, each row's bytes eight at a time by verticalRows (AVX2),
// the last n mod 8 by the loop.
func (s *resizeScratch) verticalPass(dst, src view) {
	bounds, coeffs, ksize := s.v.weights(src.h, dst.h)
	n := 3 * src.w
	s.acc = grown(s.acc, n)
	fast := 0 // bytes [0, fast) of each row go to the kernel
	if s.kernels() {
		fast = n &^ 7
	}
	for o := range dst.h {
		lo, cnt := bounds[2*o], bounds[2*o+1]
		out := dst.pix[o*dst.stride : o*dst.stride+n]
		k := coeffs[o*ksize : o*ksize+cnt]
		from := 0
		if fast > 0 && cnt > 0 {
			verticalRows(&out[0], &src.pix[lo*src.stride], src.stride, &k[0], cnt, fast)
			from = fast
		}
		acc := s.acc[from:n]
		for j := range acc {
			acc[j] = 1 << (precisionBits - 1)
		}
		for i, kk := range k {
			row := src.pix[(lo+i)*src.stride+from : (lo+i)*src.stride+n]
			for j, v := range row {
				acc[j] += int32(v) * kk
			}
		}
		for j, v := range acc {
			out[from+j] = clip8(v)
		}
	}
}

func clip8(ss int32) byte { return clamp8(ss >> precisionBits) }

// clamp8 is v limited to 0–255.
func clamp8(v int32) byte {
	if uint32(v) > 255 {
		return byte(^(v >> 31)) // 0 below, 255 above
	}
	return byte(v)
}

// filter holds one pass's weights (filter.weights), its buffers reused
// from one image to the next.
type filter struct {
	bounds []int
	coeffs []int32
	k      []float64
}

// weights computes, for scaling in pixels to out, each output pixel's
// first input pixel and count (bounds[2o], bounds[2o+1]) and its
// fixed-point weights (coeffs[o·ksize:], zero past the count), as
// Pillow's precompute_coeffs.
func (f *filter) weights(in, out int) (bounds []int, coeffs []int32, ksize int) {
	scale := float64(in) / float64(out)
	filterscale := max(scale, 1)
	support := 1.0 * filterscale // the bilinear filter's support is 1
	ksize = int(math.Ceil(support))*2 + 1
	f.bounds = grown(f.bounds, 2*out)
	f.coeffs = grown(f.coeffs, out*ksize)
	f.k = grown(f.k, ksize)
	bounds, coeffs, k := f.bounds, f.coeffs, f.k
	clear(coeffs)
	for o := range out {
		center := (float64(o) + 0.5) * scale
		ss := 1 / filterscale
		xmin := max(int(center-support+0.5), 0)
		xmax := min(int(center+support+0.5), in) - xmin
		ww := 0.0
		for x := range xmax {
			w := triangle((float64(x+xmin) - center + 0.5) * ss)
			k[x] = w
			ww += w
		}
		for x := range xmax {
			if ww != 0 {
				k[x] /= ww
			}
			// Pillow rounds half away from zero.
			if k[x] < 0 {
				coeffs[o*ksize+x] = int32(-0.5 + k[x]*(1<<precisionBits))
			} else {
				coeffs[o*ksize+x] = int32(0.5 + k[x]*(1<<precisionBits))
			}
		}
		bounds[2*o], bounds[2*o+1] = xmin, xmax
	}
	return bounds, coeffs, ksize
}

// grown returns b resliced to n elements, reallocated when short.
func grown[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

func triangle(x float64) float64 {
	x = math.Abs(x)
	if x < 1 {
		return 1 - x
	}
	return 0
}

// ResizeShort scales m so that its shorter side is size, the longer one
// in proportion (truncated), as torchvision's Resize(size).
func (m *RGB) ResizeShort(size int) *RGB {
	if m.W <= m.H {
		return m.Resize(size, int(float64(size)*float64(m.H)/float64(m.W)))
	}
	return m.Resize(int(float64(size)*float64(m.W)/float64(m.H)), size)
}

// CenterCrop cuts the size×size middle of m (rounded as Python's round,
// to even, as torchvision's CenterCrop); m must be at least that large.
func (m *RGB) CenterCrop(size int) *RGB {
	top := int(math.RoundToEven(float64(m.H-size) / 2))
	left := int(math.RoundToEven(float64(m.W-size) / 2))
	return m.Crop(left, top, size, size)
}
