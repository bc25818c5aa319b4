package data

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestResizeKernelsMatchLoops: the AVX2 resampling kernels give the Go
// loops' bytes, down and up, on crops touching every edge of the image
// (where the horizontal kernel stops short of the row's last pixel), on
// widths whose rows are not a multiple of eight bytes and narrower than
// eight, and on noise, whose sums reach both ends of clip8's range.
func TestResizeKernelsMatchLoops(t *testing.T) {
	if !hasResizeKernels() {
		t.Skip("no AVX2 resampling kernels on this CPU or build (purego): both runs would be the Go loops")
	}
	rng := rand.New(rand.NewPCG(7, 11))
	src := NewRGB(97, 83)
	for i := range src.Pix {
		src.Pix[i] = byte(rng.Uint32())
	}
	for _, c := range []struct {
		left, top, cw, ch int // the crop
		w, h              int // the output
	}{
		{0, 0, 97, 83, 24, 24},   // the whole image down: taps reach both edges
		{0, 0, 97, 83, 224, 224}, // up
		{13, 7, 60, 50, 17, 9},   // inside, rows of 51 bytes
		{50, 40, 47, 43, 7, 5},   // the bottom right corner, rows under 8 bytes
		{0, 30, 97, 1, 33, 2},    // one row
		{96, 0, 1, 83, 3, 40},    // one column
		{1, 1, 95, 81, 95, 40},   // the width kept: the vertical pass alone
		{2, 3, 90, 70, 31, 70},   // the height kept: the horizontal pass alone
		{0, 0, 97, 83, 1, 1},
		{5, 5, 64, 64, 8, 8},
	} {
		t.Run(fmt.Sprintf("%d,%d+%dx%d→%dx%d", c.left, c.top, c.cw, c.ch, c.w, c.h), func(t *testing.T) {
			loops, vector := NewRGB(c.w, c.h), guarded(c.w, c.h)
			(&resizeScratch{loops: true}).resizeInto(loops, src, c.left, c.top, c.cw, c.ch)
			(&resizeScratch{}).resizeInto(vector, src, c.left, c.top, c.cw, c.ch)
			for i, v := range vector.Pix[len(vector.Pix):cap(vector.Pix)] {
				if v != guardByte {
					t.Fatalf("the kernels wrote %d bytes past the image's end", i+1)
				}
			}
			if !bytes.Equal(loops.Pix, vector.Pix) {
				for i := range loops.Pix {
					if loops.Pix[i] != vector.Pix[i] {
						t.Fatalf("byte %d (pixel %d, channel %d): kernels %d, loops %d", i, i/3, i%3, vector.Pix[i], loops.Pix[i])
					}
				}
			}
		})
	}
}

// TestResizeAllocatesNothing: once its buffers have grown to a crop's
// size, a worker's resampling of that crop or a smaller one allocates
// nothing (the passes' weights included), with the kernels and with the
// loops.
func TestResizeAllocatesNothing(t *testing.T) {
	src := NewRGB(500, 375)
	dst := NewRGB(224, 224)
	for _, loops := range []bool{false, true} {
		s := resizeScratch{loops: loops}
		s.resizeInto(dst, src, 10, 20, 400, 300) // the largest crop first
		crops := [][4]int{{0, 0, 300, 200}, {10, 20, 400, 300}, {100, 50, 224, 224}}
		i := 0
		if n := testing.AllocsPerRun(30, func() {
			c := crops[i%len(crops)]
			s.resizeInto(dst, src, c[0], c[1], c[2], c[3])
			i++
		}); n != 0 {
			t.Errorf("loops %v: %v allocations a resize, want 0", loops, n)
		}
	}
}

// guarded returns a w×h image whose pixels are followed, within their
// slice's capacity, by guard bytes.
func guarded(w, h int) *RGB {
	buf := bytes.Repeat([]byte{guardByte}, 3*w*h+32)
	clear(buf[:3*w*h])
	return &RGB{W: w, H: h, Pix: buf[:3*w*h]}
}

// guardByte marks the bytes past a guarded image.
const guardByte = 0xA5

// BenchmarkResize times RandomResizedCrop's resampling as the image
// pipeline runs it: a 400×300 crop of a 500×375 image to 224×224, with
// the Go loops and with the AVX2 kernels where they run.
//
//	go test ./train/data -run '^$' -bench Resize -count 6
func BenchmarkResize(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := NewRGB(500, 375)
	for i := range src.Pix {
		src.Pix[i] = byte(rng.Uint32())
	}
	for _, loops := range []bool{true, false} {
		name := "kernels"
		if loops {
			name = "loops"
		}
		b.Run(name, func(b *testing.B) {
			if !loops && !hasResizeKernels() {
				b.Skip("no AVX2 resampling kernels on this CPU or build")
			}
			s := resizeScratch{loops: loops}
			dst := NewRGB(224, 224)
			for b.Loop() {
				s.resizeInto(dst, src, 50, 40, 400, 300)
			}
		})
	}
}
