package data

import (
	"bytes"
	"image"
	"image/jpeg"
	"math/rand/v2"
	"testing"
)

// TestClamp8: the clamp of the colour conversion's sums (a sample plus a
// table entry: −227 to 480) and of the resampling's (clip8) is min(max(v,
// 0), 255) on every value around that range and at int32's ends.
func TestClamp8(t *testing.T) {
	for v := int32(-1024); v <= 1024; v++ {
		if got, want := clamp8(v), byte(min(max(v, 0), 255)); got != want {
			t.Fatalf("clamp8(%d) = %d, want %d", v, got, want)
		}
	}
	for _, v := range []int32{-1 << 31, 1<<31 - 1} {
		if got, want := clamp8(v), byte(min(max(v, 0), 255)); got != want {
			t.Fatalf("clamp8(%d) = %d, want %d", v, got, want)
		}
	}
}

// TestFancyRow: libjpeg's horizontal fancy upsampling, as fancyRow runs
// it with its edges outside the loop, against its definition sample by
// sample, for both cases' constants (h2v1, h2v2), odd and even widths.
func TestFancyRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, c := range []struct {
		shift              uint
		bias0, bias1, edge int32
		max                int32 // a column sum's largest value
	}{{2, 1, 2, 4, 255}, {4, 8, 7, 4, 4 * 255}} {
		for w := 1; w <= 9; w++ {
			n := (w + 1) / 2
			sums := make([]int32, n)
			for i := range sums {
				sums[i] = rng.Int32N(c.max + 1)
			}
			got := make([]byte, w)
			fancyRow(sums, got, c.shift, c.bias0, c.bias1, c.edge)
			for j := range w {
				i := j / 2
				var v int32
				switch {
				case j == 0 || j == 2*n-1:
					v = sums[i] * c.edge
				case j%2 == 0:
					v = sums[i]*3 + sums[i-1]
				default:
					v = sums[i]*3 + sums[i+1]
				}
				bias := c.bias0
				if j%2 == 1 {
					bias = c.bias1
				}
				if want := byte((v + bias) >> c.shift); got[j] != want {
					t.Fatalf("shift %d, width %d, sums %v: sample %d is %d, want %d", c.shift, w, sums, j, got[j], want)
				}
			}
		}
	}
}

// TestYCbCrToRGB: ycbcrToRGB, upsampling a row at a time into reused
// buffers, gives libjpeg's pixels — its fancy upsampling (a triangle
// filter: ¾ of the nearer chroma sample, ¼ of the farther, the edges
// repeated, with libjpeg's biases) and its fixed-point conversion —
// computed here sample by sample from their definitions, for 4:4:4,
// 4:2:2 and 4:2:0, odd and even sizes, strides wider than the planes;
// into a larger image's buffer (reused, stale bytes in it) and into a
// new one; and once warm it allocates nothing.
func TestYCbCrToRGB(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var s chromaRows
	reused := NewRGB(9, 9)
	for _, ratio := range []image.YCbCrSubsampleRatio{image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio422, image.YCbCrSubsampleRatio420} {
		for _, size := range [][2]int{{1, 1}, {2, 1}, {1, 2}, {3, 3}, {4, 2}, {5, 7}, {8, 6}, {9, 9}} {
			w, h := size[0], size[1]
			m := image.NewYCbCr(image.Rect(0, 0, w+3, h), ratio) // strides wider than w
			m.Rect = image.Rect(0, 0, w, h)
			for _, p := range [][]byte{m.Y, m.Cb, m.Cr} {
				for i := range p {
					p[i] = byte(rng.IntN(256))
				}
			}
			want := libjpegRGB(m)
			for _, into := range []*RGB{reused, nil} {
				for i := range reused.Pix {
					reused.Pix[i] = 0xA5
				}
				got := ycbcrToRGB(m, into, &s)
				if got.W != w || got.H != h || !bytes.Equal(got.Pix, want) {
					t.Fatalf("%v, %d×%d, into %v: got %d×%d %v, want %v", ratio, w, h, into != nil, got.W, got.H, got.Pix, want)
				}
				if into != nil && &got.Pix[0] != &reused.Pix[0] {
					t.Fatalf("%v, %d×%d: a new buffer where the reused one holds the image", ratio, w, h)
				}
			}
			reused = NewRGB(9, 9)
			if allocs := testing.AllocsPerRun(5, func() { ycbcrToRGB(m, reused, &s) }); allocs != 0 {
				t.Errorf("%v, %d×%d: a warm conversion allocates %v times", ratio, w, h, allocs)
			}
		}
	}
	if got := ycbcrToRGB(image.NewYCbCr(image.Rect(0, 0, 4, 4), image.YCbCrSubsampleRatio411), nil, &s); got != nil {
		t.Errorf("4:1:1 converted here (%d×%d); it is left to Go's conversion", got.W, got.H)
	}
}

// libjpegRGB is libjpeg's YCbCr → RGB of m by definition: each chroma
// sample upsampled on its own (jdsample.c's h2v1 and h2v2 fancy
// upsampling), then converted with the tables (jdcolor.c).
func libjpegRGB(m *image.YCbCr) []byte {
	w, h := m.Rect.Dx(), m.Rect.Dy()
	cw, ch := (w+1)/2, (h+1)/2
	if m.SubsampleRatio == image.YCbCrSubsampleRatio422 {
		ch = h
	}
	chroma := func(p []byte, x, y int) byte {
		at := func(cx, cy int) int32 {
			return int32(p[max(0, min(cy, ch-1))*m.CStride+max(0, min(cx, cw-1))])
		}
		switch m.SubsampleRatio {
		case image.YCbCrSubsampleRatio422:
			cx, other := x/2, x/2-1
			bias := int32(1)
			if x%2 == 1 {
				other, bias = x/2+1, 2
			}
			return byte((3*at(cx, y) + at(other, y) + bias) >> 2)
		case image.YCbCrSubsampleRatio420:
			rows := func(cx int) int32 {
				far := y/2 - 1
				if y%2 == 1 {
					far = y/2 + 1
				}
				return 3*at(cx, y/2) + at(cx, far)
			}
			cx, other := x/2, x/2-1
			bias := int32(8)
			if x%2 == 1 {
				other, bias = x/2+1, 7
			}
			return byte((3*rows(cx) + rows(other) + bias) >> 4)
		}
		return p[y*m.CStride+x]
	}
	out := make([]byte, 0, 3*w*h)
	for y := range h {
		for x := range w {
			yy := int32(m.Y[y*m.YStride+x])
			cb, cr := chroma(m.Cb, x, y), chroma(m.Cr, x, y)
			out = append(out, clamp8(yy+crR[cr]), clamp8(yy+(cbG[cb]+crG[cr])>>scaleBits), clamp8(yy+cbB[cb]))
		}
	}
	return out
}

// BenchmarkDecodeGo decodes a 500×375 photo-sized JPEG (4:2:0, as
// cameras and ImageNet's files have it) with Go's decoder and libjpeg's
// colour conversion, into the image a loader worker reuses.
//
//	go test ./train/data -run '^$' -bench DecodeGo -count 6
func BenchmarkDecodeGo(b *testing.B) {
	src := image.NewRGBA(image.Rect(0, 0, 500, 375))
	rng := rand.New(rand.NewPCG(1, 2))
	for y := range 375 {
		for x := range 500 {
			o := src.PixOffset(x, y)
			src.Pix[o], src.Pix[o+1], src.Pix[o+2], src.Pix[o+3] = byte(x/2+y/3), byte(255-x/2), byte(y/2+rng.IntN(16)), 255
		}
	}
	var file bytes.Buffer
	if err := jpeg.Encode(&file, src, &jpeg.Options{Quality: 90}); err != nil {
		b.Fatal(err)
	}
	r := &ImageReader{why: "the benchmark asks"}
	var m *RGB
	b.ReportAllocs()
	b.SetBytes(int64(file.Len()))
	for b.Loop() {
		var err error
		if m, err = r.decode(file.Bytes(), "photo.jpg", m); err != nil {
			b.Fatal(err)
		}
	}
}
