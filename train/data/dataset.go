package data

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Dataset is a set of labelled images kept as raw bytes (one per pixel and
// channel, CHW order), converted to normalised floats only when batched.
type Dataset struct {
	// Name identifies the data: "fashion-mnist", "mnist", "cifar10" or
	// "synthetic-<kind>".
	Name string
	// Shape is the per-image [C, H, W].
	Shape [3]int
	// Images holds Len()·C·H·W bytes, unless the images are in files.
	Images []byte
	// Files, for images read from files as batches need them (an image
	// folder), names each image's file, and Images is empty: the loader
	// decodes and transforms them to Shape (Transform.ResizedCrop, else
	// evaluation's resize and center crop).
	Files []string
	// Shards, for images streamed from WebDataset-style tar shards,
	// holds them; Images, Files and Labels are empty (each sample's class
	// is in its shard).
	Shards *ShardSet
	// Labels holds one class index per image.
	Labels []int32
	// Classes names the classes.
	Classes []string
	// Mean and Std normalise each channel: x = (byte/255 − Mean)/Std.
	Mean, Std []float32
	// LeftOut says what of the source was not read, for the run's
	// description ("" when nothing was): an image folder's files of the
	// image formats gorun does not decode.
	LeftOut string
}

// Len returns the number of images.
func (d *Dataset) Len() int {
	if d.Shards != nil {
		return d.Shards.Len()
	}
	return len(d.Labels)
}

// Streamed reports whether the images are read from files as batches
// need them (Files or Shards), not held in memory.
func (d *Dataset) Streamed() bool { return d.Files != nil || d.Shards != nil }

// ImageSize returns the bytes per image.
func (d *Dataset) ImageSize() int { return d.Shape[0] * d.Shape[1] * d.Shape[2] }

// Image returns image i's bytes (of data held in memory, not Files).
func (d *Dataset) Image(i int) []byte {
	n := d.ImageSize()
	return d.Images[i*n : (i+1)*n]
}

// Head returns a view of the first n images (all of them when n ≤ 0 or
// n ≥ Len).
func (d *Dataset) Head(n int) *Dataset {
	if n <= 0 || n >= d.Len() {
		return d
	}
	h := *d
	if d.Shards != nil {
		h.Shards = d.Shards.head(n)
		return &h
	}
	if d.Files != nil {
		h.Files = d.Files[:n]
	} else {
		h.Images = d.Images[:n*d.ImageSize()]
	}
	h.Labels = d.Labels[:n]
	return &h
}

// check validates sizes and labels; where names the data in errors.
func (d *Dataset) check(where string) error {
	if d.Files != nil {
		if len(d.Files) != d.Len() || len(d.Images) != 0 {
			return fmt.Errorf("%s: %d files and %d bytes of images for %d labels", where, len(d.Files), len(d.Images), d.Len())
		}
	} else if len(d.Images) != d.Len()*d.ImageSize() {
		return fmt.Errorf("%s: %d bytes of images for %d labels of %v images", where, len(d.Images), d.Len(), d.Shape)
	}
	for i, l := range d.Labels {
		if l < 0 || int(l) >= len(d.Classes) {
			return fmt.Errorf("%s: label %d of image %d is not one of the %d classes", where, l, i, len(d.Classes))
		}
	}
	return nil
}

// Class names of the datasets gorun knows.
var (
	// FashionMNISTClasses are Fashion-MNIST's labels 0–9.
	FashionMNISTClasses = []string{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"}
	// MNISTClasses are MNIST's digits.
	MNISTClasses = []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}
	// CIFAR10Classes are CIFAR-10's labels 0–9.
	CIFAR10Classes = []string{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"}
)

// ClassNames returns the label names of a dataset by its Name, and false
// for an unknown name.
func ClassNames(name string) ([]string, bool) {
	switch strings.TrimPrefix(name, "synthetic-") {
	case "fashion-mnist":
		return FashionMNISTClasses, true
	case "mnist":
		return MNISTClasses, true
	case "cifar10":
		return CIFAR10Classes, true
	case "imagenet":
		return imageNetClasses(), true
	}
	return nil, false
}

// Normalisation constants, as the workshops' torchvision transforms use.
var (
	mnistMean, mnistStd = []float32{0.1307}, []float32{0.3081}
	cifarMean, cifarStd = []float32{0.4914, 0.4822, 0.4465}, []float32{0.2470, 0.2435, 0.2616}
)

// Normalization returns the per-channel mean and standard deviation used
// for a dataset by its Name (MNIST's for MNIST-shaped data, ImageNet's for
// ImageNet's, CIFAR-10's otherwise).
func Normalization(name string) (mean, std []float32) {
	switch strings.TrimPrefix(name, "synthetic-") {
	case "mnist", "fashion-mnist":
		return mnistMean, mnistStd
	case "imagenet":
		return ImageNetMean, ImageNetStd
	}
	return cifarMean, cifarStd
}

// Format is an on-disk dataset layout.
type Format string

// The formats Load detects.
const (
	FormatMNIST   Format = "mnist"   // IDX files, plain or gzip
	FormatCIFAR10 Format = "cifar10" // CIFAR-10's batches, binary or Python version, extracted or in their tar.gz
	// FormatImageNet is ImageNet's shape (3×224×224, 1000 classes); only
	// generated data (SyntheticImageNet) has it, real ImageNet comes as an
	// image folder or shards.
	FormatImageNet Format = "imagenet"
	// FormatImageFolder is torchvision's ImageFolder layout: DIR/train/CLASS/IMAGE
	// and DIR/val/CLASS/IMAGE, JPEG or PNG.
	FormatImageFolder Format = "imagefolder"
	// FormatShards is WebDataset-style tar shards with their index,
	// shards.json, as WriteShards packs an image folder.
	FormatShards Format = "shards"
)

// Detect reports the format of the dataset in dir.
func Detect(dir string) (Format, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		if strings.HasSuffix(dir, ".tar.gz") || strings.HasSuffix(dir, ".tgz") {
			return FormatCIFAR10, nil
		}
		// One of a dataset's files, given for the dataset.
		if f, err := Detect(filepath.Dir(dir)); err == nil {
			kind := map[Format]string{FormatMNIST: "the MNIST-format data", FormatCIFAR10: "the CIFAR-10 data", FormatImageFolder: "the image folder", FormatShards: "the shards"}[f]
			return "", fmt.Errorf("%s is a file of %s in %s: give that directory", dir, kind, filepath.Dir(dir))
		}
		if root, split, class := partOfImageFolder(filepath.Dir(dir)); root != "" && class != "" {
			return "", fmt.Errorf("%s is an image of class %s in the %s/ split of the image folder %s: give the folder itself, which holds train/ and val/", dir, class, split, root)
		}
		return "", fmt.Errorf("%s is not a directory or a CIFAR-10 archive (cifar-10-binary.tar.gz, cifar-10-python.tar.gz)", dir)
	}
	if _, err := findMNIST(dir); err == nil {
		return FormatMNIST, nil
	} else if errors.Is(err, errTwoMNIST) {
		return "", err
	}
	if _, err := findCIFAR(dir); err == nil {
		return FormatCIFAR10, nil
	}
	if isImageFolder(dir) {
		return FormatImageFolder, nil
	}
	if isShardDir(dir) {
		return FormatShards, nil
	}
	if split, missing := halfImageFolder(dir); split != "" {
		return "", fmt.Errorf("%s holds an image folder's %s/ but no %s/ beside it: an image folder needs both, train/CLASS/IMAGE to train on and val/CLASS/IMAGE to evaluate on, as torchvision's ImageNet layout has them", dir, split, missing)
	}
	if root, split, class := partOfImageFolder(dir); root != "" {
		part := "the " + split + "/ split"
		if class != "" {
			part = "a class directory (" + class + ") in the " + split + "/ split"
		}
		return "", fmt.Errorf("%s is %s of the image folder %s: give the folder itself, which holds train/ and val/", dir, part, root)
	}
	return "", fmt.Errorf("%s holds neither MNIST-format files (train-images-idx3-ubyte[.gz], ..., or MNIST/raw/ or FashionMNIST/raw/ holding them, as torchvision downloads them), nor CIFAR-10 batches (data_batch_1.bin ... test_batch.bin, or cifar-10-binary.tar.gz; the Python version's cifar-10-batches-py/ as torchvision downloads it, or cifar-10-python.tar.gz), nor an image folder (train/CLASS/IMAGE and val/CLASS/IMAGE, JPEG or PNG), nor shards (shards.json and its tar files)", dir)
}

// Load reads the training and test splits of the dataset in dir (a
// directory, or a CIFAR-10 archive), detecting its format;
// an image folder's images are cropped to 224×224 (LoadSized).
func Load(dir string) (train, test *Dataset, err error) { return LoadSized(dir, 224) }

// LoadSized is Load with an image folder's (or shards') images resized (shorter side)
// to crop·8/7 and center-cropped to crop×crop (224: torchvision's 256 and
// 224).
func LoadSized(dir string, crop int) (train, test *Dataset, err error) {
	f, err := Detect(dir)
	if err != nil {
		return nil, nil, err
	}
	switch f {
	case FormatMNIST:
		return LoadMNIST(dir)
	case FormatImageFolder, FormatShards:
		if crop < 1 {
			return nil, nil, fmt.Errorf("image size %d: want at least 1", crop)
		}
		if f == FormatShards {
			return LoadShards(dir, crop)
		}
		return LoadImageFolder(dir, crop)
	default:
		return LoadCIFAR10(dir)
	}
}

// torchvisionMNIST are where torchvision's MNIST and FashionMNIST
// datasets (root=DIR, download=True) keep their files under DIR.
var torchvisionMNIST = []string{"MNIST/raw", "FashionMNIST/raw"}

var errTwoMNIST = errors.New("two MNIST-format datasets")

// findMNIST returns the directory of dir's MNIST-format files: dir
// itself, or where torchvision's MNIST or FashionMNIST put them.
func findMNIST(dir string) (string, error) {
	_, err := findIDX(dir, "train", "images", 3)
	if err == nil {
		return dir, nil
	}
	var found []string
	for _, sub := range torchvisionMNIST {
		d := filepath.Join(dir, filepath.FromSlash(sub))
		if _, err := findIDX(d, "train", "images", 3); err == nil {
			found = append(found, d)
		}
	}
	switch len(found) {
	case 0:
		return "", err
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("%s holds %w, %s and %s (torchvision's MNIST and FashionMNIST): pass the one to train on as --data", dir, errTwoMNIST, found[0], found[1])
}

// LoadMNIST reads an MNIST-format directory: train-images-idx3-ubyte,
// train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte,
// each optionally gzipped — in dir, or in dir/MNIST/raw or
// dir/FashionMNIST/raw, where torchvision's datasets.MNIST(root=dir) and
// FashionMNIST download them. Fashion-MNIST is recognised by its
// training labels, wherever it was copied to, or else by a directory name
// that mentions "fashion" (for the class names).
func LoadMNIST(dir string) (train, test *Dataset, err error) {
	if dir, err = findMNIST(dir); err != nil {
		return nil, nil, err
	}
	name, classes := "mnist", MNISTClasses
	load := func(split string) (*Dataset, error) {
		ip, err := findIDX(dir, split, "images", 3)
		if err != nil {
			return nil, err
		}
		lp, err := findIDX(dir, split, "labels", 1)
		if err != nil {
			return nil, err
		}
		images, err := ReadIDX(ip)
		if err != nil {
			return nil, err
		}
		labels, err := ReadIDX(lp)
		if err != nil {
			return nil, err
		}
		if len(images.Dims) != 3 {
			return nil, fmt.Errorf("%s: images have dimensions %v, want [count rows columns]", ip, images.Dims)
		}
		if len(labels.Dims) != 1 {
			return nil, fmt.Errorf("%s: labels have dimensions %v, want [count]", lp, labels.Dims)
		}
		if images.Dims[0] == 0 || images.Dims[1] == 0 || images.Dims[2] == 0 {
			return nil, fmt.Errorf("%s: %d images of %d×%d pixels: an empty data set", ip, images.Dims[0], images.Dims[1], images.Dims[2])
		}
		if images.Dims[0] != labels.Dims[0] {
			return nil, fmt.Errorf("%s has %d images but %s has %d labels", ip, images.Dims[0], lp, labels.Dims[0])
		}
		d := &Dataset{Name: name, Shape: [3]int{1, images.Dims[1], images.Dims[2]}, Images: images.Data, Labels: widen(labels.Data),
			Classes: classes, Mean: mnistMean, Std: mnistStd}
		return d, d.check(lp)
	}
	if train, err = load("train"); err != nil {
		return nil, nil, err
	}
	if test, err = load("t10k"); err != nil {
		return nil, nil, err
	}
	if abs, _ := filepath.Abs(dir); isFashionMNIST(train.Labels) || strings.Contains(strings.ToLower(abs), "fashion") {
		for _, d := range []*Dataset{train, test} {
			d.Name, d.Classes = "fashion-mnist", FashionMNISTClasses
		}
	}
	return train, test, nil
}

// fashionMNISTFirstLabels are the first labels of Fashion-MNIST's 60,000
// training images (train-labels-idx1-ubyte), which MNIST's (5, 0, 4, 1, …)
// and any other data set's are unlikely to begin with.
var fashionMNISTFirstLabels = []int32{9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9, 5, 5, 7, 9, 1, 0, 6, 4, 3, 1, 4, 8, 4, 3, 0, 2, 4, 4, 5, 3}

// isFashionMNIST reports whether labels are Fashion-MNIST's training
// labels: 60,000 of them, beginning as Fashion-MNIST's do.
func isFashionMNIST(labels []int32) bool {
	return len(labels) == 60000 && slices.Equal(labels[:len(fashionMNISTFirstLabels)], fashionMNISTFirstLabels)
}

// findIDX finds split-kind-idxN-ubyte in dir, gzipped or not.
func findIDX(dir, split, kind string, dims int) (string, error) {
	base := fmt.Sprintf("%s-%s-idx%d-ubyte", split, kind, dims)
	for _, name := range []string{base + ".gz", base, strings.Replace(base, "-idx", ".idx", 1)} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: no %s or %s.gz", dir, base, base)
}

// widen returns byte labels as Dataset.Labels.
func widen(b []byte) []int32 {
	l := make([]int32, len(b))
	for i, v := range b {
		l[i] = int32(v)
	}
	return l
}

// narrow returns labels as bytes (the MNIST and CIFAR-10 files' labels);
// every label must be below 256.
func narrow(l []int32) []byte {
	b := make([]byte, len(l))
	for i, v := range l {
		b[i] = byte(v)
	}
	return b
}
