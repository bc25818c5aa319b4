package data

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/safetensors"
)

// TestRandomResizedCropDistribution draws crops as torchvision's
// RandomResizedCrop.get_params does and compares their distribution with
// torchvision's own draws (testdata/gen_randomcrop.py, 20,000 per image
// size): the mean and spread of the area fraction, log aspect ratio and
// position, the area histogram, and how often the central fallback comes
// out (78% for a 10:1 image, never for 4:3). The tolerances are five
// standard errors of the two samples' difference, a per-bin 0.015.
func TestRandomResizedCropDistribution(t *testing.T) {
	b, err := os.ReadFile("testdata/randomcrop.json")
	if err != nil {
		t.Fatal(err)
	}
	type moments struct{ Mean, Std float64 }
	var cases []struct {
		Width, Height, Draws      int
		Fallback                  float64
		AreaHist                  []float64 `json:"area_hist"`
		Area, Logratio, Top, Left moments
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%dx%d", c.Width, c.Height), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.Width), uint64(c.Height)))
			fl, ft, fw, fh := 0, 0, 0, 0
			{ // the fallback box: ten misses in a row
				miss := rand.New(constSource(math.MaxUint64)) // every draw at the top of its range
				fl, ft, fw, fh = randomResizedCrop(c.Width, c.Height, miss)
			}
			var area, logratio, top, left []float64
			hist := make([]float64, len(c.AreaHist))
			falls := 0
			for range c.Draws {
				l, tp, w, h := randomResizedCrop(c.Width, c.Height, r)
				if w < 1 || h < 1 || l < 0 || tp < 0 || l+w > c.Width || tp+h > c.Height {
					t.Fatalf("box %d,%d %d×%d outside the %d×%d image", l, tp, w, h, c.Width, c.Height)
				}
				a := float64(w*h) / float64(c.Width*c.Height)
				area, logratio = append(area, a), append(logratio, math.Log(float64(w)/float64(h)))
				top, left = append(top, float64(tp)/float64(c.Height)), append(left, float64(l)/float64(c.Width))
				hist[min(int(a*float64(len(hist))), len(hist)-1)]++
				if l == fl && tp == ft && w == fw && h == fh {
					falls++
				}
			}
			check := func(name string, v []float64, want moments) {
				mean, std := meanStd(v)
				se := math.Sqrt(2*want.Std*want.Std/float64(c.Draws)) + 1e-9
				if math.Abs(mean-want.Mean) > 5*se || math.Abs(std-want.Std) > 5*se+0.01*want.Std {
					t.Errorf("%s: mean %.4f std %.4f; torchvision %.4f, %.4f", name, mean, std, want.Mean, want.Std)
				}
			}
			check("area", area, c.Area)
			check("log ratio", logratio, c.Logratio)
			check("top", top, c.Top)
			check("left", left, c.Left)
			for i := range hist {
				if got := hist[i] / float64(c.Draws); math.Abs(got-c.AreaHist[i]) > 0.015 {
					t.Errorf("area in [%.1f, %.1f): %.4f of the draws, torchvision %.4f", float64(i)/10, float64(i+1)/10, got, c.AreaHist[i])
				}
			}
			got := float64(falls) / float64(c.Draws)
			if se := math.Sqrt(c.Fallback*(1-c.Fallback)/float64(c.Draws)) + 1e-3; math.Abs(got-c.Fallback) > 5*se {
				t.Errorf("fallback crop in %.4f of the draws, torchvision %.4f", got, c.Fallback)
			}
		})
	}
}

// constSource returns the same word every time.
type constSource uint64

func (c constSource) Uint64() uint64 { return uint64(c) }

func meanStd(v []float64) (mean, std float64) {
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	for _, x := range v {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(v)))
}

// TestResizedCropIsTorchvisions: cutting a box and scaling it to 24×24
// gives torchvision's F.resized_crop on PIL to the byte (a PNG source,
// decoded alike), for boxes large and small, and flipped as F.hflip.
func TestResizedCropIsTorchvisions(t *testing.T) {
	f, err := safetensors.ReadFile("testdata/randomcrop.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadRGB("testdata/images/rgb-down.png")
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; ; n++ {
		box, ok := f.Get(fmt.Sprintf("crop%d/box", n))
		if !ok {
			if n == 0 {
				t.Fatal("no crops in the fixture")
			}
			break
		}
		i, j, h, w := int(box.F32[0]), int(box.F32[1]), int(box.F32[2]), int(box.F32[3])
		out := m.Crop(j, i, w, h).Resize(24, 24)
		want, _ := f.Get(fmt.Sprintf("crop%d", n))
		flipped, _ := f.Get(fmt.Sprintf("crop%d/flip", n))
		for p := range want.F32 {
			y, x, c := p/(24*3), p/3%24, p%3
			if float32(out.Pix[p]) != want.F32[p] {
				t.Fatalf("box %v: byte %d is %d, torchvision %v", box.F32, p, out.Pix[p], want.F32[p])
			}
			if float32(out.Pix[3*(y*24+23-x)+c]) != flipped.F32[p] {
				t.Fatalf("box %v flipped: byte %d differs", box.F32, p)
			}
		}
	}
}

// imageFolderSet writes a small image folder (48×40 PNGs, 60 train and 40
// val images) and loads it with crop×crop images.
func imageFolderSet(t *testing.T, crop int) (dir string, train, test *Dataset) {
	t.Helper()
	dir = t.TempDir()
	tr, _ := Synthetic(FormatCIFAR10, 60, 1)
	te, _ := Synthetic(FormatCIFAR10, 40, 2)
	if err := WriteImageFolder(dir, tr, te, 48, 40, ".png"); err != nil {
		t.Fatal(err)
	}
	train, test, err := LoadSized(dir, crop)
	if err != nil {
		t.Fatal(err)
	}
	return dir, train, test
}

// epochOf returns an epoch's batches, copied, from l.
func epochOf(t *testing.T, l *Loader, epoch int, idx []int) (x [][]float32, labels [][]int32) {
	t.Helper()
	if err := l.Start(epoch, idx); err != nil {
		t.Fatal(err)
	}
	for b, ok := l.Next(); ok; b, ok = l.Next() {
		x, labels = append(x, slices.Clone(b.X.Data)), append(labels, slices.Clone(b.Labels))
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return x, labels
}

// TestFileLoader: images read from files come out as ReadEvalImage
// reads them, normalised, for evaluation; training's random resized crops
// and flips are the same whatever the number of workers, differ between
// epochs, and are the box randomResizedCrop draws, scaled.
func TestFileLoader(t *testing.T) {
	_, train, test := imageFolderSet(t, 32)
	idx := Sampler{N: test.Len(), World: 1}.Indices(0)
	l, err := NewLoader(test, 8, Plain(test), LoaderConfig{Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Stop()
	x, labels := epochOf(t, l, 0, idx)
	if len(x) != 5 || len(labels[4]) != 8 {
		t.Fatalf("%d batches, the last of %d images; want 5, 8", len(x), len(labels[len(labels)-1]))
	}
	tab := Plain(test).table(3)
	per := test.ImageSize()
	for i := range test.Len() {
		img, err := ReadEvalImage(test.Files[i], 32)
		if err != nil {
			t.Fatal(err)
		}
		got := x[i/8][i%8*per : (i%8+1)*per]
		for p, v := range img {
			if got[p] != tab[p/(32*32)][v] {
				t.Fatalf("image %d (%s): value %d is %v, want %v", i, test.Files[i], p, got[p], tab[p/(32*32)][v])
			}
		}
		if labels[i/8][i%8] != test.Labels[i] {
			t.Fatalf("image %d: label %d, want %d", i, labels[i/8][i%8], test.Labels[i])
		}
	}

	aug := ImageNetAugmentation(train, 5)
	order := Sampler{N: train.Len(), Shuffle: true, Seed: 2, World: 1}.Indices(0)
	var epochs [][][]float32
	for _, workers := range []int{1, 4} {
		l, err := NewLoader(train, 7, aug, LoaderConfig{Workers: workers, Prefetch: 1})
		if err != nil {
			t.Fatal(err)
		}
		x, _ := epochOf(t, l, 0, order)
		x1, _ := epochOf(t, l, 1, order)
		l.Stop()
		epochs = append(epochs, x, x1)
	}
	for b := range epochs[0] {
		if !slices.Equal(epochs[0][b], epochs[2][b]) || !slices.Equal(epochs[1][b], epochs[3][b]) {
			t.Fatalf("batch %d differs between 1 and 4 workers", b)
		}
	}
	if slices.Equal(epochs[0][0], epochs[1][0]) {
		t.Fatal("epochs 0 and 1 drew the same crops")
	}
	// Image order[0] of epoch 0, by hand: its box, scaled, maybe mirrored.
	i := order[0]
	m, _ := ReadRGB(train.Files[i])
	r := aug.draw(0, i)
	left, top, w, h := randomResizedCrop(m.W, m.H, rand.New(rand.NewPCG(r, aug.Seed)))
	want := m.Crop(left, top, w, h).Resize(32, 32)
	flip := r>>63 == 1
	tab = aug.table(3)
	for c := range 3 {
		for y := range 32 {
			for x := range 32 {
				sx := x
				if flip {
					sx = 31 - x
				}
				if got, v := epochs[0][0][(c*32+y)*32+x], tab[c][want.Pix[3*(y*32+sx)+c]]; got != v {
					t.Fatalf("augmented image %d: channel %d (%d, %d) is %v, want %v", i, c, x, y, got, v)
				}
			}
		}
	}

	for _, c := range []struct {
		ds   *Dataset
		tf   Transform
		want string
	}{
		{train, CIFARAugmentation(train, 1), "not a padded crop"},
		{synth(t, FormatCIFAR10, 10, 1), ImageNetAugmentation(train, 1), "is held in memory"},
		{&Dataset{Name: "wide", Shape: [3]int{3, 32, 48}, Files: train.Files, Labels: train.Labels}, Plain(train), "a square"},
	} {
		if _, err := NewLoader(c.ds, 4, c.tf, LoaderConfig{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with %+v: %v, want an error saying %q", c.ds.Name, c.tf, err, c.want)
		}
	}
}

// TestBadImageFiles: a file that is not an image ends the epoch with an
// error naming it; with SkipBad it is left out of its batch and counted;
// a batch of nothing but bad files is an error even then. Stopping
// mid-epoch with busy workers returns.
func TestBadImageFiles(t *testing.T) {
	dir, train, _ := imageFolderSet(t, 32)
	bad := filepath.Join(dir, "train", "bad.jpg")
	if err := os.WriteFile(bad, []byte("this is not a JPEG"), 0o644); err != nil {
		t.Fatal(err)
	}
	ds := *train
	ds.Files = slices.Clone(train.Files)
	ds.Files[9] = bad
	idx := Sampler{N: ds.Len(), World: 1}.Indices(0)

	l, _ := NewLoader(&ds, 4, Plain(&ds), LoaderConfig{Workers: 2})
	if err := l.Start(0, idx); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ok := l.Next(); ok; _, ok = l.Next() {
		n++
	}
	if err := l.Err(); err == nil || !strings.Contains(err.Error(), bad) || n != 2 {
		t.Fatalf("after %d batches: %v; want 2 batches, then an error naming %s", n, err, bad)
	}
	l.Stop()

	l, _ = NewLoader(&ds, 4, ImageNetAugmentation(&ds, 1), LoaderConfig{Workers: 2, SkipBad: true})
	defer l.Stop()
	if err := l.Start(0, idx); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for b, ok := l.Next(); ok; b, ok = l.Next() {
		sizes = append(sizes, b.Len())
		if b.First == 8 && !slices.Equal(b.Labels, []int32{ds.Labels[8], ds.Labels[10], ds.Labels[11]}) {
			t.Fatalf("batch at 8 has labels %v without image 9", b.Labels)
		}
	}
	if err := l.Err(); err != nil || len(l.Skipped()) != 1 || !strings.Contains(l.Skipped()[0], bad) || sizes[2] != 3 || len(sizes) != 15 {
		t.Fatalf("batch sizes %v, skipped %q, %v: want image 9 left out of the third batch, named", sizes, l.Skipped(), err)
	}

	for i := 4; i < 8; i++ {
		ds.Files[i] = bad
	}
	if err := l.Start(0, idx); err != nil {
		t.Fatal(err)
	}
	for _, ok := l.Next(); ok; _, ok = l.Next() {
	}
	if err := l.Err(); err == nil || !strings.Contains(err.Error(), "not one image of the batch at position 4") {
		t.Fatalf("a batch of bad files: %v", err)
	}

	ds.Files = train.Files
	l.Start(0, idx)
	l.Next()
	l.Stop() // with workers busy
	if _, ok := l.Next(); ok {
		t.Fatal("a batch after Stop")
	}
}
