package data

import (
	"fmt"
	"math/rand/v2"
)

// Transform turns an image's bytes into the network's input: optional
// random crop with zero padding (torchvision's RandomCrop(size, padding)),
// optional random horizontal flip, then per-channel normalisation
// (ToTensor + Normalize). The random choices for an image depend only on
// Seed, the epoch and the image's index in the dataset, so augmentation is
// reproducible whatever the batch size, number of ranks or loader timing.
type Transform struct {
	Mean, Std []float32
	// Pad is the random crop's zero padding on each side (0: no crop).
	Pad int
	// Flip mirrors an image left–right with probability ½.
	Flip bool
	// ResizedCrop, for images read from files (Dataset.Files), scales a
	// random part of each image to the dataset's image size, as
	// torchvision's RandomResizedCrop (area 8–100%, aspect ratio 3/4–4/3,
	// bilinear with antialiasing). Without it such images are taken as
	// evaluation takes them (ReadEvalImage).
	ResizedCrop bool
	Seed        uint64
}

// Augment reports whether the transform is random.
func (t Transform) Augment() bool { return t.Pad > 0 || t.Flip || t.ResizedCrop }

// CIFARAugmentation is seed 000's training transform for CIFAR-10: random
// crop 32 with padding 4 and random horizontal flip.
func CIFARAugmentation(d *Dataset, seed uint64) Transform {
	return Transform{Mean: d.Mean, Std: d.Std, Pad: 4, Flip: true, Seed: seed}
}

// ImageNetAugmentation is torchvision's ImageNet training transform for
// images read from files: RandomResizedCrop to the dataset's image size,
// RandomHorizontalFlip, Normalize.
func ImageNetAugmentation(d *Dataset, seed uint64) Transform {
	return Transform{Mean: d.Mean, Std: d.Std, ResizedCrop: true, Flip: true, Seed: seed}
}

// Plain normalises without augmentation.
func Plain(d *Dataset) Transform { return Transform{Mean: d.Mean, Std: d.Std} }

// lut is the byte → normalised value table of each channel.
type lut [][256]float32

func (t Transform) table(channels int) lut {
	l := make(lut, channels)
	for c := range l {
		mean, std := float32(0), float32(1)
		if c < len(t.Mean) {
			mean = t.Mean[c]
		}
		if c < len(t.Std) && t.Std[c] != 0 {
			std = t.Std[c]
		}
		for v := range 256 {
			l[c][v] = (float32(v)/255 - mean) / std
		}
	}
	return l
}

// mix is splitmix64's finaliser, the augmentation's random source.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// draw is image index's random word in epoch.
func (t Transform) draw(epoch, index int) uint64 {
	return mix(t.Seed ^ mix(uint64(epoch)<<32^uint64(index)+0x9e3779b97f4a7c15))
}

// choices returns image index's crop offsets in [0, 2·Pad] and flip.
func (t Transform) choices(epoch, index int) (dy, dx int, flip bool) {
	r := t.draw(epoch, index)
	if t.Pad > 0 {
		span := uint64(2*t.Pad + 1)
		dy, dx = int(r%span), int((r/span)%span)
	}
	return dy, dx, t.Flip && (r>>63) == 1
}

// apply writes image index's transformed pixels ([C, H, W] bytes) to out.
func (t Transform) apply(tab lut, img []byte, shape [3]int, out []float32, epoch, index int) {
	c, h, w := shape[0], shape[1], shape[2]
	if !t.Augment() {
		for ch := range c {
			tb := &tab[ch]
			plane := img[ch*h*w : (ch+1)*h*w]
			o := out[ch*h*w : (ch+1)*h*w]
			for i, v := range plane {
				o[i] = tb[v]
			}
		}
		return
	}
	dy, dx, flip := t.choices(epoch, index)
	// Output pixel (y, x) reads padded pixel (y+dy, x+dx), i.e. source
	// pixel (y+dy−Pad, x+dx−Pad), zero outside the image; flipping mirrors
	// the cropped result.
	for ch := range c {
		tb := &tab[ch]
		zero := tb[0]
		plane := img[ch*h*w : (ch+1)*h*w]
		for y := range h {
			row := out[(ch*h+y)*w : (ch*h+y+1)*w]
			sy := y + dy - t.Pad
			if sy < 0 || sy >= h {
				for x := range row {
					row[x] = zero
				}
				continue
			}
			src := plane[sy*w : (sy+1)*w]
			for x := range row {
				sx := x + dx - t.Pad
				if flip {
					sx = (w - 1 - x) + dx - t.Pad
				}
				if sx < 0 || sx >= w {
					row[x] = zero
				} else {
					row[x] = tb[src[sx]]
				}
			}
		}
	}
}

// fileWorker is what one goroutine needs to transform images read from
// files, reused from image to image.
type fileWorker struct {
	reader  *ImageReader
	decoded *RGB // the last image decoded
	out     *RGB // the transformed image
	resize  resizeScratch
}

// applyFile reads the image file at path and writes its transformed
// pixels, [C, H, W] for shape, to out: a random resized crop and flip, or
// evaluation's resize and center crop (H×W square).
func (t Transform) applyFile(wk *fileWorker, tab lut, path string, shape [3]int, out []float32, epoch, index int) error {
	m, err := wk.reader.readInto(path, wk.decoded)
	if err != nil {
		return err
	}
	return t.applyDecoded(wk, tab, m, path, shape, out, epoch, index)
}

// applyBytes is applyFile for an image file's contents, read from where.
func (t Transform) applyBytes(wk *fileWorker, tab lut, b []byte, where string, shape [3]int, out []float32, epoch, index int) error {
	m, err := wk.reader.decode(b, where, wk.decoded)
	if err != nil {
		return err
	}
	return t.applyDecoded(wk, tab, m, where, shape, out, epoch, index)
}

// applyDecoded transforms decoded image m of sample index from path.
func (t Transform) applyDecoded(wk *fileWorker, tab lut, m *RGB, path string, shape [3]int, out []float32, epoch, index int) (err error) {
	wk.decoded = m
	h, w := shape[1], shape[2]
	if wk.out == nil || wk.out.W != w || wk.out.H != h {
		wk.out = NewRGB(w, h)
	}
	draw := t.draw(epoch, index)
	if t.ResizedCrop {
		rng := rand.New(rand.NewPCG(draw, t.Seed))
		left, top, cw, ch := randomResizedCrop(m.W, m.H, rng)
		wk.resize.resizeInto(wk.out, m, left, top, cw, ch)
		m = wk.out
	} else if m, err = EvalTransform(m, h*8/7, h); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	flip := t.Flip && draw>>63 == 1
	n := h * w
	r, g, b := out[:n], out[n:2*n], out[2*n:3*n]
	tr, tg, tb := &tab[0], &tab[1], &tab[2]
	for y := range h {
		src := m.Pix[3*y*w : 3*(y+1)*w]
		or, og, ob := r[y*w:(y+1)*w], g[y*w:(y+1)*w], b[y*w:(y+1)*w]
		for x := range w {
			sx := x
			if flip {
				sx = w - 1 - x
			}
			p := src[3*sx : 3*sx+3]
			or[x], og[x], ob[x] = tr[p[0]], tg[p[1]], tb[p[2]]
		}
	}
	return nil
}
