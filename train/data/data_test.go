package data

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
)

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadIDX(t *testing.T) {
	data := []byte{1, 2, 3, 4, 5, 6}
	good := idxBytes([]int{2, 3}, data)
	gzGood := gz(t, good)
	badCRC := slices.Clone(gzGood)
	badCRC[len(badCRC)-6] ^= 0xff // inside the CRC32 trailer
	cases := []struct {
		name    string
		file    []byte
		wantErr string // "" for success
	}{
		{"plain", good, ""},
		{"gzip", gzGood, ""},
		{"truncated data", good[:len(good)-2], "need 6 data bytes from offset 12, got 4"},
		{"truncated header", good[:6], "dimension 0 at offset 4"},
		{"empty", nil, "magic at offset 0"},
		{"not idx", []byte("hello world!"), "not an IDX file"},
		{"float type", append([]byte{0, 0, 0x0d, 1, 0, 0, 0, 1}, 0, 0, 0, 0), "element type 0x0d at offset 2"},
		{"trailing bytes", append(slices.Clone(good), 9), "unexpected data after offset 18"},
		{"truncated gzip", gzGood[:len(gzGood)-10], "offset"},
		{"gzip checksum", badCRC, "after the data at offset 18"},
		{"huge dims", []byte{0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 9}, "describe more than"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, dir, strings.ReplaceAll(c.name, " ", "_"), c.file)
			idx, err := ReadIDX(p)
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(idx.Dims, []int{2, 3}) || !bytes.Equal(idx.Data, data) {
					t.Fatalf("read %v %v", idx.Dims, idx.Data)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", c.wantErr)
			}
			if !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q should name the file and contain %q", err, c.wantErr)
			}
		})
	}
}

func sameData(t *testing.T, got, want *Dataset) {
	t.Helper()
	if got.Shape != want.Shape || !bytes.Equal(got.Images, want.Images) || !slices.Equal(got.Labels, want.Labels) {
		t.Fatalf("dataset differs: %v %d images, want %v %d", got.Shape, got.Len(), want.Shape, want.Len())
	}
}

func synth(t *testing.T, f Format, n int, seed uint64) *Dataset {
	t.Helper()
	d, err := Synthetic(f, n, seed)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestMNISTRoundTrip(t *testing.T) {
	train, test := synth(t, FormatMNIST, 50, 1), synth(t, FormatMNIST, 20, 2)
	dir := filepath.Join(t.TempDir(), "fashion-mnist")
	if err := WriteMNIST(dir, train, test); err != nil {
		t.Fatal(err)
	}
	if f, err := Detect(dir); err != nil || f != FormatMNIST {
		t.Fatalf("Detect = %v, %v", f, err)
	}
	gotTrain, gotTest, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameData(t, gotTrain, train)
	sameData(t, gotTest, test)
	if gotTrain.Name != "fashion-mnist" || gotTrain.Classes[0] != "T-shirt/top" {
		t.Fatalf("a directory named fashion-mnist should load as Fashion-MNIST, got %q", gotTrain.Name)
	}
	// One of its files given for the data: the directory to give named.
	file := filepath.Join(dir, "train-images-idx3-ubyte.gz")
	if _, _, err := Load(file); err == nil || err.Error() != file+" is a file of the MNIST-format data in "+dir+": give that directory" {
		t.Fatalf("Load(%s): %v", file, err)
	}

	// An empty images file is refused, naming it.
	writeFile(t, dir, "train-images-idx3-ubyte.gz", gz(t, idxBytes([]int{0, 28, 28}, nil)))
	writeFile(t, dir, "train-labels-idx1-ubyte.gz", gz(t, idxBytes([]int{0}, nil)))
	if _, _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "train-images-idx3-ubyte.gz: 0 images of 28×28 pixels") {
		t.Fatalf("empty images file: %v", err)
	}
	if err := WriteMNIST(dir, train, test); err != nil {
		t.Fatal(err)
	}

	// Labels and images that disagree in count are named.
	writeFile(t, dir, "t10k-labels-idx1-ubyte.gz", gz(t, idxBytes([]int{19}, narrow(test.Labels[:19]))))
	if _, _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "has 20 images but") {
		t.Fatalf("mismatched counts: %v", err)
	}
	// A label outside 0–9 is named with its image.
	bad := slices.Clone(test.Labels)
	bad[7] = 12
	writeFile(t, dir, "t10k-labels-idx1-ubyte.gz", gz(t, idxBytes([]int{20}, narrow(bad))))
	if _, _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "label 12 of image 7") {
		t.Fatalf("bad label: %v", err)
	}
}

// TestMNISTWhereTorchvisionPutsIt: a root that torchvision's
// datasets.MNIST(root, download=True) or FashionMNIST filled (root/MNIST/raw,
// root/FashionMNIST/raw) loads as that dataset; a root holding both is an
// error naming them.
func TestMNISTWhereTorchvisionPutsIt(t *testing.T) {
	train, test := synth(t, FormatMNIST, 30, 1), synth(t, FormatMNIST, 10, 2)
	both := t.TempDir()
	for _, c := range []struct{ sub, name string }{{"MNIST/raw", "mnist"}, {"FashionMNIST/raw", "fashion-mnist"}} {
		root := t.TempDir()
		for _, r := range []string{root, both} {
			if err := WriteMNIST(filepath.Join(r, filepath.FromSlash(c.sub)), train, test); err != nil {
				t.Fatal(err)
			}
		}
		if f, err := Detect(root); err != nil || f != FormatMNIST {
			t.Fatalf("%s: Detect = %v, %v", c.sub, f, err)
		}
		gotTrain, gotTest, err := Load(root)
		if err != nil {
			t.Fatal(err)
		}
		sameData(t, gotTrain, train)
		sameData(t, gotTest, test)
		if gotTrain.Name != c.name {
			t.Fatalf("%s loads as %q, want %q", c.sub, gotTrain.Name, c.name)
		}
	}
	want := fmt.Sprintf("%s holds two MNIST-format datasets, %s and %s", both, filepath.Join(both, "MNIST", "raw"), filepath.Join(both, "FashionMNIST", "raw"))
	if _, err := Detect(both); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("both: %v; want %q", err, want)
	}
	if _, _, err := Load(both); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("both: %v; want %q", err, want)
	}
}

// TestMNISTKindByLabels: Fashion-MNIST copied to a directory whose name
// does not say so is still recognised, by its training labels, and named
// with its class names; other MNIST-format data of the same size keeps
// MNIST's digits. The real dataset, when installed, is recognised in a
// copy the same way.
func TestMNISTKindByLabels(t *testing.T) {
	images := func(labels []int32) *Dataset {
		return &Dataset{Shape: [3]int{1, 2, 2}, Images: make([]byte, 4*len(labels)), Labels: labels}
	}
	fashion := make([]int32, 60000)
	copy(fashion, fashionMNISTFirstLabels)
	shifted := slices.Concat([]int32{1}, fashion[:59999])
	test := images(make([]int32, 10))
	for _, c := range []struct {
		name   string
		labels []int32
		want   string
	}{
		{"its first labels", fashion, "fashion-mnist"}, // (no subtest name may say "fashion": t.TempDir names the directory after it)
		{"other labels", shifted, "mnist"},
		{"fewer images", fashion[:59999], "mnist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "copy")
			if err := WriteMNIST(dir, images(c.labels), test); err != nil {
				t.Fatal(err)
			}
			train, test, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if train.Name != c.want || test.Name != c.want || train.Classes[9] != test.Classes[9] {
				t.Fatalf("loaded as %q and %q (classes %q, %q), want %q", train.Name, test.Name, train.Classes, test.Classes, c.want)
			}
		})
	}
	const installed = "/usr/share/datasets/fashion-mnist"
	files, _ := filepath.Glob(filepath.Join(installed, "*-ubyte*"))
	if len(files) == 0 {
		return // TestFashionMNIST says why it skips
	}
	dir := t.TempDir()
	for _, f := range files {
		if err := os.Symlink(f, filepath.Join(dir, filepath.Base(f))); err != nil {
			t.Fatal(err)
		}
	}
	train, _, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if train.Name != "fashion-mnist" || train.Classes[9] != "Ankle boot" {
		t.Fatalf("a copy of %s loads as %q with classes %q", installed, train.Name, train.Classes)
	}
}

// TestFashionMNIST reads the real dataset when it is installed
// (apt-get install dataset-fashion-mnist): 60,000 + 10,000 images of
// 28×28, 6,000 + 1,000 of each class.
func TestFashionMNIST(t *testing.T) {
	const dir = "/usr/share/datasets/fashion-mnist"
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	train, test, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		d        *Dataset
		n, class int
	}{{train, 60000, 6000}, {test, 10000, 1000}} {
		if c.d.Len() != c.n || c.d.Shape != [3]int{1, 28, 28} || c.d.Name != "fashion-mnist" {
			t.Fatalf("%s: %d images of %v, want %d of 1×28×28", c.d.Name, c.d.Len(), c.d.Shape, c.n)
		}
		var count [10]int
		for _, l := range c.d.Labels {
			count[l]++
		}
		for k, n := range count {
			if n != c.class {
				t.Fatalf("class %d has %d images, want %d", k, n, c.class)
			}
		}
	}
	// The first training image is an ankle boot (label 9) whose pixels
	// average about 97/255.
	if train.Labels[0] != 9 {
		t.Fatalf("first label %d, want 9", train.Labels[0])
	}
}

func TestCIFAR10(t *testing.T) {
	train, test := synth(t, FormatCIFAR10, 23, 3), synth(t, FormatCIFAR10, 7, 4)
	root := t.TempDir()
	dir := filepath.Join(root, "extracted")
	if err := WriteCIFAR10(dir, train, test); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(root, "dl", "cifar-10-binary.tar.gz")
	os.MkdirAll(filepath.Dir(archive), 0o755)
	if err := WriteCIFAR10Archive(archive, train, test); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, archive, filepath.Dir(archive)} {
		t.Run(filepath.Base(p), func(t *testing.T) {
			if f, err := Detect(p); err != nil || f != FormatCIFAR10 {
				t.Fatalf("Detect = %v, %v", f, err)
			}
			gotTrain, gotTest, err := Load(p)
			if err != nil {
				t.Fatal(err)
			}
			sameData(t, gotTrain, train)
			sameData(t, gotTest, test)
		})
	}

	t.Run("errors", func(t *testing.T) {
		b, _ := os.ReadFile(filepath.Join(dir, "data_batch_2.bin"))
		cases := []struct {
			name, file string
			content    []byte
			want       string
		}{
			{"truncated", "data_batch_2.bin", b[:len(b)-100], "data_batch_2.bin: truncated or corrupt"},
			{"bad label", "data_batch_2.bin", append([]byte{}, append(b[:cifarRecord], append([]byte{10}, b[cifarRecord+1:]...)...)...), "record 1 at offset 3073 has label 10"},
			{"gap", "data_batch_7.bin", b, "not numbered consecutively"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				bad := t.TempDir()
				if err := WriteCIFAR10(bad, train, test); err != nil {
					t.Fatal(err)
				}
				writeFile(t, bad, c.file, c.content)
				_, _, err := Load(bad)
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("error %v, want %q", err, c.want)
				}
			})
		}
		// A truncated archive.
		ab, _ := os.ReadFile(archive)
		p := writeFile(t, t.TempDir(), "cifar-10-binary.tar.gz", ab[:len(ab)/2])
		if _, _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Fatalf("truncated archive: %v", err)
		}
	})
	if _, err := Detect(t.TempDir()); err == nil || !strings.Contains(err.Error(), "neither MNIST-format") {
		t.Fatalf("empty directory: %v", err)
	}
	// Half an image folder: the split that is there and the one missing.
	for _, c := range []struct{ has, lacks string }{{"train", "val"}, {"val", "train"}} {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, c.has, "cat"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, c.has, "cat"), "0.jpg", []byte("not read"))
		want := fmt.Sprintf("%s holds an image folder's %s/ but no %s/ beside it", dir, c.has, c.lacks)
		if _, err := Detect(dir); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("only %s/: %v, want %q", c.has, err, want)
		}
	}
}

// TestCIFAR10Python reads CIFAR-10's Python version, the batches
// torchvision downloads (testdata/gen_cifar_python.py: three images a
// batch, pickled as Python 2's cPickle wrote the real files and as
// Python 3 writes them at protocols 2 and 4; each read back there as
// torchvision reads it): in root/cifar-10-batches-py as
// torchvision.datasets.CIFAR10(root) leaves them, from that directory
// itself, and from cifar-10-python.tar.gz. Pixels and labels are the
// generator's; pickles that are cut, changed or of something else are
// errors naming the file.
func TestCIFAR10Python(t *testing.T) {
	pixel := func(b, i, j int) byte { return byte((b*31 + i*7 + j*13) % 256) }
	label := func(b, i int) int32 { return int32((3*b + i) % 10) }
	check := func(t *testing.T, d *Dataset, batches ...int) {
		t.Helper()
		if d.Len() != 3*len(batches) || d.Shape != [3]int{3, 32, 32} || !slices.Equal(d.Classes, CIFAR10Classes) {
			t.Fatalf("%d images of %v, classes %v", d.Len(), d.Shape, d.Classes)
		}
		for k, b := range batches {
			for i := range 3 {
				n := 3*k + i
				img := d.Images[n*cifarPixels : (n+1)*cifarPixels]
				for j, v := range img {
					if v != pixel(b, i, j) {
						t.Fatalf("batch %d image %d pixel %d: %d, want %d", b, i, j, v, pixel(b, i, j))
					}
				}
				if d.Labels[n] != label(b, i) {
					t.Fatalf("batch %d image %d: label %d, want %d", b, i, d.Labels[n], label(b, i))
				}
			}
		}
	}
	for _, form := range []string{"py2", "py3p2", "py3p4"} {
		t.Run(form, func(t *testing.T) {
			src := filepath.Join("testdata", "cifar-python", form)
			root := t.TempDir()
			dir := filepath.Join(root, "cifar-10-batches-py")
			files := map[string][]byte{}
			for _, name := range []string{"data_batch_1", "data_batch_2", "test_batch"} {
				b, err := os.ReadFile(filepath.Join(src, name))
				if err != nil {
					t.Fatal(err)
				}
				files["cifar-10-batches-py/"+name] = b
				writeFile(t, mkdir(t, dir), name, b)
			}
			writeFile(t, dir, "batches.meta", []byte("not read"))
			archive := writeFile(t, t.TempDir(), "cifar-10-python.tar.gz", tarGz(t, files))
			for _, p := range []string{root, dir, archive, filepath.Dir(archive)} {
				if f, err := Detect(p); err != nil || f != FormatCIFAR10 {
					t.Fatalf("Detect(%s) = %v, %v", p, f, err)
				}
				train, test, err := Load(p)
				if err != nil {
					t.Fatal(err)
				}
				check(t, train, 0, 1)
				check(t, test, 2)
			}
		})
	}

	good, err := os.ReadFile("testdata/cifar-python/py2/data_batch_1")
	if err != nil {
		t.Fatal(err)
	}
	labels := bytes.Index(good, []byte("]q\t(K")) + 4 // the labels' list: EMPTY_LIST, BINPUT 9, MARK, then BININT1 per label
	for _, c := range []struct {
		name    string
		content []byte
		want    string
	}{
		{"cut", good[:len(good)/2], "pickle opcode 0x54 at offset 139: a string of 9216 bytes, 4588 left in the pickle"},
		{"not a pickle", []byte("data_batch_1"), "pickle opcode 0x64 at offset 0: not one of the opcodes read"},
		{"a label of 10", slices.Concat(good[:labels], []byte{'K', 10}, good[labels+2:]), "label 0 is 10 (an int); CIFAR-10 labels are 0 to 9"},
		{"rows of 3071", bytes.Replace(good, []byte{'M', 0x00, 0x0c}, []byte{'M', 0xff, 0x0b}, 1), "its data: shape (3, 3071), want (images, 3072)"},
		{"a list of pixels", bytes.Replace(good, []byte("cnumpy.core.multiarray\n_reconstruct"), []byte("cnumpy.core.multiarray\n_reconstrucX"), 1), "its data: what numpy.core.multiarray._reconstrucX() made, not a numpy array"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, name := range []string{"data_batch_2", "test_batch"} {
				b, _ := os.ReadFile(filepath.Join("testdata", "cifar-python", "py2", name))
				writeFile(t, dir, name, b)
			}
			p := writeFile(t, dir, "data_batch_1", c.content)
			_, _, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), p+": not a batch of CIFAR-10's Python version: "+c.want) {
				t.Fatalf("%v; want an error naming %s and saying %q", err, p, c.want)
			}
		})
	}
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tarGz packs files (name → contents) into a gzip-compressed tar stream.
func tarGz(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	var members []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		members = append(members, name, string(files[name]))
	}
	return gz(t, tarOf(members...))
}

func TestSyntheticDeterministic(t *testing.T) {
	a, b, c := synth(t, FormatCIFAR10, 30, 9), synth(t, FormatCIFAR10, 30, 9), synth(t, FormatCIFAR10, 30, 10)
	sameData(t, a, b)
	if bytes.Equal(a.Images, c.Images) {
		t.Fatal("different seeds gave the same images")
	}
	if _, err := Synthetic("svhn", 1, 1); err == nil {
		t.Fatal("unknown format accepted")
	}
}

// TestSyntheticImageNet: ImageNet's shape, classes and normalisation; the
// same images whatever the number of goroutines making them; images that
// follow their class's prototype (two of one class far closer in colour
// than two of different classes).
func TestSyntheticImageNet(t *testing.T) {
	// Seed 14's first 16 labels hold two images of one class (the
	// learnability check needs a pair).
	a := synth(t, FormatImageNet, 16, 14)
	if a.Shape != [3]int{3, 224, 224} || len(a.Classes) != 1000 || a.Name != "synthetic-imagenet" || a.Len() != 16 {
		t.Fatalf("got %s %v, %d classes, %d images", a.Name, a.Shape, len(a.Classes), a.Len())
	}
	if !slices.Equal(a.Mean, ImageNetMean) || !slices.Equal(a.Std, ImageNetStd) {
		t.Errorf("normalisation %v %v, want ImageNet's", a.Mean, a.Std)
	}
	if names, ok := ClassNames(a.Name); !ok || names[999] != "class999" {
		t.Errorf("ClassNames(%s) = %d names, %v", a.Name, len(names), ok)
	}
	if mean, _ := Normalization(a.Name); !slices.Equal(mean, ImageNetMean) {
		t.Errorf("Normalization(%s) mean %v", a.Name, mean)
	}
	for _, l := range a.Labels {
		if l < 0 || l >= 1000 {
			t.Fatalf("label %d", l)
		}
	}
	prev := runtime.GOMAXPROCS(1)
	b := synth(t, FormatImageNet, 16, 14)
	runtime.GOMAXPROCS(prev)
	sameData(t, a, b)
	if c := synth(t, FormatImageNet, 4, 15); bytes.Equal(a.Images[:len(c.Images)], c.Images) {
		t.Fatal("different seeds gave the same images")
	}
	same, other, pairs := classDistances(a)
	if pairs == 0 {
		t.Fatal("no two images of one class: choose another seed")
	}
	t.Logf("channel proportions %.4f apart within a class (%d pairs), %.4f across", same, pairs, other)
	if !(4*same < other) {
		t.Errorf("channel proportions %.4f apart within a class, %.4f across classes: the classes are not learnable", same, other)
	}
}

// classDistances returns the mean distance between the channel
// proportions (each channel's share of the image's total brightness:
// unchanged by the generator's gain, hardly by its shift) of images of
// the same class and of different classes, and how many same-class pairs
// d holds.
func classDistances(d *Dataset) (same, other float64, pairs int) {
	props := make([][3]float64, d.Len())
	plane := d.ImageSize() / 3
	for i := range d.Len() {
		var sum [3]float64
		for k, v := range d.Image(i) {
			sum[k/plane] += float64(v)
		}
		total := sum[0] + sum[1] + sum[2]
		for c := range sum {
			props[i][c] = sum[c] / total
		}
	}
	var no int
	for i := range props {
		for j := i + 1; j < len(props); j++ {
			var s float64
			for c := range 3 {
				s += math.Abs(props[i][c] - props[j][c])
			}
			if d.Labels[i] == d.Labels[j] {
				same, pairs = same+s, pairs+1
			} else {
				other, no = other+s, no+1
			}
		}
	}
	return same / float64(max(pairs, 1)), other / float64(max(no, 1)), pairs
}
