package data

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"

	"github.com/gorun/gorun/model/atomicfile"
)

// Synthetic returns n generated images shaped like format's data (1×28×28
// for FormatMNIST, 3×32×32 for FormatCIFAR10, both in 10 classes; 3×224×224
// in 1000 classes for FormatImageNet, which SyntheticImageNet makes). Each class has
// a fixed prototype of a few soft blobs; an image is its class's prototype,
// shifted by up to 3 pixels, scaled in brightness, with pixel noise. The
// classes are learnable but not trivially: a small CNN needs a few hundred
// steps. The same (format, n, seed) gives the same images; train and test
// sets drawn with different seeds share the prototypes.
func Synthetic(format Format, n int, seed uint64) (*Dataset, error) {
	var d *Dataset
	switch format {
	case FormatMNIST:
		d = &Dataset{Name: "synthetic-mnist", Shape: [3]int{1, 28, 28}, Classes: MNISTClasses, Mean: mnistMean, Std: mnistStd}
	case FormatCIFAR10:
		d = newCIFAR()
		d.Name = "synthetic-cifar10"
	case FormatImageNet:
		return SyntheticImageNet(n, seed), nil
	default:
		return nil, fmt.Errorf("synthetic data: unknown format %q (want %s, %s or %s)", format, FormatMNIST, FormatCIFAR10, FormatImageNet)
	}
	c, h, w := d.Shape[0], d.Shape[1], d.Shape[2]
	protos := make([][]float64, len(d.Classes))
	for k := range protos {
		protos[k] = prototype(k, c, h, w)
	}
	d.Images = make([]byte, n*d.ImageSize())
	d.Labels = make([]int32, n)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	for i := range n {
		k := rng.IntN(len(d.Classes))
		d.Labels[i] = int32(k)
		dy, dx := rng.IntN(7)-3, rng.IntN(7)-3
		gain := 0.7 + 0.6*rng.Float64()
		img := d.Image(i)
		for ch := range c {
			for y := range h {
				for x := range w {
					v := 0.0
					if sy, sx := y+dy, x+dx; sy >= 0 && sy < h && sx >= 0 && sx < w {
						v = protos[k][(ch*h+sy)*w+sx]
					}
					v = 255*gain*v + 40*rng.NormFloat64()
					img[(ch*h+y)*w+x] = uint8(min(255, max(0, math.Round(v))))
				}
			}
		}
	}
	return d, nil
}

// prototype draws class k's pattern: three Gaussian blobs with per-channel
// weights, values in [0, 1].
func prototype(k, c, h, w int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(k), 0xc1a55))
	p := make([]float64, c*h*w)
	for range 3 {
		cy, cx := float64(h)*(0.2+0.6*rng.Float64()), float64(w)*(0.2+0.6*rng.Float64())
		sigma := float64(h) * (0.08 + 0.12*rng.Float64())
		for ch := range c {
			amp := 0.4 + 0.6*rng.Float64()
			for y := range h {
				for x := range w {
					r2 := (float64(y)-cy)*(float64(y)-cy) + (float64(x)-cx)*(float64(x)-cx)
					p[(ch*h+y)*w+x] += amp * math.Exp(-r2/(2*sigma*sigma))
				}
			}
		}
	}
	for i, v := range p {
		p[i] = min(v, 1)
	}
	return p
}

// WriteMNIST writes train and test in MNIST's gzipped IDX files
// (train-images-idx3-ubyte.gz, ...) into dir. The images must be 1 channel.
func WriteMNIST(dir string, train, test *Dataset) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, s := range []struct {
		split string
		d     *Dataset
	}{{"train", train}, {"t10k", test}} {
		if s.d.Shape[0] != 1 {
			return fmt.Errorf("MNIST format holds 1-channel images, %s has %d", s.d.Name, s.d.Shape[0])
		}
		images := idxBytes([]int{s.d.Len(), s.d.Shape[1], s.d.Shape[2]}, s.d.Images)
		labels := idxBytes([]int{s.d.Len()}, narrow(s.d.Labels))
		if err := writeGzipFile(filepath.Join(dir, s.split+"-images-idx3-ubyte.gz"), images); err != nil {
			return err
		}
		if err := writeGzipFile(filepath.Join(dir, s.split+"-labels-idx1-ubyte.gz"), labels); err != nil {
			return err
		}
	}
	return nil
}

// idxBytes encodes an unsigned-byte IDX file.
func idxBytes(dims []int, data []byte) []byte {
	b := []byte{0, 0, 0x08, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, uint32(d))
	}
	return append(b, data...)
}

// CIFAR10Files returns the CIFAR-10 binary batch files for train (split
// into batches files as evenly as possible) and test, by file name.
func CIFAR10Files(train, test *Dataset, batches int) (map[string][]byte, error) {
	for _, d := range []*Dataset{train, test} {
		if d.Shape != [3]int{3, 32, 32} {
			return nil, fmt.Errorf("CIFAR-10 format holds 3×32×32 images, %s has %v", d.Name, d.Shape)
		}
	}
	batches = max(1, min(batches, train.Len()))
	files := map[string][]byte{"test_batch.bin": cifarRecords(test, 0, test.Len())}
	for b := range batches {
		lo, hi := b*train.Len()/batches, (b+1)*train.Len()/batches
		files[fmt.Sprintf("data_batch_%d.bin", b+1)] = cifarRecords(train, lo, hi)
	}
	files["batches.meta.txt"] = []byte(strings.Join(CIFAR10Classes, "\n") + "\n")
	return files, nil
}

func cifarRecords(d *Dataset, lo, hi int) []byte {
	b := make([]byte, 0, (hi-lo)*cifarRecord)
	for i := lo; i < hi; i++ {
		b = append(b, byte(d.Labels[i]))
		b = append(b, d.Image(i)...)
	}
	return b
}

// WriteCIFAR10 writes train (in five batch files) and test as CIFAR-10's
// extracted binary version into dir: data_batch_1.bin … data_batch_5.bin,
// test_batch.bin, batches.meta.txt.
func WriteCIFAR10(dir string, train, test *Dataset) error {
	files, err := CIFAR10Files(train, test, 5)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, b := range files {
		if err := writeFileAtomic(filepath.Join(dir, name), b); err != nil {
			return err
		}
	}
	return nil
}

// WriteCIFAR10Archive writes the same files as WriteCIFAR10 into a
// cifar-10-binary.tar.gz-style archive at path (under cifar-10-batches-bin/).
func WriteCIFAR10Archive(path string, train, test *Dataset) error {
	files, err := CIFAR10Files(train, test, 5)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		b := files[name]
		if err := tw.WriteHeader(&tar.Header{Name: cifarSubdir + "/" + name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return writeFileAtomic(path, buf.Bytes())
}

func writeGzipFile(path string, b []byte) error {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return writeFileAtomic(path, buf.Bytes())
}

// writeFileAtomic writes b to a temporary file beside path, syncs it and
// renames it into place, so path never holds a partial file.
func writeFileAtomic(path string, b []byte) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// imageNetSide is the side of SyntheticImageNet's images and imageNetGrid
// that of the coarse prototypes they are drawn from.
const imageNetSide, imageNetGrid = 224, 28

// SyntheticImageNet returns n generated images shaped like ImageNet's
// training crops (3×224×224, 1000 classes, ImageNet's normalisation), for
// measuring the ImageNet models where the real data is not at hand. Each
// class's prototype is drawn as for the small formats on a 28×28 grid and
// enlarged 8 times (so 1000 classes cost little); each image is its
// class's prototype, shifted by up to 24 pixels, scaled in brightness,
// with pixel noise. Images are generated in parallel, each from its own
// seed, so the same (n, seed) gives the same images on any machine.
func SyntheticImageNet(n int, seed uint64) *Dataset {
	const side, grid, classes = imageNetSide, imageNetGrid, 1000
	d := &Dataset{Name: "synthetic-imagenet", Shape: [3]int{3, side, side}, Classes: imageNetClasses(),
		Mean: slices.Clone(ImageNetMean), Std: slices.Clone(ImageNetStd)}
	d.Images = make([]byte, n*d.ImageSize())
	d.Labels = make([]int32, n)
	labels := rand.New(rand.NewPCG(seed, 0x1a6e))
	for i := range d.Labels {
		d.Labels[i] = int32(labels.IntN(classes))
	}
	protos := make([][]float64, classes)
	for k := range protos {
		protos[k] = prototype(k, 3, grid, grid)
	}
	scale := side / grid
	parallelFor(n, func(i int) {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		p := protos[d.Labels[i]]
		dy, dx := rng.IntN(49)-24, rng.IntN(49)-24
		gain := 0.7 + 0.6*rng.Float64()
		img := d.Image(i)
		for ch := range 3 {
			for y := range side {
				sy := y + dy
				for x := range side {
					v := 0.0
					if sx := x + dx; sy >= 0 && sy < side && sx >= 0 && sx < side {
						v = p[(ch*grid+sy/scale)*grid+sx/scale]
					}
					v = 255*gain*v + 40*rng.NormFloat64()
					img[(ch*side+y)*side+x] = uint8(min(255, max(0, math.Round(v))))
				}
			}
		}
	})
	return d
}

// imageNetClasses names SyntheticImageNet's 1000 classes class000–class999.
func imageNetClasses() []string {
	names := make([]string, 1000)
	for k := range names {
		names[k] = fmt.Sprintf("class%03d", k)
	}
	return names
}

// parallelFor calls f(0) … f(n-1) on as many goroutines as there are CPUs.
func parallelFor(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}
