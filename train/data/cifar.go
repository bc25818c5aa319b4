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

	"github.com/klauspost/compress/gzip"
)

// CIFAR-10's binary format: records of one label byte and 3×32×32 pixel
// bytes (the red plane, then green, then blue), 10,000 per batch file.
const (
	cifarPixels = 3 * 32 * 32
	cifarRecord = 1 + cifarPixels
	cifarTar    = "cifar-10-binary.tar.gz"
	cifarSubdir = "cifar-10-batches-bin"
)

// cifarSource is where the batch files are: a directory, or a tar.gz.
type cifarSource struct {
	dir     string // directory holding the .bin files
	archive string // or the archive
}

// findCIFAR locates CIFAR-10 batches at p: the .bin files in p or its
// cifar-10-batches-bin subdirectory, or cifar-10-binary.tar.gz in p, or p
// being that archive.
func findCIFAR(p string) (cifarSource, error) {
	if strings.HasSuffix(p, ".tar.gz") || strings.HasSuffix(p, ".tgz") {
		return cifarSource{archive: p}, nil
	}
	for _, dir := range []string{p, filepath.Join(p, cifarSubdir)} {
		if _, err := os.Stat(filepath.Join(dir, "data_batch_1.bin")); err == nil {
			return cifarSource{dir: dir}, nil
		}
	}
	if a := filepath.Join(p, cifarTar); fileExists(a) {
		return cifarSource{archive: a}, nil
	}
	return cifarSource{}, fmt.Errorf("%s: no CIFAR-10 batches (data_batch_1.bin, ... test_batch.bin, or %s)", p, cifarTar)
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// LoadCIFAR10 reads CIFAR-10's binary version: the training split from
// data_batch_1.bin, data_batch_2.bin, ... (consecutively numbered, five in
// the real dataset) and the test split from test_batch.bin, either extracted
// in p (or p/cifar-10-batches-bin) or inside cifar-10-binary.tar.gz.
func LoadCIFAR10(p string) (train, test *Dataset, err error) {
	src, err := findCIFAR(p)
	if err != nil {
		return nil, nil, err
	}
	files := map[string][]byte{} // batch file base name → records
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
	where := func(name string) string {
		if src.archive != "" {
			return src.archive + ":" + name
		}
		return filepath.Join(src.dir, name)
	}
	train = newCIFAR()
	var names []string
	for name := range files {
		if name != "test_batch.bin" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for i, name := range names {
		if want := fmt.Sprintf("data_batch_%d.bin", i+1); name != want {
			return nil, nil, fmt.Errorf("%s: training batches %v are not numbered consecutively from 1 (missing %s)", where(""), names, want)
		}
		if err := train.appendCIFAR(files[name], where(name)); err != nil {
			return nil, nil, err
		}
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("%s: no training batches (data_batch_1.bin, ...)", where(""))
	}
	tb, ok := files["test_batch.bin"]
	if !ok {
		return nil, nil, fmt.Errorf("%s: no test_batch.bin", where(""))
	}
	test = newCIFAR()
	if err := test.appendCIFAR(tb, where("test_batch.bin")); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

func newCIFAR() *Dataset {
	return &Dataset{Name: "cifar10", Shape: [3]int{3, 32, 32}, Classes: CIFAR10Classes, Mean: cifarMean, Std: cifarStd}
}

func isCIFARBatch(name string) bool {
	return name == "test_batch.bin" || (strings.HasPrefix(name, "data_batch_") && strings.HasSuffix(name, ".bin"))
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

// readCIFARArchive reads the batch files out of cifar-10-binary.tar.gz.
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
