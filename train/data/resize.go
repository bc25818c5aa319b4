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
	out := m
	if w != m.W {
		out = resample(out, w, true)
	}
	if h != m.H {
		out = resample(out, h, false)
	}
	if out == m {
		out = &RGB{W: m.W, H: m.H, Pix: append([]byte(nil), m.Pix...)}
	}
	return out
}

// precisionBits is Pillow's fixed-point precision for 8-bit resampling.
const precisionBits = 32 - 8 - 2

// resample scales m along one axis (horizontal: its width) to n pixels.
func resample(m *RGB, n int, horizontal bool) *RGB {
	in := m.H
	if horizontal {
		in = m.W
	}
	bounds, coeffs, ksize := filterCoeffs(in, n)
	var out *RGB
	if horizontal {
		out = NewRGB(n, m.H)
	} else {
		out = NewRGB(m.W, n)
	}
	for o := range n {
		lo, cnt := bounds[2*o], bounds[2*o+1]
		k := coeffs[o*ksize : o*ksize+cnt]
		if horizontal {
			for y := range m.H {
				row := m.Pix[3*y*m.W:]
				for c := range 3 {
					ss := int64(1) << (precisionBits - 1)
					for i, kk := range k {
						ss += int64(row[3*(lo+i)+c]) * int64(kk)
					}
					out.Pix[3*(y*n+o)+c] = clip8(ss)
				}
			}
			continue
		}
		for x := range m.W {
			for c := range 3 {
				ss := int64(1) << (precisionBits - 1)
				for i, kk := range k {
					ss += int64(m.Pix[3*((lo+i)*m.W+x)+c]) * int64(kk)
				}
				out.Pix[3*(o*m.W+x)+c] = clip8(ss)
			}
		}
	}
	return out
}

func clip8(ss int64) byte { return clampByte(ss >> precisionBits) }

// clampByte is v limited to 0–255.
func clampByte(v int64) byte {
	switch {
	case v < 0:
		return 0
	case v > 255:
		return 255
	}
	return byte(v)
}

// filterCoeffs computes, for scaling in pixels to out, each output
// pixel's first input pixel and count (bounds[2o], bounds[2o+1]) and its
// fixed-point weights (coeffs[o·ksize:]), as Pillow's precompute_coeffs.
func filterCoeffs(in, out int) (bounds []int, coeffs []int32, ksize int) {
	scale := float64(in) / float64(out)
	filterscale := max(scale, 1)
	support := 1.0 * filterscale // the bilinear filter's support is 1
	ksize = int(math.Ceil(support))*2 + 1
	bounds = make([]int, 2*out)
	coeffs = make([]int32, out*ksize)
	k := make([]float64, ksize)
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
