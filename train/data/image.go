package data

import (
	"bytes"
	"fmt"
	"image"
	_ "image/jpeg" // decoders for DecodeImageFile
	_ "image/png"
	"io"
	"math"
	"os"
)

// MaxImagePixels is the most pixels an image may have: larger ones are
// refused by every decoder here, and gendata does not write them.
//
// A file of a few bytes can declare an image whose pixels fill any
// memory: Go's decoders allocate the whole image from the dimensions in
// its header before reading any pixel, and a 69-byte PNG declaring
// 100,000 × 100,000 pixels ended the process ("fatal error: runtime: out
// of memory"), which no error handling or --skip-bad-images can catch.
// So every decode checks the declared size first, against Pillow's
// bound: it refuses images of more than twice its MAX_IMAGE_PIXELS
// (DecompressionBombError), which torchvision's users meet as well.
const MaxImagePixels = 2 * 89_478_485

// maxImageFileBytes bounds an image file read whole into memory: more
// than any image of MaxImagePixels takes stored uncompressed (a 16-bit
// RGBA PNG: 8 bytes a pixel, 1.43 GB).
const maxImageFileBytes = 2 << 30

// checkImageSize refuses the declared dimensions of an image that is
// empty or has more than limit pixels (MaxImagePixels but in tests).
func checkImageSize(w, h, limit int) error {
	if w < 1 || h < 1 {
		return fmt.Errorf("%d×%d pixels: an empty image, or a header cut short", w, h)
	}
	if int64(w)*int64(h) > int64(limit) {
		return fmt.Errorf("%d×%d pixels: more than the %d an image may have (Pillow's decompression-bomb limit)", w, h, limit)
	}
	return nil
}

// checkImageFileSize refuses an image file of more than maxImageFileBytes.
func checkImageFileSize(n int64) error {
	if n > maxImageFileBytes {
		return fmt.Errorf("%d bytes: more than the %d an image file may have", n, int64(maxImageFileBytes))
	}
	return nil
}

// DecodeImageFile reads a PNG or JPEG file.
func DecodeImageFile(path string) (image.Image, error) {
	f, st, err := openImageFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() == 0 {
		return nil, emptyImageFile(path)
	}
	img, err := decodeBounded(f, MaxImagePixels)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (PNG and JPEG are supported)", path, err)
	}
	return img, nil
}

// emptyImageFile is the error for an image file of 0 bytes at where.
func emptyImageFile(where string) error {
	return fmt.Errorf("%s: an empty file (0 bytes), not an image", where)
}

// checkImageHeader checks that b, the contents of the image file at
// where, starts as an image the loaders decode would — a JPEG or PNG
// header, its size within MaxImagePixels — without decoding its pixels
// (a file cut short after its header passes).
func checkImageHeader(b []byte, where string) error {
	if len(b) == 0 {
		return emptyImageFile(where)
	}
	if err := checkHeader(bytes.NewReader(b), MaxImagePixels); err != nil {
		return fmt.Errorf("%s: not an image the loaders decode (JPEG or PNG): %w", where, err)
	}
	return nil
}

// checkHeader reads the image header r starts with and checks the size it
// declares against limit (checkImageSize).
func checkHeader(r io.Reader, limit int) error {
	cfg, _, err := image.DecodeConfig(r)
	if err != nil {
		return err
	}
	return checkImageSize(cfg.Width, cfg.Height, limit)
}

// decodeBounded decodes the image r holds with Go's decoders once the size
// its header declares passed checkHeader against limit.
func decodeBounded(r io.ReadSeeker, limit int) (image.Image, error) {
	if err := checkHeader(r, limit); err != nil {
		return nil, err
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	img, _, err := image.Decode(r)
	return img, err
}

// openImageFile opens the image file at path, refusing a directory
// (whose read would fail with "is a directory", or decode as "unknown
// format").
func openImageFile(path string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err == nil && st.IsDir() {
		err = fmt.Errorf("%s is a directory, not an image file", path)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// ImageBytes converts img to a dataset image of the given [C, H, W]: one
// channel as luminance (ITU-R 601, as PIL's convert("L")), three as RGB,
// resized when its size differs (area averaging when shrinking, bilinear
// when enlarging).
func ImageBytes(img image.Image, shape [3]int) ([]byte, error) {
	c, h, w := shape[0], shape[1], shape[2]
	if c != 1 && c != 3 {
		return nil, fmt.Errorf("images with %d channels: want 1 or 3", c)
	}
	b := img.Bounds()
	sh, sw := b.Dy(), b.Dx()
	if sh == 0 || sw == 0 {
		return nil, fmt.Errorf("empty image")
	}
	// Source planes as floats in [0, 255].
	src := make([]float64, c*sh*sw)
	for y := range sh {
		for x := range sw {
			r, g, bl, _ := img.At(b.Min.X+x, b.Min.Y+y).RGBA()
			rf, gf, bf := float64(r>>8), float64(g>>8), float64(bl>>8)
			if c == 1 {
				src[y*sw+x] = (299*rf + 587*gf + 114*bf) / 1000
			} else {
				src[y*sw+x], src[(sh+y)*sw+x], src[(2*sh+y)*sw+x] = rf, gf, bf
			}
		}
	}
	out := make([]byte, c*h*w)
	for ch := range c {
		plane := resize(src[ch*sh*sw:(ch+1)*sh*sw], sh, sw, h, w)
		for i, v := range plane {
			out[ch*h*w+i] = uint8(math.Round(min(255, max(0, v))))
		}
	}
	return out, nil
}

// resize scales an sh×sw plane to h×w.
func resize(src []float64, sh, sw, h, w int) []float64 {
	if sh == h && sw == w {
		return src
	}
	out := make([]float64, h*w)
	for y := range h {
		y0, y1 := float64(y)*float64(sh)/float64(h), float64(y+1)*float64(sh)/float64(h)
		for x := range w {
			x0, x1 := float64(x)*float64(sw)/float64(w), float64(x+1)*float64(sw)/float64(w)
			out[y*w+x] = sample(src, sh, sw, y0, y1, x0, x1)
		}
	}
	return out
}

// sample returns the average of src over the box [y0,y1)×[x0,x1) in
// pixel units when the box covers at least a pixel each way, else the
// bilinear interpolation at the box's centre.
func sample(src []float64, sh, sw int, y0, y1, x0, x1 float64) float64 {
	if y1-y0 >= 1 && x1-x0 >= 1 {
		var sum, weight float64
		for sy := int(y0); sy < int(math.Ceil(y1)) && sy < sh; sy++ {
			wy := math.Min(y1, float64(sy+1)) - math.Max(y0, float64(sy))
			for sx := int(x0); sx < int(math.Ceil(x1)) && sx < sw; sx++ {
				wx := math.Min(x1, float64(sx+1)) - math.Max(x0, float64(sx))
				sum += wy * wx * src[sy*sw+sx]
				weight += wy * wx
			}
		}
		return sum / weight
	}
	cy := min(max((y0+y1)/2-0.5, 0), float64(sh-1))
	cx := min(max((x0+x1)/2-0.5, 0), float64(sw-1))
	iy, ix := int(cy), int(cx)
	iy1, ix1 := min(iy+1, sh-1), min(ix+1, sw-1)
	fy, fx := cy-float64(iy), cx-float64(ix)
	top := src[iy*sw+ix]*(1-fx) + src[iy*sw+ix1]*fx
	bot := src[iy1*sw+ix]*(1-fx) + src[iy1*sw+ix1]*fx
	return top*(1-fy) + bot*fy
}
