package data

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gorun/gorun/model/pickle"
	"github.com/klauspost/compress/gzip"
)

// CIFAR-10's binary format: records of one label byte and 3×32×32 pixel
// bytes (the red plane, then green, then blue), 10,000 per batch file.
// Its Python version (what torchvision downloads and reads) pickles each
// batch as a dict of the labels and a numpy array of the same pixel
// rows; it is read into the same records (cifarPythonRecords).
const (
	cifarPixels = 3 * 32 * 32
	cifarRecord = 1 + cifarPixels
	cifarTar    = "cifar-10-binary.tar.gz"
	cifarSubdir = "cifar-10-batches-bin"
	cifarPyTar  = "cifar-10-python.tar.gz"
	cifarPyDir  = "cifar-10-batches-py"
)

// cifarSource is where the batch files are: a directory, or a tar.gz.
type cifarSource struct {
	dir     string // directory holding the batch files
	archive string // or the archive
}

// findCIFAR locates CIFAR-10 batches at p: the batch files in p or its
// cifar-10-batches-bin or cifar-10-batches-py subdirectory, or either
// version's archive in p, or p being an archive.
func findCIFAR(p string) (cifarSource, error) {
	if strings.HasSuffix(p, ".tar.gz") || strings.HasSuffix(p, ".tgz") {
		return cifarSource{archive: p}, nil
	}
	for _, dir := range []string{p, filepath.Join(p, cifarSubdir), filepath.Join(p, cifarPyDir)} {
		for _, first := range []string{"data_batch_1.bin", "data_batch_1"} {
			if fileExists(filepath.Join(dir, first)) {
				return cifarSource{dir: dir}, nil
			}
		}
	}
	for _, a := range []string{cifarTar, cifarPyTar} {
		if a := filepath.Join(p, a); fileExists(a) {
			return cifarSource{archive: a}, nil
		}
	}
	return cifarSource{}, fmt.Errorf("%s: no CIFAR-10 batches (data_batch_1.bin, ... test_batch.bin, or %s; or the Python version's data_batch_1, ... test_batch, in %s/ as torchvision downloads them, or %s)",
		p, cifarTar, cifarPyDir, cifarPyTar)
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// LoadCIFAR10 reads CIFAR-10's binary version: the training split from
// data_batch_1.bin, data_batch_2.bin, ... (consecutively numbered, five in
// the real dataset) and the test split from test_batch.bin, either extracted
// in p (or p/cifar-10-batches-bin) or inside cifar-10-binary.tar.gz — or
// its Python version the same way: data_batch_1, ... and test_batch, in p
// or p/cifar-10-batches-py (torchvision's CIFAR10(root=p) downloads them
// there) or inside cifar-10-python.tar.gz.
func LoadCIFAR10(p string) (train, test *Dataset, err error) {
	src, err := findCIFAR(p)
	if err != nil {
		return nil, nil, err
	}
	files := map[string][]byte{} // batch file base name → its contents
	if src.archive != "" {
		if err := readCIFARArchive(src.archive, files); err != nil {
			return nil, nil, err
		}
	} else {
		entries, err := os.ReadDir(src.dir)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range entries {
			if isCIFARBatch(e.Name()) {
				b, err := os.ReadFile(filepath.Join(src.dir, e.Name()))
				if err != nil {
					return nil, nil, err
				}
				files[e.Name()] = b
			}
		}
	}
	// The binary version's names end in .bin; the Python version's where
	// there are none of those.
	ext := ""
	for name := range files {
		if strings.HasSuffix(name, ".bin") {
			ext = ".bin"
		}
	}
	where := func(name string) string {
		if src.archive != "" {
			return src.archive + ":" + name
		}
		return filepath.Join(src.dir, name)
	}
	add := func(d *Dataset, name string) error {
		b := files[name]
		if ext == "" {
			var err error
			if b, err = cifarPythonRecords(b, where(name)); err != nil {
				return err
			}
		}
		return d.appendCIFAR(b, where(name))
	}
	train = newCIFAR()
	var names []string
	for name := range files {
		if strings.HasPrefix(name, "data_batch_") && strings.HasSuffix(name, ".bin") == (ext != "") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for i, name := range names {
		if want := fmt.Sprintf("data_batch_%d%s", i+1, ext); name != want {
			return nil, nil, fmt.Errorf("%s: training batches %v are not numbered consecutively from 1 (missing %s)", where(""), names, want)
		}
		if err := add(train, name); err != nil {
			return nil, nil, err
		}
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("%s: no training batches (data_batch_1%s, ...)", where(""), ext)
	}
	if _, ok := files["test_batch"+ext]; !ok {
		return nil, nil, fmt.Errorf("%s: no test_batch%s", where(""), ext)
	}
	test = newCIFAR()
	if err := add(test, "test_batch"+ext); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

func newCIFAR() *Dataset {
	return &Dataset{Name: "cifar10", Shape: [3]int{3, 32, 32}, Classes: CIFAR10Classes, Mean: cifarMean, Std: cifarStd}
}

// isCIFARBatch reports whether name is a batch file's of either version.
func isCIFARBatch(name string) bool {
	name = strings.TrimSuffix(name, ".bin")
	if name == "test_batch" {
		return true
	}
	n, ok := strings.CutPrefix(name, "data_batch_")
	return ok && n != "" && strings.Trim(n, "0123456789") == ""
}

// appendCIFAR adds a batch file's records; where names the file in errors.
func (d *Dataset) appendCIFAR(b []byte, where string) error {
	if len(b) == 0 || len(b)%cifarRecord != 0 {
		full := len(b) / cifarRecord
		return fmt.Errorf("%s: truncated or corrupt: %d bytes is not a whole number of %d-byte records (record %d starts at offset %d and is cut short)",
			where, len(b), cifarRecord, full, full*cifarRecord)
	}
	for off := 0; off < len(b); off += cifarRecord {
		label := b[off]
		if int(label) >= len(CIFAR10Classes) {
			return fmt.Errorf("%s: record %d at offset %d has label %d; CIFAR-10 labels are 0 to 9", where, off/cifarRecord, off, label)
		}
		d.Labels = append(d.Labels, int32(label))
		d.Images = append(d.Images, b[off+1:off+cifarRecord]...)
	}
	return nil
}

// readCIFARArchive reads the batch files out of cifar-10-binary.tar.gz or
// cifar-10-python.tar.gz.
func readCIFARArchive(archive string, files map[string][]byte) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<16))
	if err != nil {
		return fmt.Errorf("%s: gzip header: %w", archive, err)
	}
	cr := &countingReader{r: zr}
	tr := tar.NewReader(cr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: tar stream at decompressed offset %d: %w", archive, cr.off, err)
		}
		name := path.Base(h.Name)
		if h.Typeflag != tar.TypeReg || !isCIFARBatch(name) {
			continue
		}
		var buf bytes.Buffer
		buf.Grow(int(min(h.Size, 1<<28)))
		if _, err := io.Copy(&buf, tr); err != nil {
			return fmt.Errorf("%s:%s: truncated at decompressed offset %d: %w", archive, h.Name, cr.off, noEOF(err))
		}
		files[name] = buf.Bytes()
	}
	return nil
}

// cifarPythonRecords reads a batch of CIFAR-10's Python version (the
// pickle b, from where, which errors name) into the binary version's
// records.
func cifarPythonRecords(b []byte, where string) ([]byte, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s: not a batch of CIFAR-10's Python version: "+format, append([]any{where}, a...)...)
	}
	v, err := pickle.Load(b, nil)
	if err != nil {
		return nil, bad("%w", err)
	}
	d, ok := v.(*pickle.Dict)
	if !ok {
		return nil, bad("%s, not a dict", pickle.Describe(v))
	}
	pixels, n, err := numpyRows(d.M["data"], cifarPixels)
	if err != nil {
		return nil, bad("its data: %w", err)
	}
	labels, ok := d.M["labels"].(*pickle.List)
	if !ok || len(labels.Items) != n {
		return nil, bad("%d images, and for their labels %s", n, pickle.Describe(d.M["labels"]))
	}
	records := make([]byte, 0, n*cifarRecord)
	for i, l := range labels.Items {
		c, ok := l.(int64)
		if !ok || c < 0 || c >= int64(len(CIFAR10Classes)) {
			return nil, bad("label %d is %v (%s); CIFAR-10 labels are 0 to 9", i, l, pickle.Describe(l))
		}
		records = append(records, byte(c))
		records = append(records, pixels[i*cifarPixels:(i+1)*cifarPixels]...)
	}
	return records, nil
}

// numpyRows returns the bytes of a pickled two-dimensional numpy array of
// unsigned bytes with rows of width elements, in C order, and its rows.
func numpyRows(v any, width int) ([]byte, int, error) {
	o, ok := v.(*pickle.Object)
	if !ok || o.Fn.Name != "_reconstruct" || (o.Fn.Module != "numpy.core.multiarray" && o.Fn.Module != "numpy._core.multiarray") {
		return nil, 0, fmt.Errorf("%s, not a numpy array", pickle.Describe(v))
	}
	st, ok := o.State.(pickle.Tuple)
	if !ok || len(st) != 5 {
		return nil, 0, fmt.Errorf("an array's state in %s, want a tuple (version, shape, dtype, Fortran order, data)", pickle.Describe(o.State))
	}
	shape, ok := st[1].(pickle.Tuple)
	if !ok || len(shape) != 2 {
		return nil, 0, fmt.Errorf("a shape in %s, want a tuple (images, %d)", pickle.Describe(st[1]), width)
	}
	rows, ok1 := shape[0].(int64)
	cols, ok2 := shape[1].(int64)
	if !ok1 || !ok2 {
		return nil, 0, fmt.Errorf("a shape of %s and %s, want (images, %d)", pickle.Describe(shape[0]), pickle.Describe(shape[1]), width)
	}
	if cols != int64(width) || rows < 1 {
		return nil, 0, fmt.Errorf("shape (%d, %d), want (images, %d)", rows, cols, width)
	}
	dt, ok := st[2].(*pickle.Object)
	if !ok || dt.Fn != (pickle.Global{Module: "numpy", Name: "dtype"}) || len(dt.Args) == 0 || !isText(dt.Args[0], "u1") {
		return nil, 0, fmt.Errorf("element type %s, want numpy.uint8", pickle.Describe(st[2]))
	}
	if fortran, _ := st[3].(bool); fortran {
		return nil, 0, errors.New("an array in Fortran order")
	}
	data, ok := st[4].([]byte)
	if !ok || rows > int64(len(data))/cols || int64(len(data)) != rows*cols {
		return nil, 0, fmt.Errorf("%d × %d elements in %s of %d bytes", rows, cols, pickle.Describe(st[4]), len(data))
	}
	return data, int(rows), nil
}

// isText reports whether v is the text or byte string s.
func isText(v any, s string) bool {
	switch v := v.(type) {
	case string:
		return v == s
	case []byte:
		return string(v) == s
	}
	return false
}
