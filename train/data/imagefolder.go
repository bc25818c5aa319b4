package data

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg" // JPEG files, baseline and progressive, grayscale and CMYK
	"image/png"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// An image folder is torchvision's ImageFolder layout: one directory per
// class, holding that class's images (in subdirectories too), the classes
// in sorted order. LoadImageFolder reads DIR/train and DIR/val (ImageNet's
// layout after the usual reorganisation of its validation set).

// ImageExtensions are the file name endings an image folder's images have
// (as torchvision's IMG_EXTENSIONS that Go decodes), compared in lower
// case; other files are ignored.
var imageExtensions = []string{".jpg", ".jpeg", ".png"}

// undecodedExtensions are the rest of torchvision's IMG_EXTENSIONS:
// images its ImageFolder reads (through Pillow) that gorun does not
// decode. They are left out, and counted (folderScan.LeftOut), so that a
// run's image count is never silently below torchvision's.
var undecodedExtensions = []string{".bmp", ".pgm", ".ppm", ".tif", ".tiff", ".webp"}

// ImageNetMean and ImageNetStd normalise ImageNet-like data (torchvision's
// values).
var (
	ImageNetMean = []float32{0.485, 0.456, 0.406}
	ImageNetStd  = []float32{0.229, 0.224, 0.225}
)

// FolderSample is one image of an image folder.
type FolderSample struct {
	Path  string
	Class int
}

// ScanImageFolder lists the images of dir as torchvision's ImageFolder
// does: the class directories sorted by name, and under each, as
// make_dataset walks it (os.walk following symbolic links), the
// directories in sorted order of their paths and each one's files by
// name, only those with an image extension. Class directories and the
// directories under them may be symbolic links (subsets of ImageNet are
// often made of links to its class directories); a link back to a
// directory it lies in is an error naming it (os.walk would go round it
// until the path grew too long).
func ScanImageFolder(dir string) (classes []string, samples []FolderSample, err error) {
	scan, err := scanImageFolder(dir)
	return scan.Classes, scan.Samples, err
}

// folderScan is what scanImageFolder found in an image folder.
type folderScan struct {
	Classes []string
	Samples []FolderSample
	// LeftOut counts, by extension, the files torchvision's ImageFolder
	// would read as images that gorun does not decode (undecodedExtensions).
	LeftOut map[string]int
}

// leftOutNote describes left-out files (folderScan.LeftOut) for a run's
// description: "" when there are none.
func leftOutNote(leftOut map[string]int) string {
	if len(leftOut) == 0 {
		return ""
	}
	var n int
	var kinds []string
	for _, ext := range slices.Sorted(maps.Keys(leftOut)) {
		n += leftOut[ext]
		kinds = append(kinds, fmt.Sprintf("%s %d", ext, leftOut[ext]))
	}
	files := "files"
	if n == 1 {
		files = "file"
	}
	return fmt.Sprintf("%d image %s left out that torchvision's ImageFolder would read (%s): gorun decodes JPEG and PNG; convert them to use them", n, files, strings.Join(kinds, ", "))
}

// scanImageFolder is ScanImageFolder, counting the files it leaves out.
func scanImageFolder(dir string) (scan folderScan, err error) {
	var classes []string
	var samples []FolderSample
	leftOut := map[string]int{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return scan, err
	}
	for _, e := range entries {
		if isDir(dir, e) {
			classes = append(classes, e.Name())
		}
	}
	slices.Sort(classes)
	if len(classes) == 0 {
		loose := 0
		for _, e := range entries {
			if slices.Contains(imageExtensions, strings.ToLower(filepath.Ext(e.Name()))) {
				loose++
			}
		}
		if loose > 0 {
			// ImageNet's validation set comes this way.
			return scan, fmt.Errorf("%s holds %d images but no class directories (want %s/CLASS/IMAGE): sort them into a directory per class, as ImageNet's validation images are (its usual reorganisation, e.g. valprep.sh)", dir, loose, dir)
		}
		return scan, fmt.Errorf("%s: no class directories (want %s/CLASS/IMAGE)", dir, dir)
	}
	for c, name := range classes {
		paths, err := classImages(filepath.Join(dir, name), leftOut)
		if err != nil {
			return scan, err
		}
		if len(paths) == 0 {
			return scan, fmt.Errorf("%s: class %s has no images (%s)", dir, name, strings.Join(imageExtensions, ", "))
		}
		for _, p := range paths {
			samples = append(samples, FolderSample{Path: p, Class: c})
		}
	}
	return folderScan{Classes: classes, Samples: samples, LeftOut: leftOut}, nil
}

// isDir reports whether the entry e of dir is a directory or a symbolic
// link to one (as Python's DirEntry.is_dir()).
func isDir(dir string, e fs.DirEntry) bool {
	if e.IsDir() {
		return true
	}
	if e.Type()&fs.ModeSymlink == 0 {
		return false
	}
	st, err := os.Stat(filepath.Join(dir, e.Name()))
	return err == nil && st.IsDir()
}

// classImages lists the image files under root in make_dataset's order,
// counting the image files it leaves out by extension in leftOut.
func classImages(root string, leftOut map[string]int) ([]string, error) {
	type listed struct {
		dir   string
		files []string
	}
	var dirs []listed
	var walk func(dir string, above []fs.FileInfo) error
	walk = func(dir string, above []fs.FileInfo) error {
		st, err := os.Stat(dir)
		if err != nil {
			return err
		}
		for _, a := range above {
			if os.SameFile(a, st) {
				return fmt.Errorf("%s: a symbolic link loop: the directory is one it lies in", dir)
			}
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		l := listed{dir: dir}
		for _, e := range entries {
			switch {
			case isDir(dir, e):
				if err := walk(filepath.Join(dir, e.Name()), append(above, st)); err != nil {
					return err
				}
			case slices.Contains(imageExtensions, strings.ToLower(filepath.Ext(e.Name()))):
				l.files = append(l.files, e.Name()) // ReadDir sorts by name
			case slices.Contains(undecodedExtensions, strings.ToLower(filepath.Ext(e.Name()))):
				leftOut[strings.ToLower(filepath.Ext(e.Name()))]++
			}
		}
		dirs = append(dirs, l)
		return nil
	}
	if err := walk(root, nil); err != nil {
		return nil, err
	}
	slices.SortFunc(dirs, func(a, b listed) int { return strings.Compare(a.dir, b.dir) })
	var paths []string
	for _, l := range dirs {
		for _, f := range l.files {
			paths = append(paths, filepath.Join(l.dir, f))
		}
	}
	return paths, nil
}

// ReadRGB decodes the image file at path into 8-bit RGB, as Pillow's
// convert("RGB") (grayscale replicated; CMYK as Pillow converts it). Its
// errors name the file. (It is NewImageReader's Read, once.)
func ReadRGB(path string) (*RGB, error) {
	r := NewImageReader()
	defer r.Close()
	return r.Read(path)
}

// ImageReader reads image files into 8-bit RGB as Pillow's
// convert("RGB"). JPEG files are decoded by libjpeg-turbo, the library
// Pillow uses, when its TurboJPEG library loads (libturbojpeg.so.0, or
// GORUN_TURBOJPEG's path): byte for byte Pillow's pixels, several times
// faster than Go; otherwise, or with GORUN_JPEG=go, by Go's image/jpeg
// (within 2 levels of Pillow's). CMYK JPEGs and PNGs are decoded by Go.
// An ImageReader serves one goroutine at a time and reuses its file
// buffer.
type ImageReader struct {
	tj      *turboJPEG // nil: Go's decoder
	why     string     // why not TurboJPEG
	buf     []byte
	scratch bytes.Reader
	chroma  chromaRows // Go's decoder's colour conversion (ycbcrToRGB)
	// maxPixels is the most pixels an image may declare; 0: MaxImagePixels
	// (tests set less, so that fuzzing does not spend its time decoding
	// garbage into images of a hundred million pixels).
	maxPixels int
}

// NewImageReader returns a reader, with TurboJPEG where it loads.
func NewImageReader() *ImageReader {
	r := &ImageReader{}
	if os.Getenv("GORUN_JPEG") == "go" {
		r.why = "GORUN_JPEG=go"
		return r
	}
	tj, err := openTurboJPEG()
	if err != nil {
		r.why = err.Error()
		return r
	}
	r.tj = tj
	return r
}

// Decoder describes the JPEG decoder in use, and why when it is Go's.
func (r *ImageReader) Decoder() string {
	if r.tj != nil {
		return "libjpeg-turbo (" + r.tj.path + ")"
	}
	return "Go image/jpeg: " + r.why
}

// Read decodes the image file at path; errors name the file.
func (r *ImageReader) Read(path string) (*RGB, error) { return r.readInto(path, nil) }

// readInto is Read decoding into reuse's pixel buffer where it can (a
// JPEG by libjpeg-turbo that fits).
func (r *ImageReader) readInto(path string, reuse *RGB) (*RGB, error) {
	b, err := r.readFile(path)
	if err != nil {
		return nil, err
	}
	return r.decode(b, path, reuse)
}

// decode decodes the image file contents b (from where, which errors
// name), into reuse's buffer where it can.
func (r *ImageReader) decode(b []byte, where string, reuse *RGB) (*RGB, error) {
	if len(b) == 0 {
		return nil, emptyImageFile(where)
	}
	limit := cmp.Or(r.maxPixels, MaxImagePixels)
	if r.tj != nil && len(b) > 2 && b[0] == 0xff && b[1] == 0xd8 {
		m, err := r.tj.decode(b, reuse, limit)
		if err != nil {
			return nil, fmt.Errorf("%s: not a JPEG image that decodes: %w", where, err)
		}
		if m != nil {
			return m, nil
		}
	}
	r.scratch.Reset(b)
	img, err := decodeBounded(&r.scratch, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: not an image Go decodes (JPEG or PNG): %w", where, err)
	}
	return toRGB(img, reuse, &r.chroma), nil
}

// readFile reads the file at path into the reader's buffer.
func (r *ImageReader) readFile(path string) ([]byte, error) {
	f, st, err := openImageFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := checkImageFileSize(st.Size()); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(cap(r.buf)) < st.Size() {
		r.buf = make([]byte, st.Size())
	}
	n, err := io.ReadFull(f, r.buf[:st.Size()])
	if err != nil {
		return nil, fmt.Errorf("%s: read %d of its %d bytes: %w", path, n, st.Size(), err)
	}
	return r.buf[:n], nil
}

// Close frees the decoder.
func (r *ImageReader) Close() {
	if r.tj != nil {
		r.tj.close()
		r.tj = nil
	}
}

// toRGB converts img to RGB as Pillow's convert("RGB") does, into
// reuse's pixel buffer where it holds the image; s is the colour
// conversion's scratch.
func toRGB(img image.Image, reuse *RGB, s *chromaRows) *RGB {
	r := img.Bounds()
	var m *RGB // made after the switch: the YCbCr case makes its own
	// Per pixel: the colour at (x, y) of the decoder's own layout, written
	// to m.Pix[i:i+3].
	var pixel func(x, y, i int)
	switch src := img.(type) {
	case *image.YCbCr:
		if c := ycbcrToRGB(src, reuse, s); c != nil {
			return c
		}
	case *image.NRGBA:
		// Alpha dropped, colours as stored: Pillow's RGBA → RGB.
		pixel = func(x, y, i int) { o := src.PixOffset(x, y); copy(m.Pix[i:i+3], src.Pix[o:o+3]) }
	case *image.RGBA:
		pixel = func(x, y, i int) { o := src.PixOffset(x, y); copy(m.Pix[i:i+3], src.Pix[o:o+3]) }
	case *image.Gray:
		pixel = func(x, y, i int) {
			v := src.Pix[src.PixOffset(x, y)]
			m.Pix[i], m.Pix[i+1], m.Pix[i+2] = v, v, v
		}
	case *image.CMYK:
		// Pillow: each channel 255 − min(255, colour + black).
		pixel = func(x, y, i int) {
			o := src.PixOffset(x, y)
			k := int(src.Pix[o+3])
			for c := range 3 {
				m.Pix[i+c] = byte(255 - min(255, int(src.Pix[o+c])+k))
			}
		}
	case *image.Paletted:
		pixel = func(x, y, i int) {
			c := color.NRGBAModel.Convert(src.Palette[src.Pix[src.PixOffset(x, y)]]).(color.NRGBA)
			m.Pix[i], m.Pix[i+1], m.Pix[i+2] = c.R, c.G, c.B
		}
	}
	m = fitRGB(reuse, r.Dx(), r.Dy())
	if pixel == nil { // any other model, through its colours
		pixel = func(x, y, i int) {
			c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
			m.Pix[i], m.Pix[i+1], m.Pix[i+2] = c.R, c.G, c.B
		}
	}
	i := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			pixel(x, y, i)
			i += 3
		}
	}
	return m
}

// EvalTransform is torchvision's ImageNet evaluation transform up to
// normalisation: Resize(resize) (shorter side), then CenterCrop(crop).
func EvalTransform(m *RGB, resize, crop int) (*RGB, error) {
	r := m.ResizeShort(resize)
	if r.W < crop || r.H < crop {
		return nil, fmt.Errorf("%d×%d resized to %d×%d is smaller than the %d×%d crop", m.W, m.H, r.W, r.H, crop, crop)
	}
	return r.CenterCrop(crop), nil
}

// imageFolderPrefix begins the Dataset.Name of an image folder.
const imageFolderPrefix = "imagefolder:"

// FromImageFolder reports whether the dataset named name (a Dataset's or
// a checkpoint's) was read from an image folder.
func FromImageFolder(name string) bool { return strings.HasPrefix(name, imageFolderPrefix) }

// ReadEvalImage reads the image at path as evaluation on an image folder
// takes it: Resize(crop·8/7), CenterCrop(crop) (224: torchvision's 256 and
// 224), as channel-planar bytes.
func ReadEvalImage(path string, crop int) ([]byte, error) { return appendEvalImage(nil, path, crop) }

// appendEvalImage is ReadEvalImage appending to b.
func appendEvalImage(b []byte, path string, crop int) ([]byte, error) {
	m, err := ReadRGB(path)
	if err != nil {
		return nil, err
	}
	if m, err = EvalTransform(m, crop*8/7, crop); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return appendCHW(b, m), nil
}

// LoadImageFolder reads the list of an image folder's train and val
// splits (each a torchvision ImageFolder): the datasets' images stay in
// their files, decoded by the loader as batches need them, crop×crop
// (Dataset.Files). The classes are train's; val must have the same.
func LoadImageFolder(dir string, crop int) (train, test *Dataset, err error) {
	var splits [2]*Dataset
	for i, split := range []string{"train", "val"} {
		if st, err := os.Stat(filepath.Join(dir, split)); err != nil || !st.IsDir() {
			return nil, nil, fmt.Errorf("%s is not an image folder: it has no %s/ directory (want %s/train/CLASS/IMAGE and %s/val/CLASS/IMAGE)", dir, split, dir, dir)
		}
		scan, err := scanImageFolder(filepath.Join(dir, split))
		if err != nil {
			return nil, nil, err
		}
		classes, samples := scan.Classes, scan.Samples
		if len(classes) > 1<<15 {
			return nil, nil, fmt.Errorf("%s: %d classes", filepath.Join(dir, split), len(classes))
		}
		if i == 1 && !slices.Equal(classes, splits[0].Classes) {
			return nil, nil, fmt.Errorf("%s has classes %v, %s has %v: they must be the same", filepath.Join(dir, "val"), classes, filepath.Join(dir, "train"), splits[0].Classes)
		}
		d := &Dataset{Name: imageFolderPrefix + filepath.Base(filepath.Clean(dir)), Shape: [3]int{3, crop, crop}, Classes: classes,
			Mean: slices.Clone(ImageNetMean), Std: slices.Clone(ImageNetStd), Files: make([]string, len(samples)), Labels: make([]int32, len(samples)),
			LeftOut: leftOutNote(scan.LeftOut)}
		for j, s := range samples {
			d.Files[j], d.Labels[j] = s.Path, int32(s.Class)
		}
		splits[i] = d
	}
	return splits[0], splits[1], nil
}

// appendCHW appends m's samples channel by channel (the layout Dataset
// holds).
func appendCHW(b []byte, m *RGB) []byte {
	for c := range 3 {
		for p := 0; p < m.W*m.H; p++ {
			b = append(b, m.Pix[3*p+c])
		}
	}
	return b
}

// isImageFolder reports whether dir holds train/ and val/ directories of
// class directories.
func isImageFolder(dir string) bool {
	for _, split := range []string{"train", "val"} {
		if st, err := os.Stat(filepath.Join(dir, split)); err != nil || !st.IsDir() {
			return false
		}
	}
	return true
}

// partOfImageFolder reports a directory inside an image folder: the
// folder's root, the split dir is or lies in (train or val) and, for a
// directory inside a split, the class it belongs to; root is "" when dir
// is in no image folder.
func partOfImageFolder(dir string) (root, split, class string) {
	paths := []string{filepath.Clean(dir)}
	if abs, err := filepath.Abs(dir); err == nil {
		paths = append(paths, abs) // for "." and "..": named by their place
	}
	for _, p := range paths {
		// Up from p to the split: the name below it is the class.
		for below := ""; ; below, p = filepath.Base(p), filepath.Dir(p) {
			if name := filepath.Base(p); (name == "train" || name == "val") && isImageFolder(filepath.Dir(p)) {
				return filepath.Dir(p), name, below
			}
			if filepath.Dir(p) == p {
				break
			}
		}
	}
	return "", "", ""
}

// halfImageFolder reports an image folder with one of its two splits:
// the split dir has (train or val) and the one it lacks, or "" for both
// when dir has both or neither.
func halfImageFolder(dir string) (split, missing string) {
	isDir := func(split string) bool {
		st, err := os.Stat(filepath.Join(dir, split))
		return err == nil && st.IsDir()
	}
	switch train, val := isDir("train"), isDir("val"); {
	case train && !val:
		return "train", "val"
	case val && !train:
		return "val", "train"
	}
	return "", ""
}

// WriteImageFolder writes train and test, 3-channel datasets, as an image
// folder: DIR/train/CLASS/NNNNNN.EXT and DIR/val/CLASS/NNNNNN.EXT, each
// image scaled to w×h (Pillow's bilinear), as JPEG (ext ".jpg", quality
// 90) or PNG (".png").
func WriteImageFolder(dir string, train, test *Dataset, w, h int, ext string) error {
	if ext != ".jpg" && ext != ".png" {
		return fmt.Errorf("image folder: format %q: want .jpg or .png", ext)
	}
	splits := []struct {
		split string
		d     *Dataset
	}{{"train", train}, {"val", test}}
	// Both splits checked before anything is written.
	for _, s := range splits {
		if s.d.Shape[0] != 3 {
			return fmt.Errorf("image folder: %s has %d channels, want 3", s.d.Name, s.d.Shape[0])
		}
		count := make([]int, len(s.d.Classes))
		for _, l := range s.d.Labels {
			count[l]++
		}
		if k := slices.Index(count, 0); k >= 0 {
			return fmt.Errorf("image folder: class %s would have none of the %d %s images: write more (a class directory without images cannot be read, by torchvision's ImageFolder either)", s.d.Classes[k], s.d.Len(), s.split)
		}
	}
	for _, s := range splits {
		root := filepath.Join(dir, s.split)
		n, first, err := strays(root, s.d, ext)
		if err != nil {
			return fmt.Errorf("image folder: %w", err)
		}
		if n > 0 {
			what := fmt.Sprintf("%d files or directories", n)
			if n == 1 {
				what = "a file or directory"
			}
			return fmt.Errorf("image folder: %s already holds %s this run would not write (%s): the folder would mix them in with its %d %s images; remove %s or write to another directory",
				root, what, first, s.d.Len(), s.split, dir)
		}
	}
	for _, s := range splits {
		for _, c := range s.d.Classes {
			if err := os.MkdirAll(filepath.Join(dir, s.split, c), 0o755); err != nil {
				return err
			}
		}
		for i := range s.d.Len() {
			m := fromCHW(s.d.Image(i), s.d.Shape[2], s.d.Shape[1]).Resize(w, h)
			path := folderImagePath(filepath.Join(dir, s.split), s.d, i, ext)
			if err := writeImage(path, m.nrgba(), ext); err != nil {
				return err
			}
		}
	}
	return nil
}

// folderImagePath is where WriteImageFolder writes d's image i under root
// (a split's directory): its class's directory, the index as the name.
func folderImagePath(root string, d *Dataset, i int, ext string) string {
	return filepath.Join(root, d.Classes[d.Labels[i]], fmt.Sprintf("%06d%s", i, ext))
}

// strays counts what root (a split's directory) already holds that
// writing d's images there, as WriteImageFolder names them, would not
// overwrite: files and class directories of an earlier run, or of
// someone else's. first is one of them.
func strays(root string, d *Dataset, ext string) (n int, first string, err error) {
	want := map[string]bool{}
	for _, c := range d.Classes {
		want[filepath.Join(root, c)] = true
	}
	for i := range d.Labels {
		want[folderImagePath(root, d, i, ext)] = true
	}
	err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		switch {
		case path == root && errors.Is(err, fs.ErrNotExist):
			return fs.SkipAll // nothing there yet
		case err != nil:
			return err
		case path == root:
			return nil
		case !want[path]:
			n++
			if first == "" {
				first = path
			}
			if e.IsDir() {
				return fs.SkipDir // counted as one
			}
		}
		return nil
	})
	return n, first, err
}

// nrgba returns m as an opaque image.NRGBA (for Go's encoders).
func (m *RGB) nrgba() *image.NRGBA {
	img := &image.NRGBA{Pix: make([]byte, 4*m.W*m.H), Stride: 4 * m.W, Rect: image.Rect(0, 0, m.W, m.H)}
	for p := range m.W * m.H {
		copy(img.Pix[4*p:4*p+3], m.Pix[3*p:3*p+3])
		img.Pix[4*p+3] = 255
	}
	return img
}

// fromCHW makes an RGB image of channel-planar bytes.
func fromCHW(b []byte, w, h int) *RGB {
	m := NewRGB(w, h)
	for c := range 3 {
		for p := range w * h {
			m.Pix[3*p+c] = b[c*w*h+p]
		}
	}
	return m
}

func writeImage(path string, img image.Image, ext string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if ext == ".png" {
		err = png.Encode(f, img)
	} else {
		err = jpeg.Encode(f, img, &jpeg.Options{Quality: 90})
	}
	return errors.Join(err, f.Close())
}
